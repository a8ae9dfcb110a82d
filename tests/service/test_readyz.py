"""``GET /readyz`` on app.py's port (issue 37, "what must hold" 6): whether an
agents.py worker polls the queue now, so an operator or a crash harness can
tell recovery from service.  With agents.py up, killed with SIGKILL, restarted,
and stopped with SIGTERM; open without a token (app.py started with an API
token), and naming no agent."""
import os

import requests

from tests.harness import Service, wait_for

STALE_S = 3  # how old a heartbeat may be to count (AGENTSVC_READY_STALE_S), short for the test


def readiness(svc) -> tuple[int, dict]:
    r = requests.get(svc.url + "/readyz", timeout=30)  # no Authorization header (svc.http carries one)
    return r.status_code, r.json()


def becomes(svc, status: int, what: str) -> dict:
    return wait_for(lambda: (got := readiness(svc))[0] == status and got[1], timeout=90, interval=0.2, what=what)


def test_readyz_follows_agents_py_up_killed_restarted_and_stopped(tmp_path):
    (tmp_path / "logs").mkdir()
    svc = Service(str(tmp_path / "data"), str(tmp_path / "logs"), app_args=["--api-token", "s3cret"],
                  env={"AGENTSVC_READY_STALE_S": str(STALE_S)})
    svc.http.headers["Authorization"] = "Bearer s3cret"  # the harness's reads; /readyz is asked without it
    svc.start_app()
    try:
        status, body = readiness(svc)
        assert status == 503 and body["status"] == "not_ready" and body["workers_polling"] == 0
        assert body["reason"] == "no worker with a fresh heartbeat"

        svc.start_agents()
        up = becomes(svc, 200, "ready once agents.py polls")
        assert up["status"] == "ready" and up["workers_polling"] == 1 and up["heartbeat_age_s"] <= STALE_S
        made = svc.post("/api/agents", json={"moniker": "countdown", "config": {"n": 1000, "interval_s": 0.2}}).json()
        svc.wait_steps(made["session_id"], 1, timeout=60)
        text = requests.get(svc.url + "/readyz", timeout=30).text
        assert made["agent_id"] not in text and made["session_id"] not in text and "countdown" not in text
        assert set(readiness(svc)[1]) == {"status", "reason", "workers_polling", "workers_alive", "heartbeat_age_s"}

        svc.kill_agents()
        down = becomes(svc, 503, "not ready once the killed worker's heartbeat is stale")
        assert down["workers_polling"] == 0 and down["reason"] == "no worker with a fresh heartbeat"

        svc.start_agents()
        becomes(svc, 200, "ready again once the restarted worker has adopted its sessions")
        before = svc.steps(made["session_id"])[-1]["iteration"]
        svc.wait_steps(made["session_id"], before + 2, timeout=60)  # ready is serving: the session steps again

        assert svc.stop_agents() == 0
        stopped = readiness(svc)
        assert stopped[0] == 503, "a worker stopped with SIGTERM says so at once"
    finally:
        svc.stop()


def test_readyz_is_in_the_openapi_document(shared_service):
    paths = shared_service.get("/api/openapi.json").json()["paths"]
    answers = paths["/readyz"]["get"]["responses"]
    assert {"200", "503"} <= set(answers)
    assert os.path.basename(answers["503"]["content"]["application/json"]["schema"]["$ref"]) == "Readiness"
