"""The real thing: agents.py and app.py as subprocesses, driven over HTTP,
asserting on what was persisted."""
import time

from store import Store
from tests.harness import wait_for


def iterations(steps):
    return [s["iteration"] for s in steps]


def assert_contiguous(steps):
    its = iterations(steps)
    assert its == list(range(len(its))), f"iterations not 0..n without gaps or duplicates: {its}"


def test_create_runs_steps_with_contiguous_iterations(shared_service):
    made = shared_service.create("joke", "tell jokes about cats", config={"interval_s": 0.05})
    steps = shared_service.wait_steps(made["session_id"], 5)
    assert_contiguous(steps)
    assert all("cats" in s["text"] for s in steps)
    assert [s["state"]["told"] for s in steps] == [i + 1 for i in iterations(steps)]
    snap = shared_service.session(made["session_id"])
    assert snap["status"] == "running" and snap["agent_id"] == made["agent_id"]
    assert shared_service.get(f"/api/agents/{made['agent_id']}").json()["session_id"] == made["session_id"]
    agents = shared_service.get("/api/agents").json()["agents"]
    assert made["agent_id"] in [a["agent_id"] for a in agents]
    sessions = shared_service.get(f"/api/agents/{made['agent_id']}/sessions").json()["sessions"]
    assert [s["session_id"] for s in sessions] == [made["session_id"]]
    create = shared_service.get(f"/api/actions/{made['action_id']}").json()
    assert create["status"] == "done" and create["processed"] is True


def test_pause_interrupt_resume_destroy(shared_service):
    made = shared_service.create("joke", "tell jokes about cats", config={"interval_s": 0.1})
    sid, aid = made["session_id"], made["agent_id"]
    shared_service.wait_steps(sid, 3)

    assert shared_service.control(aid, "pause")["status"] == "done"
    assert shared_service.session(sid)["status"] == "paused"
    paused_at = shared_service.settled_step_count(sid)
    time.sleep(1.5)
    assert len(shared_service.steps(sid)) == paused_at, "steps kept coming while paused"

    # Guidance sent while paused waits for the next step.
    assert shared_service.control(aid, "interrupt", guidance="tell jokes about dogs")["status"] == "done"
    time.sleep(0.5)
    assert len(shared_service.steps(sid)) == paused_at

    assert shared_service.control(aid, "resume")["status"] == "done"
    steps = shared_service.wait_steps(sid, paused_at + 3)
    assert_contiguous(steps)
    steered = steps[paused_at]
    assert [g["text"] for g in steered["guidance"]] == ["tell jokes about dogs"]
    assert "dogs" in steered["text"] and "cats" not in steered["text"]
    assert "dogs" in steered["notes"]
    assert all(s["guidance"] is None and "dogs" in s["text"] for s in steps[paused_at + 1:])
    assert all("cats" in s["text"] for s in steps[:paused_at])

    assert shared_service.control(aid, "destroy")["status"] == "done"
    snap = shared_service.session(sid)
    assert snap["status"] == "stopped" and snap["status_reason"] == "destroyed"
    stopped_at = shared_service.settled_step_count(sid)
    time.sleep(0.8)
    assert len(shared_service.steps(sid)) == stopped_at
    # A stopped session cannot be resumed; the action says why.
    resumed = shared_service.control(aid, "resume")
    assert resumed["status"] == "failed" and "stopped" in resumed["error"]


def test_limits_and_done(shared_service):
    countdown = shared_service.create("countdown", config={"interval_s": 0, "n": 3})
    capped = shared_service.create("joke", "owls", config={"interval_s": 0, "max_steps": 4})
    endless = shared_service.create("countdown", config={"interval_s": 0.05, "n": 2, "stop_on_done": False})
    timed = shared_service.create("joke", "bees", config={"interval_s": 0.05, "max_runtime_s": 1.0})

    snap = shared_service.wait_status(countdown["session_id"], "done")
    assert snap["status_reason"] == "done" and snap["iteration"] == 2
    assert [s["status"] for s in shared_service.steps(countdown["session_id"])] == ["ok", "ok", "done"]

    snap = shared_service.wait_status(capped["session_id"], "done")
    assert snap["status_reason"] == "max_steps" and len(shared_service.steps(capped["session_id"])) == 4

    snap = shared_service.wait_status(timed["session_id"], "done", timeout=15)
    assert snap["status_reason"] == "max_runtime"

    steps = shared_service.wait_steps(endless["session_id"], 4)  # done at step 2, but told to carry on
    assert shared_service.session(endless["session_id"])["status"] == "running"
    assert_contiguous(steps)


