"""Eval sets and runs against the real service (issue 29): a set of recorded
``scripted`` sessions is replayed under the recorded config and under a
changed one, every pair is scored, the runs compare, bad requests are
refused, and a run survives kill -9 of agents.py mid-run."""
from tests.harness import wait_for

SCORERS = ["final_equal", "final_contains", "final_json_equal", "tool_sequence_equal", "divergence_step", "steps",
           "tokens", "cost", "errors", "answer_length"]


def frames(i: int, answer: str | None = None) -> list[dict]:
    return [{"text": f"evalword adding for case {i}", "tool_calls": [{"name": "add", "args": {"numbers": [i, 1]}}],
             "usage": {"input_tokens": 10, "output_tokens": 2, "cost": 0.001}},
            {"text": answer or f"the answer is {i + 1}", "done": True}]


def recorded_sessions(svc, n: int, **config) -> list[str]:
    made = [svc.create("scripted", f"case {i}", config={"interval_s": 0, "tools": ["add"], "frames": frames(i),
                                                         **config}) for i in range(n)]
    for m in made:
        svc.wait_status(m["session_id"], "done", timeout=60)
    return [m["session_id"] for m in made]


def wait_run(svc, run_id: str, timeout: float = 90) -> dict:
    return wait_for(lambda: (r := svc.get(f"/api/evalruns/{run_id}").json())["status"] == "done" and r,
                    timeout=timeout, what=f"eval run {run_id} to be done")


def test_a_set_is_replayed_scored_and_compared(shared_service):
    svc = shared_service
    sessions = recorded_sessions(svc, 3)
    r = svc.post("/api/evalsets", json={"name": "three cases", "session_ids": sessions})
    assert r.status_code == 201, r.text
    evalset = r.json()
    assert evalset["session_ids"] == sessions and evalset["from_iteration"] == 0
    assert svc.get(f"/api/evalsets/{evalset['id']}").json() == evalset
    assert evalset["id"] in [s["id"] for s in svc.get("/api/evalsets").json()["evalsets"]]

    same = svc.post(f"/api/evalsets/{evalset['id']}/runs", json={"scorers": SCORERS, "concurrency": 2})
    assert same.status_code == 202, same.text
    assert same.json()["status"] == "running" and same.json()["progress"]["pending"] == 3
    changed = svc.post(f"/api/evalsets/{evalset['id']}/runs",
                       json={"scorers": SCORERS, "config": {"frames": frames(0, answer="something else")}})
    assert changed.status_code == 202, changed.text
    # the run keeps the config as asked (what changes), not every default filled in (issue 40, item 3)
    assert changed.json()["request"]["config"] == {"frames": frames(0, answer="something else")}

    first = wait_run(svc, same.json()["id"])
    assert first["progress"] == {"pending": 0, "enqueued": 0, "scored": 3, "failed": 0}
    for result in first["results"]:
        replay = svc.session(result["replay_session_id"])
        assert replay["agent_id"] == svc.session(result["source_session_id"])["agent_id"]  # a replay, like a fork
        calls = svc.get("/api/tool-calls", session_id=result["replay_session_id"]).json()["tool_calls"]
        assert [c["status"] for c in calls] == ["replayed"]  # served from the recording, never run
        scores = result["scores"]
        assert set(scores) == set(SCORERS)
        assert scores["final_equal"]["passed"] is True and scores["tool_sequence_equal"]["value"] == 1.0
        assert scores["divergence_step"] == {"value": None, "passed": True, "detail": {}}
        assert scores["steps"]["value"] == 2.0 and scores["steps"]["detail"]["delta"] == 0
        assert scores["tokens"]["value"] == 12.0 and scores["errors"]["passed"] is True
    assert first["summary"]["final_equal"] == {"mean": 1.0, "median": 1.0, "n": 3, "passed": 3, "failed": 0}

    second = wait_run(svc, changed.json()["id"])
    by_source = {r["source_session_id"]: r["scores"] for r in second["results"]}
    # case 0's frames are the recorded ones but for the answer; 1 and 2 now call add with other numbers
    assert by_source[sessions[0]]["final_equal"]["passed"] is False
    assert by_source[sessions[0]]["divergence_step"]["value"] == 1.0
    for sid in sessions[1:]:
        assert by_source[sid]["tool_sequence_equal"]["passed"] is False
        assert by_source[sid]["divergence_step"]["value"] == 0.0
        assert svc.session(next(r["replay_session_id"] for r in second["results"]
                                if r["source_session_id"] == sid))["status_reason"] == "diverged"
    assert second["summary"]["final_equal"]["mean"] == 0.0

    table = svc.get(f"/api/evalsets/{evalset['id']}/runs").json()
    assert [run["id"] for run in table["runs"]] == [same.json()["id"], changed.json()["id"]]
    assert [row["session_id"] for row in table["sessions"]] == sessions
    assert table["sessions"][0]["runs"][same.json()["id"]]["scores"]["final_equal"] == 1.0
    assert table["sessions"][0]["runs"][changed.json()["id"]]["scores"]["final_equal"] == 0.0
    comparison = table["comparisons"][0]
    assert comparison["worse"] == sorted(sessions) and comparison["better"] == []
    assert comparison["changes"][sessions[0]]["final_equal"] == "worse"


