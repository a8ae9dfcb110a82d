"""store/commit_lock.py: the processes of a store on one machine take turns to
commit to a table, and a process that holds its turn and freezes slows the
others by at most ``wait_s``.

Two CommitLocks on the same file stand for two processes: a flock belongs to
the open file, so two opens in one process exclude each other as two
processes' would (and the unit tier starts no process)."""
import logging
import os
import threading
import time

import pytest

from store import commit_lock
from store.commit_lock import CommitLock, lock_dir_for


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(commit_lock.tempfile, "gettempdir", lambda: str(tmp_path))
    return tmp_path


def hold(lock: CommitLock, seconds: float) -> threading.Event:
    """Another 'process' takes ``lock`` and keeps it ``seconds``; the event is set once it has it."""
    held = threading.Event()

    def run():
        with lock:
            held.set()
            time.sleep(seconds)
    threading.Thread(target=run, daemon=True).start()
    assert held.wait(10)
    return held


def test_a_commit_waits_for_the_other_processes_turn(private_tmp):
    where = lock_dir_for(str(private_tmp / "db"))
    other, mine = CommitLock("agent_steps", where), CommitLock("agent_steps", where)
    hold(other, 0.5)
    started = time.monotonic()
    with mine:
        waited = time.monotonic() - started
    assert 0.3 <= waited < mine.wait_s and mine.went_alone == 0


def test_other_tables_and_other_stores_do_not_wait(private_tmp):
    """The positive control: the same holder, and a commit that must not wait for it."""
    where = lock_dir_for(str(private_tmp / "db"))
    hold(CommitLock("agent_steps", where), 2.0)
    for lock in (CommitLock("agent_state", where), CommitLock("agent_steps", lock_dir_for(str(private_tmp / "other"))),
                 CommitLock("agent_steps", None)):
        started = time.monotonic()
        with lock:
            assert time.monotonic() - started < 0.5


def test_a_frozen_holder_costs_one_wait_then_commits_go_at_once_and_it_is_named_in_the_log(
        private_tmp, caplog, monkeypatch):
    monkeypatch.setattr(commit_lock, "STUCK_FOR_S", 1.5)
    where = lock_dir_for(str(private_tmp / "db"))
    frozen = CommitLock("actions", where)
    release = threading.Event()

    def freeze():  # a SIGSTOPped worker, until ``release``
        with frozen:
            held.set()
            release.wait(20)
    held = threading.Event()
    holder = threading.Thread(target=freeze, daemon=True)
    holder.start()
    assert held.wait(10)
    mine = CommitLock("actions", where, wait_s=1.0)

    def commit() -> float:
        started = time.monotonic()
        with mine:
            return time.monotonic() - started
    with caplog.at_level(logging.WARNING, logger="store.commit_lock"):
        first, second, third = commit(), commit(), commit()
    assert 0.9 <= first < 5.0 and second < 0.5 and third < 0.5  # one wait, then at once
    assert mine.went_alone == 3
    warnings = [r.getMessage() for r in caplog.records if "went ahead without it" in r.getMessage()]
    assert len(warnings) == 1 and "actions" in warnings[0]  # once a minute, not once a commit
    time.sleep(1.6)  # past STUCK_FOR_S: a commit waits for its turn again ...
    assert 0.9 <= commit() < 5.0 and mine.went_alone == 4
    release.set()  # ... and once the holder is back, commits take turns with it again
    holder.join(10)
    wait_for_turn = commit()
    assert wait_for_turn < 0.5 and mine.went_alone == 4 and mine._stuck_until == 0.0


def test_threads_of_one_process_take_turns_as_before(private_tmp):
    lock, inside, overlaps = CommitLock("workers", lock_dir_for(str(private_tmp / "db"))), [], []

    def commit():
        with lock:
            inside.append(1)
            overlaps.append(len(inside) > 1)
            time.sleep(0.01)
            inside.pop()
    threads = [threading.Thread(target=commit) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert overlaps == [False] * 8


def test_one_store_has_one_directory_however_its_path_is_spelt(private_tmp, monkeypatch):
    (private_tmp / "data" / "lancedb").mkdir(parents=True)
    monkeypatch.chdir(private_tmp / "data")
    spellings = ["lancedb", "./lancedb/", str(private_tmp / "data" / "lancedb"),
                 f"file://{private_tmp / 'data' / 'lancedb'}"]
    assert len({lock_dir_for(s) for s in spellings}) == 1
    assert lock_dir_for("s3://bucket/a") != lock_dir_for("s3://bucket/b") != lock_dir_for("lancedb")


def test_a_lock_directory_others_may_write_is_not_used(private_tmp):
    base = private_tmp / f"agentsvc-commit-locks-{os.getuid()}"
    base.mkdir(mode=0o700)
    os.chmod(base, 0o777)  # anybody could hold our turn, or swap the files
    assert lock_dir_for(str(private_tmp / "db")) is None
    os.chmod(base, 0o700)
    assert lock_dir_for(str(private_tmp / "db")) is not None


def test_agents_py_opens_its_store_taking_turns_and_other_stores_do_not(private_tmp):
    """A Store opened with commit_turns=True (agents.py's: tests/service/test_processes.py
    sees its workers hold the lock files) takes turns; one opened otherwise (app.py,
    tests, benchmarks) commits as before."""
    from store import Store
    uri = str(private_tmp / "db")
    turns, alone = Store(uri, commit_turns=True), Store(uri)
    try:
        assert turns.writer.table_lock("agent_steps").path == os.path.join(lock_dir_for(uri), "agent_steps.lock")
        assert alone.writer.table_lock("agent_steps").path is None
        other = Store(uri, commit_turns=True)
        try:
            hold(turns.writer.table_lock("actions"), 1.0)
            started = time.monotonic()
            other.actions.enqueue("pause", agent_id="01J00000000000000000000000", session_id="01J00000000000000000000001")
            assert time.monotonic() - started >= 0.5  # it waited for the first store's turn
        finally:
            other.close()
    finally:
        turns.close()
        alone.close()
