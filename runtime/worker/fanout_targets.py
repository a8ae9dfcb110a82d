"""Wiring of the observers that make agents visible outside agents.py: agent
messages in conversations (runtime/record/conversation_log.py), live events relayed
to app.py (runtime/base/relay.py), and the questions of ``ask_user`` calls posted
to conversations (runtime/dispatch/questions.py)."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from runtime.record.conversation_log import ConversationLog
from runtime.base.relay import EventRelay

if TYPE_CHECKING:
    from runtime.dispatch.questions import QuestionDesk
    from runtime.worker.service import AgentService
    from store import Store

EVENTS_URL_ENV = "AGENTSVC_EVENTS_URL"


def default_events_url() -> str:
    """app.py on this machine, at the port the environment names."""
    port = os.environ.get("AGENTSVC_PORT") or "8765"
    return os.environ.get(EVENTS_URL_ENV) or f"http://127.0.0.1:{port}"


def attach(service: AgentService, store: Store, *, events_url: str | None, token: str) -> EventRelay | None:
    """Add the observers to ``service``; returns the started relay (None when
    ``events_url`` is empty or "off", i.e. no live events)."""
    relay = EventRelay(events_url, token) if events_url and events_url != "off" else None
    service.observers.add(ConversationLog(store, on_message=relay.conversation_message if relay else None))
    if relay is not None:
        service.observers.add(relay)
        relay.start()
    return relay


def attach_questions(service: AgentService, relay: EventRelay | None = None) -> QuestionDesk:
    """Post the questions of ``ask_user`` calls and time them out: the service's
    desk (whose ``answer`` action is in its action table) becomes an observer,
    after those added before it (the relay publishes a call's ``tool_call``
    event before the desk posts its question)."""
    desk = service.actions.questions
    desk.on_message = relay.conversation_message if relay is not None else None
    service.observers.add(desk)
    return desk
