"""The production setup, run for real: app.py under gunicorn (threads, real
WebSockets), two app.py instances fanned out through Redis, one agents.py.

What these prove: a python-socketio client on the WebSocket transport gets
live events from app.py under gunicorn; a client on instance A sees the events
of a session created, paused and talked to through instance B (agents.py
relays only to B: A learns of them through Redis); and the event stream
(SSE) works under gunicorn too.
"""
import os
import sys
import threading

import pytest
import requests
import socketio

from tests.harness import ROOT, wait_for
from tests.servers import Proc, gunicorn_app, redis_server


class Watcher:
    """A Socket.IO client on the WebSocket transport only, collecting events."""

    def __init__(self, url: str, rooms: list[str]):
        self.events: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        self.client = socketio.Client(reconnection=False)
        for name in ("agent_step", "agent_state", "action", "conversation_message"):
            self.client.on(name, self._collect(name))
        self.client.connect(url, transports=["websocket"], wait_timeout=30)
        assert self.client.transport() == "websocket"
        ack = self.client.call("subscribe", {"rooms": rooms}, timeout=30)
        assert ack["ok"], ack

    def _collect(self, name):
        def handler(payload):
            with self.lock:
                self.events.append((name, payload))
        return handler

    def of(self, name: str) -> list[dict]:
        with self.lock:
            return [p for n, p in self.events if n == name]


class Cluster(dict):
    def __init__(self, a: str, b: str, procs: list[Proc]):
        super().__init__(a=a, b=b)
        self.procs = procs

    def logs(self) -> str:
        return "\n".join(p.log() for p in self.procs)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """redis-server, app.py A and B under gunicorn sharing it, one agents.py relaying to B."""
    root = tmp_path_factory.mktemp("cluster")
    logs = root / "logs"
    logs.mkdir()
    data = str(root / "data")
    procs: list[Proc] = []
    try:
        redis_proc, redis_url = redis_server(str(logs))
        procs.append(redis_proc)
        env = {"AGENTSVC_DATA_DIR": data, "AGENTSVC_MESSAGE_QUEUE": redis_url}
        a, url_a = gunicorn_app("app-a", str(logs), env)
        procs.append(a)
        b, url_b = gunicorn_app("app-b", str(logs), env)
        procs.append(b)
        procs.append(Proc("agents", [sys.executable, os.path.join(ROOT, "agents.py"), "--data-dir", data,
                                     "--events-url", url_b], str(logs)))
        yield Cluster(url_a, url_b, procs)
    finally:
        for proc in reversed(procs):
            proc.stop()


def post(url: str, path: str, body: dict) -> dict:
    r = requests.post(url + path, json=body, timeout=30)
    assert r.status_code in (200, 201, 202), r.text
    return r.json()


def test_a_client_on_one_instance_sees_what_another_was_asked(cluster):
    made = post(cluster["b"], "/api/agents", {"moniker": "echo", "config": {"interval_s": 0.1}})
    sid = made["session_id"]
    watch_a = Watcher(cluster["a"], [f"session:{sid}"])
    watch_b = Watcher(cluster["b"], [f"session:{sid}"])
    try:
        wait_for(lambda: len(watch_a.of("agent_step")) >= 2, timeout=60, what="steps on instance A")
        paused = post(cluster["b"], f"/api/agents/{made['agent_id']}/pause", {})
        wait_for(lambda: any(e["id"] == paused["action_id"] and e["data"]["status"] == "done"
                             for e in watch_a.of("action")), timeout=60, what="the pause, on instance A")
        wait_for(lambda: any(e["data"]["status"] == "paused" for e in watch_a.of("agent_state")), timeout=60,
                 what="the paused state, on instance A")
        # Both instances' clients got the same events, each once.
        for watcher in (watch_a, watch_b):
            ids = [e["id"] for e in watcher.of("agent_step")]
            assert len(ids) == len(set(ids)), "an event arrived twice"
        wait_for(lambda: {e["id"] for e in watch_b.of("agent_step")} == {e["id"] for e in watch_a.of("agent_step")},
                 timeout=30, what="both instances to show the same steps")
    finally:
        watch_a.client.disconnect()
        watch_b.client.disconnect()


def test_a_message_posted_to_one_instance_reaches_the_other(cluster):
    conv = post(cluster["b"], "/api/conversations", {"title": "fan-out"})["conversation_id"]
    watch_a = Watcher(cluster["a"], [f"conversation:{conv}"])
    try:
        posted = post(cluster["b"], f"/api/conversations/{conv}/messages", {"text": "hello from B"})
        got = wait_for(lambda: watch_a.of("conversation_message"), timeout=60, what="the message on instance A")
        assert got[0]["id"] == posted["message"]["message_id"] and got[0]["data"]["text"] == "hello from B"
    finally:
        watch_a.client.disconnect()


def test_the_event_stream_under_gunicorn(cluster):
    """SSE on instance A of a session stepping through B: the recorded steps,
    then live ones (woken by the poll: agents.py relays to B only)."""
    made = post(cluster["b"], "/api/agents", {"moniker": "countdown", "config": {"n": 8, "interval_s": 0.2}})
    iterations = []
    with requests.get(cluster["a"] + "/api/stream", params={"rooms": f"session:{made['session_id']}"},
                      stream=True, timeout=(5, 60)) as r:
        assert r.status_code == 200
        from cli.sse import parse
        for event in parse(line.decode() for line in r.iter_lines()):
            if event.event == "agent_step":
                iterations.append(event.data["data"]["iteration"])
            if event.event == "agent_state" and event.data["data"]["status"] == "done":
                break
    assert iterations == list(range(8))
