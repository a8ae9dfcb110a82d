"""GET /api/sessions/<id>/diff against the real service: a fork of a scripted
session whose script changes at one step diverges exactly there (text, state,
tool calls, usage side by side); sessions of one source compare as siblings;
sessions of two lineages, bad and unknown ids are refused."""

FRAMES = [
    {"text": "adding", "tool_calls": [{"id": "c1", "name": "add", "args": {"numbers": [1, 2]}}],
     "usage": {"input_tokens": 10, "output_tokens": 2, "cost": 0.001}},
    {"text": "thinking", "state": {"notes": ["one"]}, "usage": {"input_tokens": 20, "output_tokens": 3, "cost": 0.002}},
    {"text": "adding again", "tool_calls": [{"id": "c2", "name": "add", "args": {"numbers": [3, 4]}}]},
    {"text": "the answer is 10", "done": True},
]


def scripted(svc, frames) -> str:
    made = svc.create("scripted", config={"interval_s": 0, "tools": ["add"], "frames": frames})
    svc.wait_status(made["session_id"], "done", timeout=60)
    return made["session_id"]


def fork(svc, sid: str, frames, from_iteration: int = 0) -> str:
    r = svc.post(f"/api/sessions/{sid}/fork", json={"from_iteration": from_iteration, "config": {"frames": frames}})
    assert r.status_code == 202, r.text
    svc.wait_status(r.json()["session_id"], "done", timeout=60)
    return r.json()["session_id"]


def diff(svc, sid: str, against: str, **params):
    return svc.get(f"/api/sessions/{sid}/diff", against=against, **params)


def test_a_fork_that_changes_its_script_diverges_at_that_step(shared_service):
    svc = shared_service
    source = scripted(svc, FRAMES)
    changed = [*FRAMES[:2], {**FRAMES[2], "text": "adding more", "state": {"notes": ["two"]},
                             "tool_calls": [{"id": "c2", "name": "add", "args": {"numbers": [3, 5]}}]}, FRAMES[3]]
    forked = fork(svc, source, changed)

    r = diff(svc, forked, source)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["lineage"] == {"relation": "descends", "common": source}
    assert out["from_iteration"] == 1 and [row["iteration"] for row in out["iterations"]] == [1, 2, 3]
    first = out["first_divergence"]
    assert first["iteration"] == 2 and first["what"] == ["text", "tool_calls"]
    assert first["detail"] == 'tool call 0: add({"numbers": [3, 4]}) success vs add({"numbers": [3, 5]}) success'
    one, two, three = out["iterations"]
    assert one["differs"] == [] and one["a"]["text"] == one["b"]["text"] == "thinking"
    assert one["a"]["tokens"] == 23 and one["a"]["cost"] == 0.002
    assert two["a"]["tool_calls"] == [{"name": "add", "args": {"numbers": [3, 4]}, "status": "success"}]
    assert {"path": "/notes/0", "op": "replace", "before": "one", "after": "two"} in two["state"]
    assert three["differs"] == [] and three["a"]["status"] == three["b"]["status"] == "done"
    assert out["a"]["session_id"] == source and out["b"]["session_id"] == forked
    assert out["a"]["final_text"] == "the answer is 10" and out["summary"]["differing"] == 1
    assert out["summary"]["truncated"] is False

    same = diff(svc, forked, source, from_iteration=3).json()
    assert [row["iteration"] for row in same["iterations"]] == [3] and same["first_divergence"] is None
    cut = diff(svc, forked, source, limit=1).json()
    assert len(cut["iterations"]) == 1 and cut["summary"]["truncated"] is True

    # two forks of one source are one lineage too; the reverse direction is "ancestor"
    sibling = fork(svc, source, FRAMES, from_iteration=1)
    both = diff(svc, sibling, forked).json()
    assert both["lineage"] == {"relation": "siblings", "common": source}
    assert [row["iteration"] for row in both["iterations"]] == [2, 3]
    assert both["first_divergence"]["iteration"] == 2
    assert diff(svc, source, forked).json()["lineage"]["relation"] == "ancestor"


def test_sessions_of_two_lineages_and_bad_ids_are_refused(shared_service):
    svc = shared_service
    one, other = scripted(svc, FRAMES[3:]), scripted(svc, FRAMES[3:])
    cases = {
        "two lineages": (diff(svc, one, other), 400, "not one lineage"),
        "no against": (svc.get(f"/api/sessions/{one}/diff"), 400, None),
        "hostile against": (diff(svc, one, "x' OR '1'='1"), 400, None),
        "hostile id": (svc.get("/api/sessions/x' OR '1'='1/diff", against=one), 400, None),
        "unknown session": (diff(svc, "nosuch", one), 404, None),
        "unknown against": (diff(svc, one, "nosuch"), 404, None),
        "limit too big": (diff(svc, one, other, limit=100_000), 400, None),
    }
    for what, (response, status, text) in cases.items():
        assert response.status_code == status, (what, response.text)
        assert set(response.json()["error"]) == {"code", "message"}, what
        assert text is None or text in response.json()["error"]["message"], what


def replay(svc, sid: str, **body) -> str:
    r = svc.post(f"/api/sessions/{sid}/replay", json=body)
    assert r.status_code == 202, r.text
    return r.json()["session_id"]


def test_a_replay_matches_its_recording_until_its_script_changes(shared_service):
    svc = shared_service
    source = scripted(svc, FRAMES)
    same = replay(svc, source)
    svc.wait_status(same, "done", timeout=60)
    out = diff(svc, same, source).json()
    assert out["lineage"] == {"relation": "descends", "common": source}
    assert [row["iteration"] for row in out["iterations"]] == [0, 1, 2, 3]
    assert out["first_divergence"] is None  # the served calls (status replayed) count as their recorded success
    assert out["iterations"][0]["b"]["tool_calls"] == [{"name": "add", "args": {"numbers": [1, 2]}, "status": "success"}]

    changed = [*FRAMES[:2], {**FRAMES[2], "tool_calls": [{"id": "c2", "name": "add", "args": {"numbers": [3, 5]}}]},
               FRAMES[3]]
    diverged = replay(svc, source, from_iteration=1, config={"frames": changed})
    assert svc.wait_status(diverged, "stopped", timeout=60)["status_reason"] == "diverged"
    out = diff(svc, diverged, source).json()
    assert [row["iteration"] for row in out["iterations"]] == [1, 2, 3]
    first = out["first_divergence"]
    assert first["iteration"] == 2 and "tool_calls" in first["what"]
    assert first["b"]["tool_calls"][0]["status"] == "failed"
    assert out["iterations"][2]["b"] is None and out["iterations"][2]["differs"] == ["step"]
    siblings = diff(svc, diverged, same).json()
    assert siblings["lineage"] == {"relation": "siblings", "common": source}
    assert siblings["first_divergence"]["iteration"] == 2
