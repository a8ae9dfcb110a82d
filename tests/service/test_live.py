"""Live events: the Socket.IO handlers in-process (Flask-SocketIO's test_client),
then loopback against the real service with a real python-socketio client:
the token on the ingest namespace, rooms, per-stream seq, catch-up after a
reconnect, and the relay reconnecting by itself after app.py restarts."""
import os
import signal
import threading

import pytest
import socketio

from app import create_app
from domain.events import INGEST_NAMESPACE, TOKEN_FILE, make_event
from store import Store
from tests.harness import wait_for

TOKEN = "test-token"


# ---- handlers, in-process ---------------------------------------------------

@pytest.fixture(scope="module")
def app(tmp_path_factory):
    store = Store(str(tmp_path_factory.mktemp("live") / "db"))
    yield create_app(store, events_token=TOKEN)
    store.close()


def client(app, namespace="/", **kw):
    return app.extensions["socketio"].test_client(app, namespace=namespace, **kw)


def received(c, name: str) -> list[dict]:
    return [e["args"][0] for e in c.get_received() if e["name"] == name]


def test_ingest_refuses_a_missing_or_wrong_token(app):
    assert not client(app, INGEST_NAMESPACE).is_connected(INGEST_NAMESPACE)
    assert not client(app, INGEST_NAMESPACE, auth={"token": "wrong"}).is_connected(INGEST_NAMESPACE)
    assert client(app, INGEST_NAMESPACE, auth={"token": TOKEN}).is_connected(INGEST_NAMESPACE)


def test_events_reach_their_rooms_numbered_per_stream(app):
    ingest = client(app, INGEST_NAMESPACE, auth={"token": TOKEN})
    watcher, other, everything = client(app), client(app), client(app)
    assert watcher.emit("subscribe", {"rooms": ["session:S1"]}, callback=True)["ok"]
    other.emit("subscribe", {"rooms": ["session:S2"]}, callback=True)
    everything.emit("subscribe", {"rooms": ["all"]}, callback=True)
    for c in (watcher, other, everything):
        c.get_received()
    steps = [make_event("agent_step", f"step{i}", {"agent_id": "A1", "session_id": "S1", "iteration": i})
             for i in range(3)]
    ack = ingest.emit("events", [*steps, {"event": "bogus"}], namespace=INGEST_NAMESPACE, callback=True)
    assert ack == {"ok": True, "accepted": 3}
    got = received(watcher, "agent_step")
    assert [e["id"] for e in got] == ["step0", "step1", "step2"]
    assert [e["seq"] for e in got] == [1, 2, 3] and len({e["epoch"] for e in got}) == 1
    assert received(other, "agent_step") == []
    assert len(received(everything, "agent_step")) == 3


def test_subscribe_rejects_bad_rooms(app):
    c = client(app)
    for rooms in (["session:x' OR 1=1"], ["nosuch:abc"], [], "all"):
        ack = c.emit("subscribe", {"rooms": rooms}, callback=True)
        assert "error" in ack and set(ack["error"]) == {"code", "message"}, rooms


def test_a_posted_message_is_published_to_its_conversation(app):
    http = app.test_client()
    cid = http.post("/api/conversations", json={"title": "live"}).json["conversation_id"]
    c = client(app)
    c.emit("subscribe", {"rooms": [f"conversation:{cid}"]}, callback=True)
    c.get_received()
    posted = http.post(f"/api/conversations/{cid}/messages", json={"text": "hi all"}).json["message"]
    [event] = received(c, "conversation_message")
    assert event["id"] == posted["message_id"] and event["data"]["text"] == "hi all"
    assert event["stream"] == f"conversation_message:{cid}" and event["seq"] == 1


# ---- loopback against the real service ---------------------------------------

