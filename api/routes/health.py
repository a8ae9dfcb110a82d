"""``GET /api/health``: the liveness probe, with the queue's depth and how the
store's tables are holding up (api/storage_health.py)."""
from datetime import datetime, timezone

from flask import Blueprint, current_app, jsonify

from api import schemas
from api.context import ctx
from api.openapi import operation

bp = Blueprint("health", __name__, url_prefix="/api")


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
