"""``GET /api/sessions/<id>/export``: a session's whole record as JSON lines.

One object per line, each with its ``kind``: first the ``session`` (its
snapshot as ``GET /api/sessions/<id>`` shows it), then every ``step`` in
iteration order, every ``tool_call`` in the order they were made, and the
``message``s of its conversation, oldest first (with their senders' names).
A line holds the row as the list routes show it, under ``row``.

The record is read a page at a time while the answer is sent, so a session of
100,000 steps costs the app a page of memory, not the whole history.  Like
``/api/stream`` it is not JSON, so it is not in the OpenAPI document; the
README's API table lists it.
"""
from flask import Blueprint, Response, current_app, stream_with_context

from api.context import ctx
from api.requests import not_found, path_id
from api.routes.conversations import with_names
from api.sessions import session_view

bp = Blueprint("export", __name__, url_prefix="/api")

PAGE = 500  # rows read at once


@bp.get("/sessions/<id:session_id>/export")
def export_session(session_id):
    """a session's record (session, steps, tool calls, messages) as JSON lines"""
    session_id = path_id(session_id, "session_id")
    view = session_view(session_id)
    if view is None:
        raise not_found("session", session_id)
    store, dumps = ctx().store, current_app.json.dumps

    def lines():
        yield dumps({"kind": "session", "row": view}) + "\n"
        for kind, rows in (("step", _steps(store, session_id)), ("tool_call", _tool_calls(store, session_id)),
                           ("message", _messages(store, view.get("conversation_id")))):
            for row in rows:
                yield dumps({"kind": kind, "row": row}) + "\n"

    name = f"session-{session_id}.jsonl"
    return Response(stream_with_context(lines()), mimetype="application/x-ndjson",
                    headers={"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"})


def _steps(store, session_id: str):
    """Every step, a range of iterations at a time (the store's cheap read)."""
    after = -1
    while True:
        page = store.steps.search(session_id=session_id, min_iteration=after + 1, limit=PAGE)
        yield from page
        if len(page) < PAGE:
            return
        after = page[-1]["iteration"]


def _tool_calls(store, session_id: str):
    offset = 0
    while True:
        page = store.tool_calls.search(session_id=session_id, limit=PAGE, offset=offset)
        yield from page
        if len(page) < PAGE:
            return
        offset += PAGE


def _messages(store, conversation_id: str | None):
    if not conversation_id:
        return
    after = None
    while True:
        page = store.conversations.transcript(conversation_id, after=after, limit=PAGE)
        yield from with_names(page)
        if len(page) < PAGE:
            return
        after = page[-1]
