"""``agents.py --processes 2`` (runtime/worker/processes.py): a supervisor and
two worker processes on one data dir.  New sessions spread between the
workers (runtime/dispatch/create_share.py); a worker killed with SIGKILL is
restarted under its old id and nothing is lost (the crash harness's checks);
SIGTERM stops them all; a SIGKILL of the supervisor leaves no worker behind."""
import os
import signal
from collections import Counter

import psutil
import pytest

from store.commit_lock import lock_dir_for
from tests.harness import Service, wait_for
from tests.plugins import COUNT_DIR_ENV
from tests.service.test_crash_harness import SEED, run_crash_harness


def start(tmp_path_factory, name: str, processes: int = 2, more_args=()) -> Service:
    root = tmp_path_factory.mktemp(name)
    (root / "logs").mkdir()
    (root / "counts").mkdir()
    svc = Service(str(root / "data"), str(root / "logs"), agents_args=["--processes", str(processes), *more_args],
                  env={COUNT_DIR_ENV: str(root / "counts")})
    svc.count_dir = str(root / "counts")
    svc.start()
    wait_for(lambda: svc.get("/readyz").json().get("workers_polling", 0) >= processes, timeout=240,
             interval=0.2, what=f"{processes} workers polling")
    return svc


def workers_of(svc: Service) -> list[psutil.Process]:
    """The supervisor's worker processes, alive (a killed one not yet reaped is gone)."""
    return [p for p in psutil.Process(svc.agents.pid).children()
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def gone(pids) -> bool:
    def dead(pid):
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    return all(dead(pid) for pid in pids)


@pytest.fixture
def two(tmp_path_factory):
    svc = start(tmp_path_factory, "procs")
    yield svc
    svc.stop()


@pytest.fixture
def two_patient(tmp_path_factory):
    """Two workers that leave each create to its rendezvous worker for two minutes
    (``--create-grace 120``): the share is then the hash's, whatever the load.
    With the default 10 s, a worker slowed by a loaded machine lets the other take
    its creates after the grace, as designed, and the split follows the load
    (one run beside a long kill loop: 130 / 70)."""
    svc = start(tmp_path_factory, "procs-share", more_args=("--create-grace", "120"))
    yield svc
    svc.stop()


def test_two_processes_share_new_sessions_fairly_and_stop_on_sigterm(two_patient):
    two = two_patient
    sessions = [two.create("echo", f"s{i}", config={"interval_s": 5})["session_id"] for i in range(200)]
    owners = wait_for(lambda: (o := Counter(two.session(s).get("owner") for s in sessions)) and None not in o and o,
                      timeout=300, interval=0.5, what="200 sessions owned")
    assert len(owners) == 2, owners
    # Random session ids over two workers: 100 ± 7 each; 70-130 is more than 4 standard deviations.
    assert all(70 <= n <= 130 for n in owners.values()), f"not a fair share (35-65 %): {owners}"
    pids = [p.pid for p in workers_of(two)]
    assert len(pids) == 2
    # Both workers take turns to commit (store/commit_lock.py): each holds the lock
    # files of the store's tables open; app.py, which does not wait for them, holds none.
    lock_dir = lock_dir_for(os.path.join(two.data_dir, "lancedb"))
    steps_lock = os.path.join(lock_dir, "agent_steps.lock")
    for worker in workers_of(two):
        assert steps_lock in {f.path for f in worker.open_files()}, (worker.pid, worker.open_files())
    assert not any(f.path.startswith(lock_dir) for f in psutil.Process(two.app.pid).open_files())
    assert two.stop_agents() == 0  # SIGTERM: forwarded, both stop gracefully
    assert gone(pids)


def test_a_killed_worker_is_restarted_and_nothing_is_lost(two):
    """The crash harness (controls, tool calls needing approval, a non-idempotent
    tool, sub-agents) while one of the two workers is killed with SIGKILL, three
    times: the supervisor restarts it under its old id (its slot), and every
    check of the harness holds."""
    killed = []

    def kill_one(rng):
        workers = wait_for(lambda: len(w := workers_of(two)) == 2 and w, timeout=120, what="two workers")
        victim = rng.choice(workers)
        victim.send_signal(signal.SIGKILL)
        killed.append(victim.pid)

    counts = run_crash_harness(two, kills=3, seed=SEED + 41, kill=kill_one)
    assert counts["actions"] > 0 and counts["steps"] > 0 and len(killed) == 3
    assert two.agents.poll() is None, "the supervisor died"
    restarts = sum(open(os.path.join(two.log_dir, name)).read().count("restarting it in")
                   for name in os.listdir(two.log_dir) if name.startswith("agents.py"))
    assert restarts == 3, two.logs()
    # Restarted workers took their old slots: still two worker ids, each polling.
    wait_for(lambda: two.get("/readyz").json().get("workers_polling") == 2, timeout=120, interval=0.2,
             what="both workers polling again")
    assert two.get("/readyz").json()["workers_alive"] == 2


def test_a_killed_supervisor_leaves_no_worker_behind(two):
    pids = [p.pid for p in workers_of(two)]
    assert len(pids) == 2
    two.agents.send_signal(signal.SIGKILL)
    two.agents.wait(timeout=10)
    # The kernel signalled them when their parent died (PR_SET_PDEATHSIG): they stop by themselves.
    wait_for(lambda: gone(pids), timeout=60, interval=0.2, what=f"workers {pids} to exit")