def test_kill_9_resumes_every_session_without_gaps(service):
    running = service.create("joke", "tell jokes about cats", config={"interval_s": 0.02})
    paused = service.create("joke", "tell jokes about bats", config={"interval_s": 0.02})
    service.wait_steps(paused["session_id"], 3)
    service.control(paused["agent_id"], "pause")
    paused_count = len(service.steps(paused["session_id"]))

    for round_ in range(3):
        before = len(service.wait_steps(running["session_id"], 5 * (round_ + 1)))
        service.kill_agents()
        service.start_agents()
        steps = service.wait_steps(running["session_id"], before + 5, timeout=90)
        assert_contiguous(steps)
        # Each step continued from the persisted state rather than starting over.
        assert [s["state"]["told"] for s in steps] == [i + 1 for i in iterations(steps)]

    assert service.session(paused["session_id"])["status"] == "paused"
    assert len(service.steps(paused["session_id"])) == paused_count
    service.control(paused["agent_id"], "resume")
    assert_contiguous(service.wait_steps(paused["session_id"], paused_count + 3))


def test_faulty_monikers_fail_alone(shared_service):
    healthy = shared_service.create("joke", "tell jokes about cats", config={"interval_s": 0.05})
    raising = shared_service.create("chaos", config={"interval_s": 0, "fail_at": 3, "mode": "raise"})
    hanging = shared_service.create("chaos", config={"interval_s": 0, "fail_at": 2, "mode": "hang", "step_timeout_s": 1})
    garbage = shared_service.create("chaos", config={"interval_s": 0, "fail_at": 1, "mode": "garbage"})

    expected = {raising["session_id"]: (2, "RuntimeError: chaos"),
                hanging["session_id"]: (1, "timed out after 1.0s"),
                garbage["session_id"]: (0, "invalid frame_out")}
    for sid, (failed_iteration, message) in expected.items():
        snap = shared_service.wait_status(sid, "error", timeout=90)
        assert message in snap["last_error"]
        steps = shared_service.steps(sid)
        assert_contiguous(steps)
        assert steps[-1]["status"] == "error" and steps[-1]["iteration"] == failed_iteration
        assert message in steps[-1]["error"]
    assert "this" in shared_service.steps(garbage["session_id"])[-1]["data"]["raw"]  # the bad output, kept

    before = len(shared_service.steps(healthy["session_id"]))
    shared_service.wait_steps(healthy["session_id"], before + 5)
    assert shared_service.session(healthy["session_id"])["status"] == "running"


def test_resume_after_error_retries_the_failed_step(shared_service):
    made = shared_service.create("chaos", config={"interval_s": 0, "fail_at": 2, "mode": "raise"})
    shared_service.wait_status(made["session_id"], "error")
    assert shared_service.control(made["agent_id"], "resume")["status"] == "done"
    # It fails again at the same step token, as a new iteration.
    wait_for(lambda: len(shared_service.steps(made["session_id"])) == 3, what="a retried step")
    steps = shared_service.steps(made["session_id"])
    assert_contiguous(steps)
    assert [s["status"] for s in steps] == ["ok", "error", "error"]
    assert steps[1]["step_token"] == steps[2]["step_token"]


def test_create_is_idempotent_by_session_id(shared_service):
    body = {"moniker": "countdown", "session_id": "my-session-1", "agent_id": "my-agent", "config": {"n": 2}}
    first = shared_service.post("/api/agents", json=body)
    again = shared_service.post("/api/agents", json=body)
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["action_id"] == first.json()["action_id"] and again.json()["existing"] is True
    shared_service.wait_status("my-session-1", "done")
    later = shared_service.post("/api/agents", json=body)
    assert later.status_code == 200 and later.json()["status"] == "done"
    other = shared_service.post("/api/agents", json={**body, "agent_id": "someone-else"})
    assert other.status_code == 409
    assert len(shared_service.steps("my-session-1")) == 2
    store = Store(shared_service.data_dir + "/lancedb")
    creates = store.tables["actions"].search().where("session_id = 'my-session-1'").limit(10).to_list()
    assert len(creates) == 1


HOSTILE_IDS = ["x' OR '1'='1", "a'; DROP TABLE actions; --", "../../etc", "a b", "", "é", "x" * 200]


def test_hostile_ids_are_rejected_and_change_nothing(shared_service):
    svc = shared_service
    made = svc.create("countdown", config={"n": 1})
    svc.wait_status(made["session_id"], "done")
    store = Store(svc.data_dir + "/lancedb")
    before = store.tables["actions"].count_rows()
    for bad_id in HOSTILE_IDS:
        responses = [
            svc.post("/api/agents", json={"moniker": "joke", "agent_id": bad_id}),
            svc.post("/api/agents", json={"moniker": "joke", "session_id": bad_id}),
            svc.post(f"/api/agents/{made['agent_id']}/pause", json={"session_id": bad_id}),
            svc.get("/api/agent-steps", session_id=bad_id),
            svc.get("/api/agent-steps", agent_id=bad_id),
        ]
        if bad_id and "/" not in bad_id:
            responses += [svc.get(f"/api/agents/{bad_id}"), svc.get(f"/api/sessions/{bad_id}"),
                          svc.post(f"/api/agents/{bad_id}/pause", json={}), svc.get(f"/api/actions/{bad_id}")]
        for r in responses:
            assert 400 <= r.status_code < 500, (r.request.url, r.status_code, r.text)
            assert set(r.json()["error"]) == {"code", "message"}
    assert store.tables["actions"].count_rows() == before