class Watcher:
    """A python-socketio client that records every live event it receives."""

    def __init__(self, url: str, rooms: list[str]):
        self.events: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        self.sio = socketio.Client(reconnection=False)
        for name in ("agent_state", "agent_step", "conversation_message", "action"):
            self.sio.on(name, lambda data, name=name: self._record(name, data))
        self.sio.connect(url, transports=["websocket"])
        assert self.sio.call("subscribe", {"rooms": rooms}, timeout=5)["ok"]

    def _record(self, name, data):
        with self.lock:
            self.events.append((name, data))

    def of(self, name: str) -> list[dict]:
        with self.lock:
            return [d for n, d in self.events if n == name]

    def close(self):
        self.sio.disconnect()


def test_ingest_over_the_wire_needs_the_token(shared_service):
    bad = socketio.Client(reconnection=False)
    with pytest.raises(socketio.exceptions.ConnectionError):
        bad.connect(shared_service.url, namespaces=[INGEST_NAMESPACE], auth={"token": "not-it"},
                    transports=["websocket"], wait_timeout=5)
    with open(os.path.join(shared_service.data_dir, TOKEN_FILE)) as f:
        token = f.read().strip()
    good = socketio.Client(reconnection=False)
    good.connect(shared_service.url, namespaces=[INGEST_NAMESPACE], auth={"token": token},
                 transports=["websocket"], wait_timeout=5)
    assert good.connected
    good.disconnect()


def test_live_steps_then_catch_up_after_a_reconnect(shared_service):
    svc = shared_service
    made = svc.create("countdown", config={"interval_s": 0.1, "n": 1000})
    sid = made["session_id"]
    watcher = Watcher(svc.url, [f"session:{sid}"])
    try:
        wait_for(lambda: len(watcher.of("agent_step")) >= 5, what="five live steps")
    finally:
        watcher.close()
    live = watcher.of("agent_step")
    assert [e["seq"] for e in live] == list(range(live[0]["seq"], live[0]["seq"] + len(live)))
    assert all(e["data"]["session_id"] == sid and e["id"] == e["data"]["id"] for e in live)
    states = watcher.of("agent_state")
    assert states and all(e["id"] == sid for e in states)

    # Disconnected: steps happen that this client does not see (five, so that
    # the catch-up below has at least five steps beyond the live ones).
    last_live = max(e["data"]["iteration"] for e in live)
    wait_for(lambda: len(svc.steps(sid, min_iteration=last_live + 1)) >= 5, what="five steps while disconnected")
    seen = {e["id"]: e["data"] for e in live}
    watcher = Watcher(svc.url, [f"session:{sid}"])
    try:
        cursor = max(s["iteration"] for s in seen.values())
        for step in svc.steps(sid, min_iteration=cursor + 1):  # catch up over HTTP from the cursor
            seen.setdefault(step["id"], step)
        wait_for(lambda: len(watcher.of("agent_step")) >= 3, what="live steps after reconnecting")
        for e in watcher.of("agent_step"):
            seen.setdefault(e["id"], e["data"])
    finally:
        watcher.close()
    iterations = sorted(s["iteration"] for s in seen.values())
    assert iterations == list(range(iterations[0], iterations[-1] + 1)), "a gap or duplicate after catch-up"
    assert len(iterations) >= len(live) + 5
    svc.control(made["agent_id"], "destroy")


def test_the_relay_reconnects_after_app_restarts(service):
    made = service.create("countdown", config={"interval_s": 0.1, "n": 1000})
    sid = made["session_id"]
    first = Watcher(service.url, [f"session:{sid}"])
    wait_for(lambda: first.of("agent_step"), what="a live step before the restart")
    first.close()
    service.app.send_signal(signal.SIGTERM)
    assert service.app.wait(timeout=20) == 0, "app.py did not shut down cleanly"
    service.start_app()
    second = Watcher(service.url, [f"session:{sid}"])
    try:
        wait_for(lambda: len(second.of("agent_step")) >= 2, timeout=90, what="live steps after app.py restarted")
    finally:
        second.close()
    assert second.of("agent_step")[0]["epoch"] != first.of("agent_step")[0]["epoch"]
