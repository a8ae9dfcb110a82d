"""A replay with tools ``recorded`` never runs a tool (runtime/session/replay.py), in one
process, asserted on the counting tool's own file (tests/plugins.py).

Issue 37: once the first call of a step diverged, ``serve_calls`` neither
served nor failed the step's later calls, so they ran: a replay executed a
non-idempotent tool.  No kill is needed to see it."""
import pytest

from store import Store
from tests.harness import finished, run_in_process, until
from tests.plugins import COUNT_DIR_ENV, read_count


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


@pytest.fixture
def counts(tmp_path, monkeypatch):
    directory = tmp_path / "counts"
    directory.mkdir()
    monkeypatch.setenv(COUNT_DIR_ENV, str(directory))
    return str(directory)


def two_calls(first: str, second: str) -> list[dict]:
    return [{"text": "two calls", "tool_calls": [{"name": "sleep_count", "args": {"key": first}},
                                                 {"name": "sleep_count", "args": {"key": second}}]},
            {"text": "the end", "done": True}]


def create(store: Store, session_id: str, frames: list[dict], replay: dict | None = None) -> dict:
    payload = {"moniker": "scripted", "task": "count", "config": {"interval_s": 0, "tools": ["sleep_count"],
                                                                  "frames": frames}}
    if replay is not None:
        payload["replay"] = replay
    return store.actions.enqueue("create", agent_id="a", session_id=session_id, payload=payload)


def test_calls_after_a_divergence_are_not_run_in_recorded_mode(store, counts):
    create(store, "rec", two_calls("first", "second"))
    replay = {"session_id": "rec", "from_iteration": 0, "tools": "recorded", "children": "served"}

    async def scenario(service):
        await until(lambda: (s := store.states.get("rec")) and s["status"] == "done", what="the recording")
        # The replay's first call differs from the recording's, its second is the same.
        made = create(store, "rep", two_calls("changed", "second"), replay)
        await until(lambda: finished(store, made["id"]), what="the replay's create")
        await until(lambda: (s := store.states.get("rep")) and s["status"] == "stopped", what="the replay to stop")

    run_in_process(store, scenario, watch_s=0.01)
    assert (read_count(counts, "first"), read_count(counts, "second")) == (1, 1)  # the recording's runs
    assert read_count(counts, "changed") == 0, "the diverging call ran"
    assert read_count(counts, "second") == 1, "a call after the divergence ran in recorded mode"
    rows = sorted(store.tool_calls.search(session_id="rep", limit=10), key=lambda r: r["seq"])
    assert [(r["seq"], r["status"]) for r in rows] == [(0, "failed"), (1, "failed")]
    assert rows[0]["error"].startswith("diverged from the recording: call 1 of step 0 is sleep_count")
    assert "was not run" in rows[1]["error"]
    snapshot = store.states.get("rep")
    assert snapshot["status_reason"] == "diverged" and snapshot["replay"]["diverged_at"] == 0
    assert [s["iteration"] for s in store.steps.search(session_id="rep")] == [0]
