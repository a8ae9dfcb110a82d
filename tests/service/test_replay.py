"""Replay (``POST /api/sessions/<id>/replay``) through the real service, with
the ``scripted`` moniker: recorded tool results are served and no tool runs
again (asserted on the counting tool's file), guidance is re-delivered at the
iteration it reached in the recording, a changed script diverges at the chosen
step, and a replay killed mid-way resumes.  The source is never changed."""
import json

import pytest

from tests.harness import wait_for
from tests.plugins import read_count

TOOLS = ["sleep_count", "add"]


def recorded_session(svc, key: str) -> dict:
    """A finished session: a counted tool call, an add, an idle wait ended by
    guidance, and a last step that is done.  Returns its snapshot."""
    frames = [
        {"text": "count once", "tool_calls": [{"name": "sleep_count", "args": {"key": key}}]},
        {"text": "add", "tool_calls": [{"name": "add", "args": {"numbers": [1, 2]}}]},
        {"text": "what next?"},
        {"text": "going", "done": True},
    ]
    made = svc.create("scripted", task="replay me", name=f"rec-{key}",
                      config={"interval_s": 0, "tools": TOOLS, "when_idle": "wait", "frames": frames})
    sid = made["session_id"]
    svc.wait_status(sid, "waiting", timeout=60)
    svc.control(made["agent_id"], "interrupt", guidance="take the left road")
    return svc.wait_status(sid, "done", timeout=60)


def record_of(svc, sid: str) -> str:
    calls = svc.get("/api/tool-calls", session_id=sid, limit=1000).json()["tool_calls"]
    return json.dumps({"snapshot": svc.session(sid), "steps": svc.steps(sid), "calls": calls}, sort_keys=True)


def calls_of(svc, sid: str) -> list[dict]:
    calls = svc.get("/api/tool-calls", session_id=sid, limit=1000).json()["tool_calls"]
    return sorted(calls, key=lambda c: (c["iteration"], c["seq"]))


def seen(step: dict) -> dict:
    """What a step's moniker was given, but the call ids (each session's calls have their own)."""
    inputs = step.get("inputs") or {}
    return {"inbox": inputs.get("inbox"),
            "tool_results": [{k: v for k, v in r.items() if k != "id"} for r in inputs.get("tool_results") or []]}


def replay(svc, sid: str, **body) -> dict:
    r = svc.post(f"/api/sessions/{sid}/replay", json=body)
    assert r.status_code == 202, r.text
    made = r.json()
    assert svc.action(made["action_id"], timeout=60)["status"] == "done"
    return made


def test_a_replay_serves_recorded_tool_results_and_redelivers_guidance(shared_service):
    svc = shared_service
    source = recorded_session(svc, "replay-served")
    sid = source["session_id"]
    assert read_count(svc.count_dir, "replay-served") == 1
    before = record_of(svc, sid)

    made = replay(svc, sid)
    assert made["agent_id"] == source["agent_id"] and made["session_id"] != sid
    snap = svc.wait_status(made["session_id"], "done", timeout=60)
    assert snap["replayed_from"] == {"session_id": sid, "from_iteration": 0}
    assert snap["replay"]["tools"] == "recorded" and snap["replay"]["diverged_at"] is None

    recorded, replayed = svc.steps(sid), svc.steps(made["session_id"])
    assert [s["iteration"] for s in replayed] == [s["iteration"] for s in recorded] == [0, 1, 2, 3]
    assert [s["text"] for s in replayed] == [s["text"] for s in recorded]
    # the model saw the very tool results and guidance of the recording, at the same steps
    assert [seen(s) for s in replayed] == [seen(s) for s in recorded]
    assert [g["text"] for g in replayed[3]["guidance"]] == ["take the left road"]
    assert replayed[3]["guidance"][0]["action_id"] == recorded[3]["guidance"][0]["action_id"]

    originals, served = calls_of(svc, sid), calls_of(svc, made["session_id"])
    assert [c["status"] for c in served] == ["replayed", "replayed"]
    assert [c["replay_of"] for c in served] == [c["id"] for c in originals]
    assert [c["replayed_status"] for c in served] == ["success", "success"]
    assert [c["result"] for c in served] == [c["result"] for c in originals]
    assert read_count(svc.count_dir, "replay-served") == 1, "a recorded tool ran again"
    assert record_of(svc, sid) == before, "the source changed"


def test_a_changed_script_diverges_at_the_chosen_step_and_the_replay_stops(shared_service):
    svc = shared_service
    source = recorded_session(svc, "replay-diverge")
    sid = source["session_id"]
    frames = source["config"]["frames"]
    changed = [frames[0], {"text": "add other numbers", "tool_calls": [{"name": "add", "args": {"numbers": [5]}}]},
               *frames[2:]]
    made = replay(svc, sid, config={"frames": changed})
    snap = svc.wait_status(made["session_id"], "stopped", timeout=60)
    assert snap["status_reason"] == "diverged"
    assert snap["replay"]["diverged_at"] == 1 and "add" in snap["replay"]["divergence"]
    assert snap["last_error"].startswith("diverged from the recording")
    served = calls_of(svc, made["session_id"])
    assert [(c["iteration"], c["status"]) for c in served] == [(0, "replayed"), (1, "failed")]
    assert served[1]["error"].startswith("diverged from the recording: call 1 of step 1 is add({\"numbers\":[5]})")
    assert [s["iteration"] for s in svc.steps(made["session_id"])] == [0, 1], "it stepped past the divergence"
    assert read_count(svc.count_dir, "replay-diverge") == 1, "a tool ran in recorded mode"


