"""A worker that leaves (SIGTERM) records itself ``stopped`` only once every
write it started has landed (runtime/worker/service.py ``shutdown``,
store/writer.py ``Writer.drain``).

Recorded stopped, its sessions are taken over at once.  The kill loop over two
worker processes: a supervisor's kill stops its workers gracefully; one of them
cancelled a runner whose step row was still committing (Lance retried a
conflicting commit for 30 s), recorded itself stopped, another worker resumed
the session from its snapshot, and the late row landed beside that worker's
row of the same iteration."""
import threading
import time

from store import Store
from tests.harness import run_in_process, until


def test_a_leaving_worker_records_itself_stopped_only_after_its_writes_landed(tmp_path):
    store = Store(str(tmp_path / "db"))
    try:
        committer = store.writer._committers["agent_steps"]
        slow, started, landed, stopped = threading.Event(), threading.Event(), [], []
        real_write, real_beat = committer._write, store.workers.submit_beat

        def write(kind, key, rows):  # one step row's commit takes 2 s, as a conflicting one retried does
            if not slow.is_set() or started.is_set():
                return real_write(kind, key, rows)
            started.set()
            time.sleep(2.0)
            refused = real_write(kind, key, rows)
            landed.append(True)
            return refused

        def beat(worker_id, status="running", *args, **kwargs):
            if status == "stopped":
                stopped.append({"the step row still committing": started.is_set() and not landed})
            return real_beat(worker_id, status, *args, **kwargs)

        committer._write, store.workers.submit_beat = write, beat
        store.actions.enqueue("create", agent_id="a", session_id="s",
                              payload={"moniker": "echo", "config": {"interval_s": 0.05}})

        async def scenario(service):
            await until(lambda: store.steps.count("s") >= 2, timeout=60, what="a few steps")
            slow.set()
            await until(started.is_set, timeout=60, what="a step row's slow commit")
            # ...and the worker is told to stop now, with that commit in flight

        run_in_process(store, scenario, stop_grace_s=0.5)  # the step outlives the grace: its runner is cancelled
        assert started.is_set() and stopped == [{"the step row still committing": False}], stopped
        iterations = [s["iteration"] for s in store.steps.search(session_id="s", limit=1000)]
        assert iterations == list(range(len(iterations)))
    finally:
        store.close()