def test_a_set_from_a_search_and_bad_requests(shared_service):
    svc = shared_service
    sessions = recorded_sessions(svc, 1)
    sid = sessions[0]
    wait_for(lambda: any(h["session_id"] == sid for h in svc.get("/api/search", q="evalword", limit=200)
                         .json()["hits"]), timeout=60, what="the session to be searchable")
    r = svc.post("/api/evalsets", json={"name": "found", "search": {"q": "evalword", "limit": 200},
                                        "from_iteration": 1})
    assert r.status_code == 201, r.text
    assert sid in r.json()["session_ids"] and r.json()["search"]["q"] == "evalword"
    evalset = r.json()["id"]

    cases = {
        "neither ids nor search": (svc.post("/api/evalsets", json={"name": "x"}), 400),
        "both": (svc.post("/api/evalsets", json={"name": "x", "session_ids": [sid], "search": {"q": "a"}}), 400),
        "unknown session": (svc.post("/api/evalsets", json={"name": "x", "session_ids": ["nosuch"]}), 404),
        "hostile id": (svc.post("/api/evalsets", json={"name": "x", "session_ids": ["a' OR '1'='1"]}), 400),
        "bad search": (svc.post("/api/evalsets", json={"name": "x", "search": {"q": "a", "nope": 1}}), 400),
        "search finds nothing": (svc.post("/api/evalsets", json={"name": "x", "search": {"q": "zzqqxxnothing"}}),
                                 404),
        "no such set": (svc.post("/api/evalsets/nosuch/runs", json={"scorers": ["steps"]}), 404),
        "unknown scorer": (svc.post(f"/api/evalsets/{evalset}/runs", json={"scorers": ["steps", "nosuch"]}), 400),
        "no scorers": (svc.post(f"/api/evalsets/{evalset}/runs", json={"scorers": []}), 400),
        "bad config": (svc.post(f"/api/evalsets/{evalset}/runs", json={"scorers": ["steps"],
                                                                        "config": {"interval_s": -1}}), 400),
        "unknown moniker": (svc.post(f"/api/evalsets/{evalset}/runs", json={"scorers": ["steps"],
                                                                             "moniker": "nosuch"}), 400),
        "bad tools": (svc.post(f"/api/evalsets/{evalset}/runs", json={"scorers": ["steps"], "tools": "x"}), 400),
        "bad judge": (svc.post(f"/api/evalsets/{evalset}/runs", json={"scorers": ["llm_judge"],
                                                                       "judge": {"pass_threshold": 7}}), 400),
        "judge not an object": (svc.post(f"/api/evalsets/{evalset}/runs", json={"scorers": ["steps"],
                                                                                 "judge": "strict"}), 400),
        "concurrency 0": (svc.post(f"/api/evalsets/{evalset}/runs", json={"scorers": ["steps"],
                                                                           "concurrency": 0}), 400),
        # valid alone, not together: the set replays from step 1 (api/replays.py check_range)
        "to before the set's start": (svc.post(f"/api/evalsets/{evalset}/runs", json={"scorers": ["steps"],
                                                                                       "to_iteration": 0}), 422),
        "no such run": (svc.get("/api/evalruns/nosuch"), 404),
    }
    for what, (response, status) in cases.items():
        assert response.status_code == status, (what, response.text)
        assert set(response.json()["error"]) == {"code", "message"}, what
    names = {s["name"] for s in svc.get("/api/scorers").json()["scorers"]}
    assert {"final_equal", "llm_judge", "answer_length"} <= names


def test_a_run_resumes_after_kill_9_of_the_agents_service(shared_service):
    svc = shared_service
    sessions = recorded_sessions(svc, 3)
    evalset = svc.post("/api/evalsets", json={"name": "crash", "session_ids": sessions}).json()
    # one replay at a time, each step half a second apart: the kill lands mid-run
    r = svc.post(f"/api/evalsets/{evalset['id']}/runs", json={"scorers": ["final_equal", "steps"], "concurrency": 1,
                                                              "config": {"interval_s": 0.5}})
    assert r.status_code == 202, r.text
    run_id = r.json()["id"]
    wait_for(lambda: svc.get(f"/api/evalruns/{run_id}").json()["progress"]["scored"] >= 1, timeout=60,
             what="the first replay to be scored")
    svc.kill_agents()
    assert svc.get(f"/api/evalruns/{run_id}").json()["status"] == "running"
    svc.start_agents()
    run = wait_run(svc, run_id, timeout=120)
    assert run["progress"]["scored"] == 3
    assert all(res["scores"]["final_equal"]["passed"] is True for res in run["results"])
    for res in run["results"]:  # one create per replay, whatever the crash interrupted
        creates = svc.get("/api/actions", session_id=res["replay_session_id"], type="create").json()
        assert len(creates["actions"]) == 1, creates
    assert len(svc.get(f"/api/evalsets/{evalset['id']}/runs").json()["sessions"]) == 3