def test_recorded_then_live_runs_the_diverging_call_and_a_later_start_keeps_numbering(shared_service):
    svc = shared_service
    source = recorded_session(svc, "replay-live")
    sid = source["session_id"]
    frames = source["config"]["frames"]
    changed = [frames[0], {"text": "count again", "tool_calls": [{"name": "sleep_count", "args": {"key": "replay-live"}}]},
               *frames[2:]]
    made = replay(svc, sid, from_iteration=1, config={"frames": changed}, tools="recorded_then_live")
    snap = svc.wait_status(made["session_id"], "done", timeout=60)
    assert snap["replay"]["diverged_at"] == 1 and snap["replayed_from"] == {"session_id": sid, "from_iteration": 1}
    steps = svc.steps(made["session_id"])
    assert [s["iteration"] for s in steps] == [1, 2, 3]
    assert steps[0]["state"]["_scripted"] == 2, "it did not start from the state after step 0"
    (live,) = calls_of(svc, made["session_id"])
    assert live["status"] == "success" and live["replay_of"] is None
    assert read_count(svc.count_dir, "replay-live") == 2  # the diverging call ran live, once


def test_a_replay_to_an_iteration_stops_there(shared_service):
    svc = shared_service
    sid = recorded_session(svc, "replay-to")["session_id"]
    made = replay(svc, sid, to_iteration=1)
    snap = svc.wait_status(made["session_id"], "stopped", timeout=60)
    assert snap["status_reason"] == "replay_end"
    assert [s["iteration"] for s in svc.steps(made["session_id"])] == [0, 1]


@pytest.mark.parametrize("body, status, words", [
    ({"from_iteration": 9}, 404, "no step 9"),
    ({"tools": "sometimes"}, 400, "tools"),
    ({"from_iteration": 2, "to_iteration": 1}, 422, "to_iteration (1) must be no less than from_iteration (2)"),
    ({"moniker": "no-such"}, 400, "no moniker"),
    ({"profile": "planner", "moniker": "scripted"}, 400, "at most one"),
    ({"config": {"interval_s": "soon"}}, 400, "interval_s"),
    ({"config": {"profile": {"name": "x"}}}, 400, "profile"),
    ({"surprise": 1}, 400, "surprise"),
])
def test_bad_replay_requests_are_refused(shared_service, body, status, words):
    svc = shared_service
    made = svc.create("scripted", config={"interval_s": 0, "frames": [{"text": "only", "done": True}]})
    svc.wait_status(made["session_id"], "done", timeout=60)
    r = svc.post(f"/api/sessions/{made['session_id']}/replay", json=body)
    assert r.status_code == status and words in r.text, r.text


def test_replaying_an_unknown_session_is_404_and_a_session_id_makes_it_idempotent(shared_service):
    svc = shared_service
    assert svc.post("/api/sessions/01ARZ3NDEKTSV4RRFFQ69G5FAV/replay", json={}).status_code == 404
    sid = recorded_session(svc, "replay-idem")["session_id"]
    first = svc.post(f"/api/sessions/{sid}/replay", json={"session_id": "replay-idem-1"})
    again = svc.post(f"/api/sessions/{sid}/replay", json={"session_id": "replay-idem-1"})
    assert first.status_code == 202 and again.status_code == 200 and again.json()["existing"] is True


def test_a_replay_killed_mid_way_resumes_and_never_runs_a_recorded_tool(service):
    svc = service
    frames = [{"text": f"step {i}", "tool_calls": [{"name": "sleep_count", "args": {"key": "replay-kill"}}]}
              for i in range(30)] + [{"text": "end", "done": True}]
    made = svc.create("scripted", config={"interval_s": 0, "tools": TOOLS, "frames": frames})
    sid = made["session_id"]
    svc.wait_status(sid, "done", timeout=120)
    assert read_count(svc.count_dir, "replay-kill") == 30
    r = svc.post(f"/api/sessions/{sid}/replay", json={"config": {"interval_s": 0.3}})
    assert r.status_code == 202, r.text
    rid = r.json()["session_id"]
    wait_for(lambda: len(svc.steps(rid)) >= 5, timeout=60, what="the replay to be under way")
    svc.kill_agents()
    svc.start_agents()
    snap = svc.wait_status(rid, "done", timeout=120)
    steps = svc.steps(rid)
    assert [s["iteration"] for s in steps] == list(range(len(steps))), "a step was lost or run twice"
    assert len([s for s in steps if s["status"] != "interrupted"]) == 31
    assert snap["replay"]["diverged_at"] is None
    calls = calls_of(svc, rid)
    assert len(calls) == 30 and {c["status"] for c in calls} == {"replayed"}
    assert read_count(svc.count_dir, "replay-kill") == 30, "a recorded tool ran again"