JSON = {"Content-Type": "application/json"}


def test_malformed_bodies_get_clean_errors(shared_service):
    made = shared_service.create("countdown", config={"n": 1})
    aid = made["agent_id"]
    cases = [
        ("/api/agents", {"data": "{not json", "headers": JSON}, 400),
        ("/api/agents", {"data": '{"moniker": "joke"}', "headers": {"Content-Type": "text/plain"}}, 415),
        ("/api/agents", {"json": []}, 400),
        ("/api/agents", {"json": {"task": "no moniker"}}, 400),
        ("/api/agents", {"json": {"moniker": "no-such-moniker"}}, 400),
        ("/api/agents", {"json": {"moniker": "joke", "config": {"interval_s": -1}}}, 400),
        ("/api/agents", {"json": {"moniker": "joke", "config": {"max_steps": "many"}}}, 400),
        ("/api/agents", {"json": {"moniker": "joke", "surprise": 1}}, 400),
        ("/api/agents", {"json": {"moniker": "joke", "task": "x" * 30_000}}, 400),
        ("/api/agents", {"data": "x" * (2 << 20), "headers": JSON}, 413),
        (f"/api/agents/{aid}/interrupt", {"json": {}}, 400),
        (f"/api/agents/{aid}/interrupt", {"json": {"guidance": "   "}}, 400),
        (f"/api/agents/{aid}/interrupt", {"json": {"guidance": 5}}, 400),
        (f"/api/agents/{aid}/pause", {"json": {"session_id": "unknown-session"}}, 409),
        ("/api/agents/unknown-agent/pause", {"json": {}}, 404),
        ("/api/agents/unknown-agent/destroy", {"json": {}}, 404),
    ]
    for path, kwargs, status in cases:
        r = shared_service.post(path, **kwargs)
        assert r.status_code == status, (path, kwargs.get("json"), r.status_code, r.text[:200])
        assert set(r.json()["error"]) == {"code", "message"}
    assert shared_service.get("/api/agents/unknown-agent").status_code == 404
    assert shared_service.get("/api/actions/01ARZ3NDEKTSV4RRFFQ69G5FAV").status_code == 404
    assert shared_service.get("/api/agent-steps", limit=5000).status_code == 400
    assert shared_service.get("/api/agent-steps", since="yesterday").status_code == 400
    assert shared_service.get("/api/health").json()["status"] == "ok"


def test_openapi_and_monikers_and_metrics(shared_service):
    spec = shared_service.get("/api/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    for path in ("/api/agents", "/api/agents/{agent_id}/interrupt", "/api/agent-steps", "/api/actions/{action_id}",
                 "/api/sessions/{session_id}", "/api/agents/{agent_id}/sessions", "/api/monikers", "/api/health"):
        assert path in spec["paths"], path
    names = [m["name"] for m in shared_service.get("/api/monikers").json()["monikers"]]
    assert {"joke", "countdown", "echo", "chaos"} <= set(names)
    before = _enqueued_creates(shared_service)
    shared_service.create("countdown", config={"n": 1})
    assert _enqueued_creates(shared_service) == before + 1


def _enqueued_creates(svc) -> float:
    for line in svc.get("/metrics").text.splitlines():
        if line.startswith('agentsvc_actions_enqueued_total{type="create"}'):
            return float(line.split()[-1])
    return 0.0


def test_health_reports_each_tables_shape_and_each_workers_maintenance(shared_service):
    made = shared_service.create("countdown", config={"n": 3, "interval_s": 0})
    shared_service.wait_status(made["session_id"], "done", timeout=60)

    def storage():
        report = shared_service.get("/api/health").json().get("storage")
        return report if report and report["maintenance"] and report["tables"]["agent_steps"]["rows"] else None

    report = wait_for(storage, what="a storage report naming a worker and the steps")
    assert report["status"] in ("ok", "behind") and isinstance(report["warnings"], list)
    steps = report["tables"]["agent_steps"]
    assert steps["fragments"] >= 1 and steps["versions"] >= 1 and steps["bytes"] > 0
    (worker, tables), = report["maintenance"].items()  # one live agents.py, with a table map from its heartbeat
    assert set(tables) >= {"actions", "agent_state", "agent_steps"}
    assert all({"runs", "failures", "abandoned", "last_ok_at"} <= set(t) for t in tables.values())
    assert report["lance_cache_bytes"] >= 0 and report["age_s"] >= 0
    gauges = [line for line in shared_service.get("/metrics").text.splitlines()
              if line.startswith('agentsvc_table_fragments{table="agent_steps"}')]
    assert gauges, "app.py exports the tables' shapes"
