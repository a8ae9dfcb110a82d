"""Conversations: shared threads between users and agent sessions.

Three tables.  ``conversations`` holds one row per thread;
``conversation_participants`` one row per member (a user, or one agent
session), keyed by a deterministic id so that joining twice is one row;
``conversation_messages`` is append-only, and a reader pages through it with a
cursor (the last message_id seen), ordered by created_at then message_id.

Every write goes through the group-committing writer; every filter is built by
:mod:`store.filters` from checked ids.
"""
from concurrent.futures import Future
from datetime import datetime

from ulid import ULID

from store import codec, filters, query

KINDS = {"user", "agent"}
SENDERS = {"user", "agent"}
EVENT_TYPES = {"message", "step", "question", "answer"}
ORDER = [("created_at", True), ("message_id", True)]
MESSAGE_FIELDS = ("user_id", "agent_id", "session_id", "text", "data", "iteration", "step_token", "next_step_token",
                  "notes")


def participant_key(conversation_id: str, kind: str, subject: str) -> str:
    """One participant row per (conversation, user) or (conversation, session)."""
    return f"{conversation_id}|{kind}|{subject}"


class Conversations:
    threads = "conversations"
    members = "conversation_participants"
    messages = "conversation_messages"

    def __init__(self, tables: dict, writer):
        self.tables = tables
        self.writer = writer

    # ---- threads --------------------------------------------------------

    def create(self, *, title: str | None = None, created_by: str | None = None, tags=None,
               conversation_id: str | None = None) -> dict:
        row = {"conversation_id": filters.check_id(conversation_id or str(ULID()), "conversation_id"),
               "title": title, "created_by": created_by, "status": "open", "tags": list(tags or []),
               "created_at": codec.utcnow()}
        self.writer.append(self.threads, [row])
        return codec.decode(self.threads, codec.encode(self.threads, row))

    def get(self, conversation_id: str) -> dict | None:
        return query.first(self.tables[self.threads], self.threads,
                           filters.eq_id("conversation_id", conversation_id), order=[("created_at", True)])

    def newest(self, limit: int = 100, offset: int = 0) -> list[dict]:
        return query.rows(self.tables[self.threads], self.threads, None,
                          order=[("created_at", False), ("conversation_id", False)], limit=limit, offset=offset)

    # ---- participants ---------------------------------------------------

    def join(self, conversation_id: str, *, kind: str, user_id: str | None = None, agent_id: str | None = None,
             session_id: str | None = None, role: str | None = None) -> dict:
        """Add a participant, or return the existing row if it is already in."""
        row, committed = self.submit_join(conversation_id, kind=kind, user_id=user_id, agent_id=agent_id,
                                          session_id=session_id, role=role)
        committed.result()
        return row

    def submit_join(self, conversation_id: str, *, kind: str, user_id=None, agent_id=None, session_id=None,
                    role=None) -> tuple[dict, Future]:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}")
        filters.check_id(conversation_id, "conversation_id")
        if kind == "user":
            subject = filters.check_id(user_id, "user_id")
            agent_id = session_id = None
        else:
            filters.check_id(agent_id, "agent_id")
            subject = filters.check_id(session_id, "session_id")
            user_id = None
        key = participant_key(conversation_id, kind, subject)
        existing = self.participant(key)
        if existing and existing["left_at"] is None:
            done: Future = Future()
            done.set_result(None)
            return existing, done
        row = {"id": key, "conversation_id": conversation_id, "kind": kind, "user_id": user_id,
               "agent_id": agent_id, "session_id": session_id, "role": role or ("member" if kind == "user" else "agent"),
               "joined_at": codec.utcnow(), "left_at": None}
        committed = self.writer.submit_upsert(self.members, "id", [row])
        return codec.decode(self.members, codec.encode(self.members, row)), committed

    def participant(self, key: str) -> dict | None:
        # The key holds '|' (outside the id pattern), so it is matched through its
        # checked parts: conversation_id and the subject's id, then compared here.
        conversation_id, kind, subject = key.split("|", 2)
        column = "user_id" if kind == "user" else "session_id"
        where = filters.all_of(filters.eq_id("conversation_id", conversation_id), filters.eq_id(column, subject))
        found = query.rows(self.tables[self.members], self.members, where, limit=10)
        return next((r for r in found if r["id"] == key), None)

    def participants(self, conversation_id: str, limit: int = 100, offset: int = 0) -> list[dict]:
        return query.rows(self.tables[self.members], self.members, filters.eq_id("conversation_id", conversation_id),
                          order=[("joined_at", True), ("id", True)], limit=limit, offset=offset)

    def agent_sessions(self, conversation_id: str) -> list[dict]:
        """Every agent session that is in the conversation now (all of them, not a page)."""
        where = filters.all_of(filters.eq_id("conversation_id", conversation_id),
                               filters.eq_word("kind", "agent", KINDS))
        return [r for r in query.rows(self.tables[self.members], self.members, where, order=[("joined_at", True)])
                if r["left_at"] is None]

    def agent_memberships(self) -> dict[str, list[str]]:
        """session_id -> the conversations it is in, over all conversations: one
        query that a runtime can cache, instead of one per session and step."""
        where = filters.eq_word("kind", "agent", KINDS)
        out: dict[str, list[str]] = {}
        for row in query.rows(self.tables[self.members], self.members, where, order=[("joined_at", True)]):
            if row["left_at"] is None:
                out.setdefault(row["session_id"], []).append(row["conversation_id"])
        return out

    # ---- messages -------------------------------------------------------

    def submit_message(self, message: dict) -> tuple[dict, Future]:
        """Queue one message for the next group commit: the row as stored, and a
        future that resolves once it is durable."""
        if message.get("sender_type") not in SENDERS:
            raise ValueError(f"sender_type must be one of {sorted(SENDERS)}")
        filters.check_id(message.get("conversation_id"), "conversation_id")
        created_at = codec.utcnow()
        row = {"message_id": str(ULID.from_datetime(created_at)), "created_at": created_at, "status": "posted",
               "event_type": "message", **dict.fromkeys(MESSAGE_FIELDS), **message}
        committed = self.writer.submit_append(self.messages, [row])
        return codec.decode(self.messages, codec.encode(self.messages, row)), committed

    def post(self, message: dict) -> dict:
        row, committed = self.submit_message(message)
        committed.result()
        return row

    def question_ids(self, conversation_id: str, limit: int = 500) -> list[str]:
        """Ids of the newest questions posted to a conversation (``event_type``
        question; each message's id is its ask_user call's id)."""
        where = filters.all_of(filters.eq_id("conversation_id", conversation_id),
                               filters.eq_word("event_type", "question", EVENT_TYPES))
        found = query.rows(self.tables[self.messages], self.messages, where, columns=["message_id"],
                           order=[("created_at", False)], limit=limit)
        return [r["message_id"] for r in found]

    def conversations_of_session(self, session_id: str) -> list[str]:
        """The conversations an agent session is a participant of now."""
        where = filters.all_of(filters.eq_id("session_id", session_id), filters.eq_word("kind", "agent", KINDS))
        return [r["conversation_id"] for r in query.rows(self.tables[self.members], self.members, where,
                                                          order=[("joined_at", True)], limit=1000)
                if r["left_at"] is None]

    def get_message(self, conversation_id: str, message_id: str) -> dict | None:
        where = filters.all_of(filters.eq_id("conversation_id", conversation_id), filters.eq_id("message_id", message_id))
        return query.first(self.tables[self.messages], self.messages, where)

    def transcript(self, conversation_id: str, *, after: dict | None = None, limit: int = 100) -> list[dict]:
        """Messages in (created_at, message_id) order, strictly after the ``after`` message."""
        where = filters.eq_id("conversation_id", conversation_id)
        if after is not None:
            when = codec.parse_time(after["created_at"])
            later = filters.ts_cmp("created_at", ">", when)
            same_instant = filters.all_of(filters.ts_cmp("created_at", ">=", when),
                                          filters.ts_cmp("created_at", "<=", when),
                                          filters.id_cmp("message_id", ">", after["message_id"]))
            where = filters.all_of(where, filters.any_of(later, same_instant))
        return query.rows(self.tables[self.messages], self.messages, where, order=ORDER, limit=limit)

    def last_messages(self, conversation_id: str, n: int = 50) -> list[dict]:
        """The newest ``n`` messages, oldest first (the archive's transcript)."""
        newest = query.rows(self.tables[self.messages], self.messages, filters.eq_id("conversation_id", conversation_id),
                            order=[("created_at", False), ("message_id", False)], limit=n)
        return newest[::-1]

    def active_between(self, after: datetime, before: datetime, limit: int = 50_000) -> set[str]:
        """Conversations with a message created in [after, before) (the archive's quiet sweep)."""
        where = filters.all_of(filters.ts_cmp("created_at", ">=", after), filters.ts_cmp("created_at", "<", before))
        found = query.rows(self.tables[self.messages], self.messages, where, columns=["conversation_id"], limit=limit)
        return {r["conversation_id"] for r in found}

    def count_messages(self, conversation_id: str) -> int:
        return query.count(self.tables[self.messages], filters.eq_id("conversation_id", conversation_id))
