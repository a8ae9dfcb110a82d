"""Clients of the live stream for tests: step_delta events as agents.py relays
them, app.py's /ingest namespace, and an SSE reader of ``GET /api/stream``."""
import os
import threading
from datetime import datetime, timezone

import requests
import socketio

from cli.sse import parse
from domain.events import INGEST_NAMESPACE, TOKEN_FILE, make_event


def delta(agent_id: str, session_id: str, iteration: int, text: str, *, final: bool = False, attempt: int = 1,
          tokens: int | None = None) -> dict:
    """A step_delta event as agents.py relays it (the contract in domain/events.py)."""
    return make_event("step_delta", session_id, {
        "agent_id": agent_id, "session_id": session_id, "conversation_id": None, "iteration": iteration,
        "ask": 0, "attempt": attempt, "function": "RunMonikerStep", "text": text[-4000:],
        "tokens": len(text) // 4 if tokens is None else tokens, "mode": "json_schema", "final": final,
        "at": datetime.now(timezone.utc).isoformat()})


class Ingest:
    """app.py's /ingest namespace, as agents.py's relay uses it."""

    def __init__(self, svc):
        with open(os.path.join(svc.data_dir, TOKEN_FILE)) as f:
            token = f.read().strip()
        self.sio = socketio.Client(reconnection=False)
        self.sio.connect(svc.url, namespaces=[INGEST_NAMESPACE], auth={"token": token}, transports=["websocket"],
                         wait_timeout=10)

    def send(self, *events: dict) -> None:
        ack = self.sio.call("events", list(events), namespace=INGEST_NAMESPACE, timeout=10)
        assert ack == {"ok": True, "accepted": len(events)}, ack

    def close(self) -> None:
        self.sio.disconnect()


class Reader:
    """An SSE client reading ``GET /api/stream`` in a thread, recording every event."""

    def __init__(self, svc, rooms: str, last_event_id: str | None = None):
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        self.response = requests.get(svc.url + "/api/stream", params={"rooms": rooms}, headers=headers,
                                     stream=True, timeout=(5, 60))
        assert self.response.status_code == 200, self.response.text
        self.events = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for event in parse(line.decode() for line in self.response.iter_lines()):
                with self.lock:
                    self.events.append(event)
        except (requests.RequestException, AttributeError, ValueError):
            pass  # closed by the test

    def of(self, name: str) -> list:
        with self.lock:
            return [e for e in self.events if e.event == name]

    def all(self) -> list:
        with self.lock:
            return list(self.events)

    def cursor(self) -> str | None:
        with self.lock:
            ids = [e.id for e in self.events if e.id]
        return ids[-1] if ids else None

    def close(self):
        self.response.close()
        self.thread.join(timeout=10)
