"""agents.py as a managed service: its health endpoints and a graceful SIGTERM.

What these prove: /healthz and /readyz answer (ready once polling, with a fresh
heartbeat); on SIGTERM the worker is not ready from that moment, a step in
flight finishes and is recorded as a normal step (not cancelled, not
'interrupted'), an action accepted before the signal is applied exactly once
(before the stop or after the restart), the process exits 0 and records itself
as stopped; after a restart every session carries on with iterations 0..n.
"""
import signal

import requests

from store import Store
from tests.chaos_client import assert_contiguous, delivered
from tests.harness import free_port, wait_for


def probe(port: int, path: str) -> tuple[int, dict] | None:
    try:
        r = requests.get(f"http://127.0.0.1:{port}{path}", timeout=5)
        return r.status_code, r.json()
    except requests.RequestException:
        return None


def test_health_endpoints_and_a_graceful_sigterm(service):
    svc = service
    health = free_port()
    svc.stop_agents()  # the fixture's worker: start one with the flags under test
    svc.start_agents("--health-port", str(health), "--session-heartbeat", "0.5", "--stop-grace", "30")
    ready = wait_for(lambda: (p := probe(health, "/readyz")) and p[0] == 200 and p, timeout=60, what="ready")
    assert ready[1]["status"] == "ready" and ready[1]["heartbeat_age_s"] is not None
    assert probe(health, "/healthz")[0] == 200
    metrics = requests.get(f"http://127.0.0.1:{health}/metrics", timeout=5)
    assert metrics.status_code == 200 and "agentsvc" in metrics.text

    slow = svc.create("sleepy", config={"interval_s": 0, "sleep_s": 3})
    quick = svc.create("echo", config={"interval_s": 0.05})
    svc.wait_steps(slow["session_id"], 1, timeout=60)
    svc.wait_steps(quick["session_id"], 3, timeout=60)
    # A step of the slow session is in flight (marked so after 0.5 s): stop now.
    in_flight = wait_for(lambda: (s := svc.session(slow["session_id"])).get("step_started_at") and s,
                         timeout=60, interval=0.05, what="a step in flight")
    cut = in_flight["iteration"] + 1
    guidance = svc.post(f"/api/agents/{quick['agent_id']}/interrupt",
                        json={"guidance": "said before the stop"}).json()["action_id"]
    svc.agents.send_signal(signal.SIGTERM)
    wait_for(lambda: (p := probe(health, "/readyz")) is None or p[0] == 503, timeout=90, interval=0.02,
             what="not ready once stopping")
    assert svc.agents.wait(timeout=60) == 0

    steps = svc.steps(slow["session_id"])
    assert len(steps) > cut, f"the step in flight (iteration {cut}) was not recorded"
    assert steps[cut]["status"] == "ok", steps[cut]
    store = Store(svc.data_dir + "/lancedb")
    try:
        assert {w["status"] for w in store.workers.all()} == {"stopped"}
    finally:
        store.close()

    svc.start_agents("--health-port", str(health))
    wait_for(lambda: (p := probe(health, "/readyz")) and p[0] == 200, timeout=60, what="ready after restart")
    for made in (slow, quick):
        svc.wait_steps(made["session_id"], len(svc.steps(made["session_id"])) + 1, timeout=60)
        steps = svc.steps(made["session_id"])
        assert_contiguous(steps)
        assert all(s["status"] == "ok" for s in steps), [s["status"] for s in steps]
    assert svc.action(guidance)["status"] == "done"
    assert delivered(svc.steps(quick["session_id"]), guidance) == 1
