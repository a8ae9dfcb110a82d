"""``GET /readyz``'s answer from the workers' heartbeat rows (api/routes/health.py):
ready only while some worker's fresh heartbeat says it polls the queue; a worker
still adopting its sessions, a stale heartbeat or a stopped worker is not."""
from datetime import timedelta

import pytest

from app import create_app
from store import Store, codec


@pytest.fixture
def app_and_store(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSVC_READY_STALE_S", "10")
    store = Store(str(tmp_path / "db"))
    yield create_app(store, events_token="t", api_token="secret"), store
    store.close()


def beat(store, worker_id: str, *, polling: bool, status: str = "running", age_s: float = 0.0) -> None:
    store.workers.submit_beat(worker_id, status, polling=polling).result()
    if age_s:  # as if it had last beaten that long ago
        row = next(w for w in store.workers.all() if w["worker_id"] == worker_id)
        old = codec.utcnow() - timedelta(seconds=age_s)
        store.writer.submit_upsert("workers", "worker_id", [dict(row, heartbeat_at=old, started_at=old)]).result()


def answer(app) -> tuple[int, dict]:
    r = app.test_client().get("/readyz")  # no token: the route is open
    return r.status_code, r.json


def test_ready_only_while_a_fresh_worker_polls(app_and_store):
    app, store = app_and_store
    assert answer(app) == (503, {"status": "not_ready", "reason": "no worker with a fresh heartbeat",
                                 "workers_polling": 0, "workers_alive": 0, "heartbeat_age_s": None})
    beat(store, "w1", polling=False)
    status, body = answer(app)
    assert status == 503 and body["reason"] == "a worker is adopting its sessions" and body["workers_alive"] == 1
    beat(store, "w1", polling=True)
    status, body = answer(app)
    assert status == 200 and body["status"] == "ready" and body["workers_polling"] == 1
    beat(store, "w1", polling=True, age_s=60)  # killed a minute ago
    assert answer(app)[0] == 503
    beat(store, "w2", polling=True, status="stopped")  # a clean stop says so: never polling
    assert answer(app)[1]["workers_polling"] == 0
    beat(store, "w3", polling=True)
    assert answer(app)[0] == 200
