"""The /api/conversations routes: threads that users and agent sessions share.

A user message is persisted first (the transcript is the record), then
delivered to every agent session in the conversation as an ``interrupt`` action
whose guidance is the text and whose ``source`` names the message.  The action
queue is what makes delivery safe: the interrupt handler keeps guidance durably
until a step has used it, so messages posted between two steps, or while a
session is paused, all reach its next step.

Except an answer: a message posted where an ``ask_user`` question is open
(api/answers.py) is that question's answer, not guidance; it is stored with
``event_type`` ``answer`` and the response names the ``answer`` action.
"""
from flask import Blueprint, current_app, jsonify
from ulid import ULID

from api import answers, idempotency, schemas
from api.context import ctx
from api.errors import ApiError
from api.openapi import operation
from api.requests import body, not_found, path_id, query
from api.sessions import queue, session_view

bp = Blueprint("conversations", __name__, url_prefix="/api/conversations")


def conversation_or_404(conversation_id: str) -> dict:
    conversation_id = path_id(conversation_id, "conversation_id")
    found = ctx().store.conversations.get(conversation_id)
    if found is None:
        raise not_found("conversation", conversation_id)
    return found


def live_publish(name: str, row_id: str, data: dict) -> None:
    hub = current_app.extensions.get("agentsvc_live")
    if hub is not None:
        hub.publish_row(name, row_id, data)


@bp.post("")
@operation(201, schemas.Conversation, body=schemas.CreateConversationRequest,
           also={200: (schemas.Conversation, "the conversation exists already")})
def create_conversation():
    """create a conversation (idempotent by conversation_id: 200 with the existing one)"""
    req: schemas.CreateConversationRequest = body()
    conversations = ctx().store.conversations
    with ctx().create_lock:
        existing = conversations.get(req.conversation_id) if req.conversation_id else None
        if existing:
            return jsonify({**existing, "existing": True}), 200
        row = conversations.create(title=req.title, created_by=req.created_by, tags=req.tags,
                                   conversation_id=req.conversation_id)
    return jsonify(row), 201


@bp.get("")
@operation(200, schemas.ConversationList, query=schemas.Page)
def list_conversations():
    """conversations, newest first"""
    page: schemas.Page = query()
    rows = ctx().store.conversations.newest(limit=page.limit, offset=page.offset)
    return jsonify({"conversations": rows, "limit": page.limit, "offset": page.offset})


@bp.get("/<id:conversation_id>")
@operation(200, schemas.Conversation, errors=(400, 404))
def get_conversation(conversation_id):
    """one conversation"""
    return jsonify(conversation_or_404(conversation_id))


@bp.post("/<id:conversation_id>/participants")
@operation(201, schemas.Participant, body=schemas.JoinRequest, errors=(400, 404, 409))
def join(conversation_id):
    """join a user, or an agent session, to the conversation (409: the session named does not exist)"""
    conversation_id = conversation_or_404(conversation_id)["conversation_id"]
    req: schemas.JoinRequest = body()
    agent_id = req.agent_id
    if req.kind == "agent":
        view = session_view(req.session_id)
        if view is None or (agent_id and view["agent_id"] != agent_id):
            # 409, not 404: the conversation (the path) exists; the session named in the body does not,
            # so the join conflicts with what the service holds (a 404 would say the conversation is gone).
            raise ApiError(409, "unknown_session", f"no agent session {req.session_id}"
                           + (f" of agent {agent_id}" if agent_id else ""))
        agent_id = view["agent_id"]
    row = ctx().store.conversations.join(conversation_id, kind=req.kind, user_id=req.user_id, agent_id=agent_id,
                                         session_id=req.session_id, role=req.role)
    return jsonify(row), 201


@bp.get("/<id:conversation_id>/participants")
@operation(200, schemas.ParticipantList, query=schemas.Page, errors=(400, 404))
def list_participants(conversation_id):
    """the conversation's participants"""
    conversation_id = conversation_or_404(conversation_id)["conversation_id"]
    page: schemas.Page = query()
    rows = ctx().store.conversations.participants(conversation_id, limit=page.limit, offset=page.offset)
    return jsonify({"participants": with_names(rows), "limit": page.limit, "offset": page.offset})


