"""domain/plugin_registry.py: the operator's AGENTSVC_PLUGINS modules reach
both registries; a module that cannot be used stops startup with its name and
the reason; the test-only monikers and tools are not built in."""
import sys
import textwrap

import pytest

from domain.plugin_registry import PLUGINS_ENV, PluginError, plugin_modules
from monikers import MonikerRegistry, default_registry
from monikers import builtin as builtin_monikers
from tools import builtin as builtin_tools
from tools.tool_registry import ToolRegistry, default_tool_registry

TEST_ONLY_MONIKERS = {"chaos", "sleepy"}
TEST_ONLY_TOOLS = {"add", "repeat", "fail", "sleep_count", "sleep_count_idempotent"}


def test_the_test_only_monikers_and_tools_are_not_built_in_but_reach_the_tests_registries():
    assert not TEST_ONLY_MONIKERS & {m.name for m in builtin_monikers.BUILTINS}
    assert not TEST_ONLY_TOOLS & {t.name for t in builtin_tools.BUILTINS}
    assert "tests.plugins" in plugin_modules()  # tests/conftest.py
    assert TEST_ONLY_MONIKERS <= set(default_registry().names())
    assert TEST_ONLY_TOOLS <= set(default_tool_registry().names())


def test_without_the_setting_the_registries_hold_only_what_is_built_in_or_installed(monkeypatch):
    monkeypatch.delenv(PLUGINS_ENV)
    assert not TEST_ONLY_MONIKERS & set(default_registry().names())
    assert not TEST_ONLY_TOOLS & set(default_tool_registry().names())
    assert {"joke", "countdown", "echo", "scripted"} <= set(default_registry().names())
    assert {"wait", "human", "ask_user"} <= set(default_tool_registry().names())


@pytest.fixture
def module(tmp_path, monkeypatch):
    """Writes an importable module; removed from sys.modules afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def test_a_named_module_adds_its_monikers_and_tools_in_order_and_replaces_by_name(module):
    first = module("plug_first", '''
        from monikers.builtin import ECHO
        from monikers.frame import Moniker
        from tools.builtin import WAIT
        MONIKERS = (Moniker("parrot", ECHO.step, "first"),)
        TOOLS = (WAIT,)
    ''')
    second = module("plug_second", '''
        from monikers.builtin import ECHO
        from monikers.frame import Moniker
        MONIKERS = (Moniker("parrot", ECHO.step, "second"),)
    ''')
    monikers, tools = MonikerRegistry(), ToolRegistry()
    assert monikers.load_plugins({PLUGINS_ENV: f" {first} ,{second},"}) == ["parrot", "parrot"]
    assert monikers.get("parrot").description == "second"
    assert tools.load_plugins({PLUGINS_ENV: f"{first},{second}"}) == ["wait"]


@pytest.mark.parametrize("source, reason", [
    (None, "cannot be imported: ModuleNotFoundError"),
    ("raise RuntimeError('boom')\n", "cannot be imported: RuntimeError: boom"),
    ("X = 1\n", "exposes neither MONIKERS nor TOOLS"),
    ("MONIKERS = ['not a moniker']\n", "MONIKERS holds a str, not a Moniker"),
])
def test_a_module_that_cannot_be_used_is_a_startup_error_naming_it(module, source, reason):
    name = module("plug_bad", source) if source is not None else "plug_missing"
    with pytest.raises(PluginError, match=f"{name}.*{reason}"):
        MonikerRegistry().load_plugins({PLUGINS_ENV: name})
