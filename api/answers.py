"""Answering an ``ask_user`` question: from ``POST /api/sessions/<id>/answer``
(api/routes/questions.py), or from a user's message in the conversation the
question was posted to (api/routes/conversations.py).

An answer is queued as an action (type ``answer``) that the session's worker
applies (runtime/dispatch/questions.py).  A 409 is decided at accept time (no open
question, the call was answered or timed out, or an answer to it is already
queued) and again when the action is applied, so of two racing answers
exactly one applies and the other's action ends ``failed`` with
``conflict:``.
"""
from api.context import ctx
from api.errors import ApiError
from api.requests import not_found
from api.sessions import queue
from tools import ask_user


def answer_queued(session_id: str, tool_call_id: str) -> bool:
    """An answer to this call is already in the queue (not yet applied)."""
    for status in ("pending", "processing"):
        for action in ctx().store.actions.search(session_id=session_id, type="answer", status=status, limit=1000):
            if (action.get("payload") or {}).get("tool_call_id") == tool_call_id:
                return True
    return False


def question_of(session_id: str, tool_call_id: str | None) -> dict:
    """The open question of the session that an answer is for: ``tool_call_id``,
    or the session's oldest open one."""
    store = ctx().store
    if tool_call_id is None:
        open_ = store.tool_calls.open_questions(session_id)
        if not open_:
            raise ApiError(409, "conflict", f"session {session_id} has no open question")
        return open_[0]
    row = store.tool_calls.get(tool_call_id)
    if row is None or row["session_id"] != session_id:
        raise not_found(f"tool call of session {session_id}", tool_call_id)
    if row["name"] != ask_user.NAME:
        raise ApiError(409, "conflict", f"tool call {tool_call_id} is a {row['name']!r} call, not a question")
    if row["status"] != "waiting_result":
        raise ApiError(409, "conflict", f"question {tool_call_id} is {row['status']}: it was answered already "
                                        "or timed out")
    return row


def submit_answer(question: dict, text: str, user_id: str | None, via: str, source: dict | None = None,
                  answer=None) -> tuple[dict, int]:
    """Queue the answer action (refusing a second answer while one is queued);
    returns the request's answer: ``answer(accepted)`` of the action's ids, or
    those ids with the question's (its default)."""
    def answered(rows):
        accepted = {"agent_id": question["agent_id"], "session_id": question["session_id"],
                    "action_id": rows[0]["id"], "status": rows[0]["status"], "tool_call_id": question["id"]}
        return answer(accepted) if answer else (accepted, 202)
    with ctx().create_lock:  # two answers racing inside this process: the second sees the first queued
        if answer_queued(question["session_id"], question["id"]):
            raise ApiError(409, "conflict", f"question {question['id']} has an answer queued already")
        payload = {"tool_call_id": question["id"], "text": text, "user_id": user_id or "user", "via": via}
        if source:
            payload["source"] = source
        body, status, _ = queue("answer", [(question["agent_id"], question["session_id"])], payload, answered)
        return body, status


def route_reply(conversation_id: str, data: dict | None) -> dict | None:
    """The open question a user's message in this conversation answers, or None.

    A question counts when it was posted to this conversation (its message id
    is its tool call's id) and still waits; ``data.tool_call_id`` picks one of
    several (and a reply naming a question that is closed answers none), else
    the oldest.  An answer already queued for it does not count, so a reply to
    it goes on as ordinary guidance."""
    store = ctx().store
    asked_here = store.conversations.question_ids(conversation_id)
    here = [q for q in store.tool_calls.open_among(asked_here) if not answer_queued(q["session_id"], q["id"])]
    wanted = (data or {}).get("tool_call_id")
    if wanted is not None:  # a reply to one question never answers another
        return next((q for q in here if q["id"] == wanted), None)
    return here[0] if here else None