def with_names(rows: list[dict]) -> list[dict]:
    """Each agent row with its session's ``name`` (one query for the page), so
    a page can show agents by name instead of by id."""
    agents = [r for r in rows if "agent" in (r.get("kind"), r.get("sender_type")) and r.get("session_id")]
    names = ctx().store.states.get_many([r["session_id"] for r in agents], columns=("session_id", "name"))
    for row in agents:
        row["name"] = (names.get(row["session_id"]) or {}).get("name")
    return rows


@bp.post("/<id:conversation_id>/messages")
@operation(201, schemas.Posted, body=schemas.PostMessageRequest, errors=(400, 404), idempotent=True)
def post_message(conversation_id):
    """a user posts; every participant agent session receives it as guidance for its next step"""
    conversation_id = conversation_or_404(conversation_id)["conversation_id"]
    req: schemas.PostMessageRequest = body()
    store = ctx().store
    sender = req.user_id or "user"
    # Under an Idempotency-Key the message's id comes from the key, so a retry
    # finds a message its first try posted before it could queue the deliveries
    # (api/idempotency.py keeps the answer with those actions).
    key = idempotency.key_hash()
    message_id = f"m{key[:25]}" if key else str(ULID())
    posted = store.conversations.get_message(conversation_id, message_id) if key else None
    if posted is not None:  # a retry whose first try posted the message but queued nothing
        question = store.tool_calls.get(posted["data"]["tool_call_id"]) if posted["event_type"] == "answer" else None
        return jsonify(answer_with(question, posted) or deliver_all(posted)), 201
    draft = {"message_id": message_id, "conversation_id": conversation_id, "sender_type": "user",
             "user_id": sender, "text": req.text, "data": req.data, "event_type": "message"}
    # a reply to an open question answers it, unless the poster said it is a plain message
    question = answers.route_reply(conversation_id, req.data) if req.answers else None
    if question is not None:
        answered = answer_with(question, {**draft, "event_type": "answer",
                                          "data": {**(req.data or {}), "tool_call_id": question["id"]}})
        if answered is not None:
            return jsonify(answered), 201
    return jsonify(deliver_all(post(draft))), 201


def post(draft: dict) -> dict:
    message = ctx().store.conversations.post(draft)
    live_publish("conversation_message", message["message_id"], message)
    return message


def answer_with(question: dict | None, message: dict) -> dict | None:
    """Queue the answer a message gives to its open question, posting the
    message (unless it is posted already) once the answer is sure to be queued;
    None when the question no longer takes one (another answer got there first):
    the message is then ordinary guidance."""
    if question is None or question["status"] != "waiting_result":
        return None
    source = {"conversation_id": message["conversation_id"], "message_id": message["message_id"],
              "sender": message["user_id"]}

    def answer(accepted):
        posted = message if "created_at" in message else post(message)
        return {"message": posted, "deliveries": [], "answer": accepted}, 201
    try:
        body_, _ = answers.submit_answer(question, message["text"], message["user_id"], "conversation", source,
                                         answer=answer)
    except ApiError:
        return None
    return body_


def deliver_all(message: dict) -> dict:
    """One interrupt action per participant session, in one commit; its guidance remembers the message."""
    members = ctx().store.conversations.agent_sessions(message["conversation_id"])
    source = {"conversation_id": message["conversation_id"], "message_id": message["message_id"],
              "sender": message["user_id"]}

    def answer(rows):
        return {"message": message, "deliveries": [{"agent_id": r["agent_id"], "session_id": r["session_id"],
                                                    "action_id": r["id"]} for r in rows]}, 201
    body_, _, _ = queue("interrupt", [(m["agent_id"], m["session_id"]) for m in members],
                        {"guidance": message["text"], "source": source}, answer,
                        conversation_id=message["conversation_id"])
    return body_


@bp.get("/<id:conversation_id>/messages")
@operation(200, schemas.MessageList, query=schemas.MessageQuery, errors=(400, 404))
def list_messages(conversation_id):
    """the transcript in (created_at, message_id) order, after a cursor"""
    conversation_id = conversation_or_404(conversation_id)["conversation_id"]
    q: schemas.MessageQuery = query()
    store = ctx().store
    after = None
    if q.after:
        after = store.conversations.get_message(conversation_id, q.after)
        if after is None:
            raise ApiError(404, "unknown_cursor", f"no message {q.after} in conversation {conversation_id}")
    rows = store.conversations.transcript(conversation_id, after=after, limit=q.limit)
    return jsonify({"messages": with_names(rows), "limit": q.limit, "after": q.after})
