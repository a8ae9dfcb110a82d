"""Fixtures shared by every tier, and the test-only plugins.

The monikers and tools that exist only to test the service (tests/plugins.py)
are registered through the operator's plugin setting, ``AGENTSVC_PLUGINS``:
set here at import, before any test builds a registry, it reaches the
registries of this process and of every agents.py and app.py a test starts
(they inherit the environment).
"""
import os
from pathlib import Path

import pytest

from domain.plugin_registry import PLUGINS_ENV, plugin_modules

TEST_PLUGINS = "tests.plugins"
if TEST_PLUGINS not in plugin_modules():
    os.environ[PLUGINS_ENV] = ",".join([*plugin_modules(), TEST_PLUGINS])

from tests.harness import Service  # noqa: E402
from tests.llm_endpoints import EndpointsFile  # noqa: E402
from tests.plugins import COUNT_DIR_ENV  # noqa: E402


def _start(tmp_path_factory, name: str) -> Service:
    root = tmp_path_factory.mktemp(name)
    (root / "logs").mkdir()
    (root / "counts").mkdir()  # where the counting test tools record each execution
    svc = Service(str(root / "data"), str(root / "logs"), env={COUNT_DIR_ENV: str(root / "counts")})
    svc.count_dir = str(root / "counts")
    return svc.start()


@pytest.fixture
def service(tmp_path_factory):
    """A running agents.py + app.py pair on a fresh data directory, for one test
    (use it when the test kills or restarts processes)."""
    svc = _start(tmp_path_factory, "svc")
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def shared_service(tmp_path_factory):
    """One running service shared by the tests of a module that only add agents."""
    svc = _start(tmp_path_factory, "shared")
    yield svc
    svc.stop()


@pytest.fixture
def llm_endpoints(tmp_path, monkeypatch):
    """An endpoints file installed as this process's catalog for one test: for
    sessions run in this process and settings resolved here, a test adds its
    fake servers to it (``llm_endpoints.llm(server)``, tests/llm_endpoints.py)."""
    from monikers import endpoints

    file = EndpointsFile(tmp_path / "endpoints.json")
    monkeypatch.setattr(endpoints, "_catalog", endpoints.EndpointCatalog(file.path))
    return file


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On failure, attach the service logs to the report."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for name in ("service", "shared_service", "cluster"):
            svc = item.funcargs.get(name)
            if svc is not None:
                report.sections.append((f"{name} logs", svc.logs()))


TESTS = Path(__file__).parent
TIERS = ("unit", "service", "browser", "real_model")  # folders, and the markers of their tests


def pytest_collection_modifyitems(config, items):
    """Mark every test with its folder's tier (``pytest -m unit``); tests/README.md
    says what each tier needs."""
    for item in items:
        parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
        if parts and parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))
