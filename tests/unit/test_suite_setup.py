"""tests/conftest.py: how many xdist workers a run gets, and the environment
its child processes (the workers among them) start with."""
import ctypes
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest

TESTS = Path(conftest.__file__).parent


def config(*args: str, cwd: Path = TESTS.parent):
    return SimpleNamespace(args=list(args), invocation_params=SimpleNamespace(dir=cwd), rootpath=TESTS.parent)


@pytest.mark.parametrize("args, workers", [
    (["tests/unit/test_ids.py"], 0),  # one module: in this process, as before
    (["tests/unit/test_ids.py::test_ids_are_in_order_in_one_thread_and_unique_across_refills_and_threads"], 0),
    (["tests/unit/test_ids.py", "tests/unit/test_codec.py"], 2),
    (["tests/unit"], conftest.WORKERS),
    (["tests"], conftest.WORKERS),
])
def test_auto_gives_a_worker_to_each_module_up_to_the_limit(monkeypatch, args, workers):
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    assert conftest.pytest_xdist_auto_num_workers(config(*args)) == workers


def test_testpaths_count_from_the_root_wherever_pytest_was_started(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    assert conftest.pytest_xdist_auto_num_workers(config("tests", cwd=TESTS / "unit")) == conftest.WORKERS


def test_xdists_own_variable_still_decides(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert conftest.pytest_xdist_auto_num_workers(config("tests")) is None  # pytest-xdist reads it then


def test_a_child_starts_with_what_os_environ_holds_not_what_readline_set(monkeypatch):
    """GNU readline (pytest imports it) sets COLUMNS in the C environment behind
    os.environ's back; a child started without env= inherited it."""
    monkeypatch.delenv("COLUMNS", raising=False)
    libc = ctypes.CDLL(None)
    libc.setenv(b"COLUMNS", b"80", 1)  # what readline does
    try:
        conftest.environment_as_os_environ_says()
        child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('COLUMNS'))"],
                               capture_output=True, text=True, timeout=60)
        assert child.stdout.strip() == "None"
    finally:
        libc.unsetenv(b"COLUMNS")
