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

pytest_plugins = ["tests.cpu_profile"]  # AGENTSVC_SUITE_CPU=FILE: the CPU of each test

TEST_PLUGINS = "tests.plugins"
if TEST_PLUGINS not in plugin_modules():
    os.environ[PLUGINS_ENV] = ",".join([*plugin_modules(), TEST_PLUGINS])

# agents.py runs one worker process per core by default; the suite's starts (the harness's
# and the few that start agents.py or serve.py themselves) run one unless a test asks for more.
os.environ.setdefault("AGENTSVC_PROCESSES", "1")

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
def phoenix(tmp_path):
    """Arize Phoenix receiving OTLP/HTTP traces, for one test (tests/servers.py)."""
    from tests.servers import Phoenix

    server = Phoenix(str(tmp_path))
    yield server
    server.stop()


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


# ---- running the suite on several workers (pytest-xdist) ---------------------------------
#
# pyproject's addopts run pytest with ``-n auto --dist loadgroup``: the tests are
# shared among WORKERS processes, a module at a time (so a module's fixtures, its
# shared service above all, are made once), longest first.  Most of a test's time
# here is waiting (for agents.py and app.py to start, for a model, for a session to
# step), so on two cores more than one worker keeps the cores busy where one left
# them idle.  Two, not four: four on two cores made a load of 10-15 for the whole
# run (38 minutes instead of 59 in one process), and each of three such runs had
# 4-8 tests fail on deadlines and races that load exposes; the suite must pass
# with a build running beside it, so it does not make that load itself.
# A run of one module, or ``-n 0``, runs in this process as before.

WORKERS = 2

# The modules that take longest, started first so that none is left to run alone
# at the end (measured with --durations; tests/README.md keeps the table).
LONGEST_FIRST = (
    "real_model/test_real_model.py",
    "service/test_bench_smoke.py",
)


def environment_as_os_environ_says() -> None:
    """Child processes get the environment ``os.environ`` holds, and nothing else.

    pytest imports ``readline``, and GNU readline puts ``COLUMNS=80`` and
    ``LINES`` into the process's own (C) environment without telling
    ``os.environ``.  A child started without an explicit ``env`` (an xdist worker,
    above all) inherited them, so in the workers the CLI's tables folded at 80
    columns (cli/render.py) where the same tests in one process saw 200."""
    for name in ("COLUMNS", "LINES"):
        if name not in os.environ:
            os.unsetenv(name)


environment_as_os_environ_says()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist starts its workers
def pytest_sessionstart(session):
    environment_as_os_environ_says()


def selected_modules(config) -> int:
    """How many test modules the command line names (a folder counts its modules)."""
    count = 0
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0])
        if not path.exists():  # testpaths are relative to the root
            path = Path(config.rootpath, arg.split("::")[0])
        count += len(list(path.rglob("test_*.py"))) if path.is_dir() else 1
    return count


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: -p no:xdist
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: WORKERS, or fewer when fewer modules are selected; none for one
    module. PYTEST_XDIST_AUTO_NUM_WORKERS still wins (pytest-xdist's own variable)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    modules = selected_modules(config)
    return min(WORKERS, modules) if modules > 1 else 0


def module_of(item) -> str:
    return item.path.relative_to(TESTS).as_posix() if item.path.is_relative_to(TESTS) else str(item.path)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Mark every test with its folder's tier (``pytest -m unit``; tests/README.md
    says what each tier needs), put each module's tests in one xdist group (unless a
    test names its own), and order the modules longest first."""
    for item in items:
        parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
        if parts and parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(module_of(item)))
    first = {module: rank for rank, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(module_of(item), len(first)))  # stable: the rest keep their order
