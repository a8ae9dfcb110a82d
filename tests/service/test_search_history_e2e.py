"""``search_history`` through a real session: a ``scripted`` agent (StepFrame-v1
tool calls) searches and finds another finished session of the same
agent, its summary first.  Skipped until the tool runner and the ``scripted``
moniker are in the tree."""
import pytest

from tests.harness import wait_for


def test_an_agent_finds_its_earlier_finished_session(shared_service):
    svc = shared_service
    if "scripted" not in {m["name"] for m in svc.get("/api/monikers").json()["monikers"]}:
        pytest.skip("the scripted moniker (tool runner) is not installed in this tree")
    agent_id = "history-agent"
    first = svc.create("countdown", "count the capybaras by the river", agent_id=agent_id,
                       config={"interval_s": 0, "n": 2})
    svc.wait_status(first["session_id"], "done", timeout=60)
    wait_for(lambda: svc.get("/api/summaries", session_id=first["session_id"]).json()["summaries"], timeout=60)

    second = svc.create("scripted", agent_id=agent_id, config={"interval_s": 0, "tools": ["search_history"], "frames": [
        {"text": "looking back", "tool_calls": [{"id": "h1", "name": "search_history",
                                                 "args": {"query": "capybaras"}}]},
        {"text": "found it", "done": True}]})
    svc.wait_status(second["session_id"], "done", timeout=60)
    steps = svc.steps(second["session_id"])
    (result,) = (steps[1].get("inputs") or {}).get("tool_results") or [None]
    assert result and result["status"] == "success", result
    hits = result["result"]["hits"]
    assert hits[0]["kind"] == "summary" and hits[0]["session_id"] == first["session_id"]
    assert "capybaras" in hits[0]["text"]
    assert all(h.get("session_id") in (first["session_id"], second["session_id"]) for h in hits)

    other = svc.create("scripted", config={"interval_s": 0, "tools": ["search_history"], "frames": [
        {"tool_calls": [{"name": "search_history", "args": {"query": "capybaras", "scope": "all"}}]},
        {"done": True}]})
    svc.wait_status(other["session_id"], "done", timeout=60)
    (denied,) = (svc.steps(other["session_id"])[1].get("inputs") or {}).get("tool_results") or [None]
    assert denied["status"] == "failed" and "allow_all" in (denied["error"] or "")
