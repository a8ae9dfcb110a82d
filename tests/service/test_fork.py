"""Fork (time travel) against the real service: a fork continues from a past
step's state and next step with new guidance, numbering continues, and the
original session is byte-identical afterwards; finished and failed sessions
fork alike; bad requests get a 4xx."""
import json

from tests.harness import wait_for


def finished_echo(svc, steps: int) -> str:
    made = svc.create("echo", "repeat", config={"interval_s": 0, "max_steps": steps})
    svc.wait_status(made["session_id"], "done", timeout=60)
    return made["session_id"]


def record_of(svc, sid: str) -> str:
    """Everything stored about a session, as canonical text."""
    return json.dumps({"snapshot": svc.session(sid), "steps": svc.steps(sid)}, sort_keys=True)


def fork(svc, sid: str, **body):
    return svc.post(f"/api/sessions/{sid}/fork", json=body)


def test_fork_from_iteration_3_continues_with_new_guidance_and_leaves_the_original_untouched(shared_service):
    svc = shared_service
    sid = finished_echo(svc, 10)
    before = record_of(svc, sid)
    original = svc.steps(sid)
    assert [s["iteration"] for s in original] == list(range(10))
    step3 = original[3]

    r = fork(svc, sid, from_iteration=3, guidance="take the left road", config={"max_steps": 7})
    assert r.status_code == 202, r.text
    made = r.json()
    assert made["agent_id"] == svc.session(sid)["agent_id"] and made["session_id"] != sid
    assert svc.action(made["action_id"], timeout=60)["status"] == "done"
    snapshot = svc.wait_status(made["session_id"], "done", timeout=60)
    assert snapshot["forked_from"] == {"session_id": sid, "iteration": 3}
    assert snapshot["config"]["max_steps"] == 7 and snapshot["status_reason"] == "max_steps"

    steps = svc.steps(made["session_id"])
    assert [s["iteration"] for s in steps] == [4, 5, 6]  # numbering continues the original's
    first = steps[0]
    assert first["step_token"] == step3["next_step_token"]  # the next step token of step 3
    assert first["state"]["n"] == step3["state"]["n"] + 1  # frame_in carried step 3's state
    assert first["state"]["heard"] == [*step3["state"]["heard"], "take the left road"]
    assert [g["text"] for g in first["guidance"]] == ["take the left road"]
    assert first["text"] == "take the left road"
    assert steps[1]["guidance"] is None  # guidance reaches one step only

    assert record_of(svc, sid) == before  # the original is byte-identical


def test_fork_with_edited_state_and_idempotent_by_session_id(shared_service):
    svc = shared_service
    sid = finished_echo(svc, 4)
    r = fork(svc, sid, from_iteration=1, state={"n": 100, "heard": ["edited"]}, session_id="fork-edited-1",
             config={"max_steps": 3})
    assert r.status_code == 202, r.text
    again = fork(svc, sid, from_iteration=0, session_id="fork-edited-1")
    assert again.status_code == 200 and again.json()["existing"] is True
    assert again.json()["action_id"] == r.json()["action_id"]
    svc.wait_status("fork-edited-1", "done", timeout=60)
    steps = svc.steps("fork-edited-1")
    assert [s["iteration"] for s in steps] == [2]
    assert steps[0]["state"] == {"n": 101, "heard": ["edited"]}


def test_a_failed_session_forks_and_the_fork_runs(shared_service):
    svc = shared_service
    made = svc.create("chaos", "fail", config={"interval_s": 0, "fail_at": 4})
    svc.wait_status(made["session_id"], "error", timeout=60)
    before = record_of(svc, made["session_id"])
    r = fork(svc, made["session_id"], from_iteration=1, config={"fail_at": 100, "max_steps": 5})
    assert r.status_code == 202, r.text
    svc.wait_status(r.json()["session_id"], "done", timeout=60)
    steps = svc.steps(r.json()["session_id"])
    assert [s["iteration"] for s in steps] == [2, 3, 4]
    assert steps[0]["text"] == "step 3 fine" and all(s["status"] == "ok" for s in steps)
    assert record_of(svc, made["session_id"]) == before


def test_bad_forks_are_refused(shared_service):
    svc = shared_service
    sid = finished_echo(svc, 2)
    cases = {
        "unknown session": (fork(svc, "nosuch", from_iteration=0), 404),
        "hostile id": (svc.post("/api/sessions/x' OR '1'='1/fork", json={"from_iteration": 0}), 400),
        "no such step": (fork(svc, sid, from_iteration=99), 404),
        "negative iteration": (fork(svc, sid, from_iteration=-1), 400),
        "missing iteration": (fork(svc, sid), 400),
        "bad config": (fork(svc, sid, from_iteration=0, config={"interval_s": -1}), 400),
        "unknown field": (fork(svc, sid, from_iteration=0, nope=1), 400),
        "blank guidance": (fork(svc, sid, from_iteration=0, guidance="  "), 400),
        "state not an object": (fork(svc, sid, from_iteration=0, state=[1]), 400),
        "huge state": (fork(svc, sid, from_iteration=0, state={"x": "y" * 300_000}), 400),
    }
    for what, (response, status) in cases.items():
        assert response.status_code == status, (what, response.text)
        assert set(response.json()["error"]) == {"code", "message"}, what
    wait_for(lambda: svc.session(sid)["status"] == "done")
