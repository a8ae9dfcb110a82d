"""The project's own kill loop over every kind of work (issue 37): tools,
approvals, sub-agents, questions, replays, a conversation and controls in
flight while agents.py, app.py, or both are killed with SIGKILL and
restarted; then the record must show nothing lost, nothing run twice, every
outcome delivered once, no row left running, no gap (tests/kill_loop.py says
what each check reads).

The seed is fixed and printed (AGENTSVC_KILL_LOOP_SEED overrides it); the kills
land at different instants of the service's work on every run anyway.

    pytest tests/service/test_kill_loop.py -s                         # 20 kills (the suite's)
    AGENTSVC_LONG_TESTS=1 AGENTSVC_KILL_LOOP_KILLS=300 \\
        pytest tests/service/test_kill_loop.py -s -k long              # as many kills as asked

The loop runs on local disk here; tests/service/test_object_storage.py runs it
on SeaweedFS with the S3 server among the victims.
"""
import os

import pytest

from tests.harness import Service, wait_for
from tests.kill_loop import KillLoop
from tests.plugins import COUNT_DIR_ENV

SEED = int(os.environ.get("AGENTSVC_KILL_LOOP_SEED", "20261127"))
LONG = os.environ.get("AGENTSVC_LONG_TESTS") == "1"


# Twenty kills here (issue 37 asks at least 20 in the README's test command; ~11 s a
# kill on a quiet machine, ~30 s beside the suite); the loop on object storage,
# the S3 server's among them, runs under AGENTSVC_LONG_TESTS for now
# (tests/service/test_object_storage.py says why).  Each kind of kill and of work in flight is met; the long runs
# (below) give the figures.
@pytest.mark.timeout(1800)  # ~2-3 minutes on a quiet machine; a loaded one restarts agents.py slowly
def test_kill_loop_over_every_kind_of_work(service):
    figures = KillLoop(service, SEED, kills=20).run()
    assert figures["actions accepted"] > 0 and figures["replays"] > 0


KILLS = int(os.environ.get("AGENTSVC_KILL_LOOP_KILLS", "200"))


@pytest.mark.skipif(not LONG, reason="long kill loop: set AGENTSVC_LONG_TESTS=1 (and AGENTSVC_KILL_LOOP_KILLS)")
@pytest.mark.timeout(1800 + 60 * KILLS)
def test_kill_loop_over_every_kind_of_work_long(service):
    kills = KILLS
    figures = KillLoop(service, SEED + kills, kills=kills).run()
    assert figures["actions accepted"] > 0


@pytest.fixture
def two_workers(tmp_path_factory):
    """agents.py with two worker processes (``--processes 2``) and app.py."""
    root = tmp_path_factory.mktemp("two-workers")
    (root / "logs").mkdir()
    (root / "counts").mkdir()
    svc = Service(str(root / "data"), str(root / "logs"), agents_args=["--processes", "2"],
                  env={COUNT_DIR_ENV: str(root / "counts")})
    svc.count_dir = str(root / "counts")
    svc.start()
    wait_for(lambda: svc.get("/readyz").json().get("workers_polling", 0) >= 2, timeout=240, interval=0.2,
             what="2 workers polling")
    yield svc
    svc.stop()


@pytest.mark.skipif(not LONG, reason="long kill loop: set AGENTSVC_LONG_TESTS=1 (and AGENTSVC_KILL_LOOP_KILLS)")
@pytest.mark.timeout(1800 + 60 * KILLS)
def test_kill_loop_over_two_worker_processes_long(two_workers):
    """The same work with ``--processes 2``: one worker killed at a time (its
    sessions stay with it across its restart, their controls and children's
    results cross between the two), the whole agents.py, app.py, or both."""
    loop = KillLoop(two_workers, SEED + 2 * KILLS, kills=KILLS,
                    targets={"worker": 0.6, "agents": 0.2, "app": 0.1, "both": 0.1})
    figures = loop.run()
    assert figures["actions accepted"] > 0 and loop.figures["kills: worker"] > 0
