"""The eval runner (runtime/record/eval_runner.py) on a real store, without an agent
service: the replays' finishing is played by saving their snapshots.  What a
crash or a second worker could break: the concurrency cap, one create per
replay, one score row per (session, scorer), one worker driving a run, and a
dead worker's run taken over when its lease runs out."""
import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from evals.scorers import builtin_registry
from runtime.record.eval_runner import EvalRunner
from store import Store, filters
from store.codec import utcnow

SCORERS = ["final_equal", "steps"]


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def snapshot(store, session_id, status="done", text="42"):
    store.states.save({"session_id": session_id, "agent_id": "agent-1", "moniker": "echo", "status": status,
                       "iteration": 0, "created_at": utcnow(), "result": {"text": text, "data": None}})


def make_run(store, n=3, concurrency=2):
    sources = [f"src-{i}" for i in range(n)]
    for sid in sources:
        snapshot(store, sid)
    evalset = store.evals.create_set(name="set", session_ids=sources)
    planned = [{"source_session_id": sid, "replay_session_id": f"rep-{i}", "agent_id": "agent-1",
                "payload": {"moniker": "echo", "replay": {"session_id": sid, "from_iteration": 0}}}
               for i, sid in enumerate(sources)]
    return store.evals.create_run(evalset_id=evalset["id"], request={"scorers": SCORERS, "concurrency": concurrency},
                                  results=planned)


def creates(store) -> list[str]:
    return sorted(a["session_id"] for a in store.actions.search(type="create", limit=1000))


def statuses(store, run_id) -> list[str]:
    return [r["status"] for r in store.evals.results_of(run_id)]


def test_a_run_enqueues_within_its_cap_scores_once_and_finishes(store):
    run = make_run(store)
    runner = EvalRunner(store, builtin_registry(), worker_id="worker-a")
    asyncio.run(runner.round())
    assert creates(store) == ["rep-0", "rep-1"] and statuses(store, run["id"]) == ["enqueued", "enqueued", "pending"]
    asyncio.run(runner.round())  # nothing finished: nothing more, nothing twice
    assert creates(store) == ["rep-0", "rep-1"]

    snapshot(store, "rep-0")
    snapshot(store, "rep-1", status="stopped", text="something else")
    asyncio.run(runner.round())
    assert creates(store) == ["rep-0", "rep-1", "rep-2"]
    assert statuses(store, run["id"]) == ["scored", "scored", "enqueued"]
    scores = {(s["source_session_id"], s["scorer"]): s for s in store.evals.scores_of([run["id"]])}
    assert scores[("src-0", "final_equal")]["passed"] is True
    assert scores[("src-1", "final_equal")]["passed"] is False
    assert store.evals.results_of(run["id"])[1]["replay_status"] == "stopped"

    # a crash after the scores were written but before the row said so: scored again, replaced
    first = store.evals.results_of(run["id"])[0]
    store.evals.save_results([{**first, "status": "enqueued"}])
    snapshot(store, "rep-2", status="waiting")  # its turn is over: scorable
    asyncio.run(runner.round())
    assert len(store.evals.scores_of([run["id"]])) == 3 * len(SCORERS)
    assert creates(store) == ["rep-0", "rep-1", "rep-2"]
    asyncio.run(runner.round())
    done = store.evals.get_run(run["id"])
    assert done["status"] == "done" and done["finished_at"] and statuses(store, run["id"]) == ["scored"] * 3


def test_a_create_already_queued_is_not_enqueued_again(store):
    run = make_run(store, n=1, concurrency=1)
    store.actions.enqueue("create", agent_id="agent-1", session_id="rep-0", payload={})  # enqueued, then a crash
    asyncio.run(EvalRunner(store, builtin_registry(), worker_id="worker-a").round())
    assert creates(store) == ["rep-0"] and statuses(store, run["id"]) == ["enqueued"]


def test_a_failed_create_fails_its_session_only(store):
    run = make_run(store, n=2, concurrency=2)
    runner = EvalRunner(store, builtin_registry(), worker_id="worker-a")
    asyncio.run(runner.round())
    action = store.actions.find_create(session_id="rep-0")
    store.actions.finish(action["id"], ok=False, error="unknown moniker 'echo'")
    snapshot(store, "rep-1")
    asyncio.run(runner.round())
    asyncio.run(runner.round())
    results = store.evals.results_of(run["id"])
    assert [r["status"] for r in results] == ["failed", "scored"]
    assert "unknown moniker" in results[0]["error"]
    assert store.evals.get_run(run["id"])["status"] == "done"


def test_one_worker_drives_a_run_until_its_lease_runs_out(store):
    run = make_run(store, n=2, concurrency=1)
    # a's lease is long enough to hold on a loaded machine (0.5 s ran out between two
    # rounds there); it runs out below by being moved into the past, as time would.
    a = EvalRunner(store, builtin_registry(), worker_id="worker-a", lease_s=120)
    b = EvalRunner(store, builtin_registry(), worker_id="worker-b", lease_s=30)
    asyncio.run(a.round())
    asyncio.run(b.round())
    assert store.evals.get_run(run["id"])["owner"] == "worker-a" and creates(store) == ["rep-0"]
    snapshot(store, "rep-0")
    asyncio.run(b.round())  # a holds it: b scores nothing
    assert store.evals.scores_of([run["id"]]) == []
    store.writer.update("eval_runs", filters.eq_id("id", run["id"]),  # a died: its lease runs out
                        {"lease_until": datetime.now(timezone.utc) - timedelta(seconds=1)})
    asyncio.run(b.round())
    assert store.evals.get_run(run["id"])["owner"] == "worker-b"
    assert statuses(store, run["id"]) == ["scored", "enqueued"] and creates(store) == ["rep-0", "rep-1"]
    assert not store.evals.finish_run(run["id"], "worker-a")  # the old owner can no longer finish it
