"""``GET /api/health``: the liveness probe, with the queue's depth and how the
store's tables are holding up (api/storage_health.py); ``GET /readyz``: whether
an agents.py worker polls the queue now.

``/readyz`` is on app.py's port (agents.py's own ``/readyz``, runtime/worker/health.py,
is off unless ``--health-port`` is given, and answers for one worker only), so
an operator or a test harness can tell from one place whether the service is
serving or still recovering: 200 while some worker's heartbeat is fresh (at
most ``AGENTSVC_READY_STALE_S``, 10 s, 20 s on object storage, old) and says it polls (it has adopted
its sessions and is not stopping; store/workers.py), 503 otherwise (no worker,
all of them dead or killed, or one still adopting after a start).  It is a
separate route rather than a field of ``/api/health`` because a probe reads the
status code alone, and because ``/api/health`` stays 200 while app.py and the
store answer.  It says nothing about agents (counts and an age only), so it is
open like ``/api/health``.
"""
import os
from datetime import datetime, timezone

from flask import Blueprint, current_app, jsonify

from api import schemas
from api.context import ctx
from api.openapi import operation

bp = Blueprint("health", __name__, url_prefix="/api")
ready_bp = Blueprint("ready", __name__)


@bp.get("/health")
@operation(200, schemas.Health, errors=(503,))
def health():
    """liveness and queue depth"""
    store = ctx().store
    try:
        pending = store.actions.count("pending")
        oldest = store.actions.oldest_pending()
    except Exception as exc:
        current_app.logger.error("health check failed: %s", exc)
        return jsonify({"status": "error", "message": "database unreachable"}), 503
    age = None
    if oldest:
        created = datetime.fromisoformat(oldest["created_at"].replace("Z", "+00:00"))
        age = round((datetime.now(timezone.utc) - created).total_seconds(), 3)
    # "ok" even when storage is behind: the service still answers; "storage" says how its tables are.
    return jsonify({"status": "ok", "pending_actions": pending, "oldest_pending_age_s": age,
                    "storage": ctx().storage_health.report()})


def _age_s(stamp: str | None, now: datetime) -> float | None:
    if not stamp:
        return None
    return (now - datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds()


@ready_bp.get("/readyz")
@operation(200, schemas.Readiness, errors=(), also={503: (schemas.Readiness, "no worker polls the queue")})
def readyz():
    """readiness: 200 while an agents.py worker polls the queue, 503 while none does (down, killed, or adopting
    its sessions after a start)"""
    # On object storage a worker beats every dead-after / 4 (7.5 s by default, agents.py): 20 s there
    stale_after_s = float(os.environ.get("AGENTSVC_READY_STALE_S") or (20.0 if ctx().store.on_object_storage
                                                                      else 10.0))
    try:
        workers = ctx().store.workers.all()
    except Exception as exc:
        current_app.logger.error("readiness check failed: %s", exc)
        return jsonify({"status": "not_ready", "reason": "database unreachable", "workers_polling": 0,
                        "workers_alive": 0, "heartbeat_age_s": None}), 503
    now = datetime.now(timezone.utc)
    ages = {w["worker_id"]: _age_s(w.get("heartbeat_at"), now) for w in workers if w.get("status") == "running"}
    alive = [w for w in workers if ages.get(w["worker_id"]) is not None and ages[w["worker_id"]] <= stale_after_s]
    polling = [w for w in alive if w.get("polling")]
    freshest = min((ages[w["worker_id"]] for w in (polling or alive)), default=None)
    body = {"workers_polling": len(polling), "workers_alive": len(alive),
            "heartbeat_age_s": None if freshest is None else round(max(freshest, 0.0), 3)}
    if polling:
        return jsonify({"status": "ready", "reason": None, **body})
    reason = "a worker is adopting its sessions" if alive else "no worker with a fresh heartbeat"
    return jsonify({"status": "not_ready", "reason": reason, **body}), 503
