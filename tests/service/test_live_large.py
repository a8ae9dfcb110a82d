"""Live events with large configs at full speed (issue 37 item 7), on the real
agents.py and app.py.

Four scripted sessions whose configs are ~190 KB step at ``interval_s`` 0
while two Socket.IO clients watch ("all", and the sessions' rooms).  Before
the fix every ``agent_state`` carried the whole config: the relay's batches of
200 missed their acknowledgement and were dropped ("relay dropped 200 events"
every 5 s) and watchers saw nothing for minutes.  Now: each watcher sees every
session reach what the record holds within a generous deadline, round after
round; every event stays under its byte bound; the relay logs no loss; and a
page of ``GET /api/agents`` stays small while ``GET /api/sessions/<id>`` still
has the whole config."""
import json
import threading

import socketio

from domain.events import EVENT_MAX_BYTES, STATE_MAX_BYTES
from tests.harness import wait_for

FRAMES = [{"text": f"frame {i} " + "x" * 80} for i in range(2000)]
CONFIG = {"interval_s": 0, "frames": FRAMES}
SESSIONS = 4
ROUNDS = 5
EVENTS = ("agent_state", "agent_step", "action", "tool_call", "conversation_message", "gap")


class Watcher:
    """A python-socketio client keeping, per session, the newest iteration its
    events named, and the size of every event's data."""

    def __init__(self, url: str, rooms: list[str]):
        self.lock = threading.Lock()
        self.newest: dict[str, int] = {}
        self.sizes: list[tuple[str, int]] = []
        self.sio = wait_for(lambda: self._connect(url, rooms), timeout=60, interval=0.5,
                            what=f"a Socket.IO client to follow {rooms}")

    def _connect(self, url: str, rooms: list[str]) -> socketio.Client | None:
        """A connected client following ``rooms``, or None when this attempt failed
        (a loaded machine: once the upgrade to a WebSocket was answered as HTTP)."""
        sio = socketio.Client(reconnection=False)
        for name in EVENTS:
            sio.on(name, lambda event, name=name: self._record(name, event))
        try:
            sio.connect(url, transports=["websocket"], wait_timeout=10)
            if sio.call("subscribe", {"rooms": rooms}, timeout=10)["ok"]:
                return sio
        except (socketio.exceptions.ConnectionError, socketio.exceptions.TimeoutError):
            pass
        sio.disconnect()
        return None

    def _record(self, name: str, event: dict) -> None:
        data = event.get("data") or {}
        with self.lock:
            self.sizes.append((name, len(json.dumps(data, ensure_ascii=False).encode())))
            if name in ("agent_state", "agent_step") and isinstance(data.get("iteration"), int):
                sid = data["session_id"]
                self.newest[sid] = max(self.newest.get(sid, -1), data["iteration"])

    def has_reached(self, wanted: dict[str, int]) -> bool:
        with self.lock:
            return all(self.newest.get(sid, -1) >= it for sid, it in wanted.items())

    def close(self) -> None:
        self.sio.disconnect()


def recorded_iterations(svc, sids) -> dict[str, int]:
    """Each session's newest step in the record (read over HTTP)."""
    out = {}
    for sid in sids:
        steps = svc.get("/api/agent-steps", session_id=sid, order="desc", limit=1).json()["steps"]
        out[sid] = steps[0]["iteration"] if steps else -1
    return out


def test_large_configs_at_full_speed_keep_every_watcher_current(service):
    svc = service
    wait_for(lambda: svc.get("/readyz").status_code == 200, timeout=120, interval=0.5, what="agents.py to poll")
    everything = Watcher(svc.url, ["all"])
    made = [svc.create("scripted", config=CONFIG) for _ in range(SESSIONS)]
    sids = [m["session_id"] for m in made]
    rooms = Watcher(svc.url, [f"session:{sid}" for sid in sids])
    try:
        wait_for(lambda: min(recorded_iterations(svc, sids).values()) >= 20, timeout=120,
                 what="every session to take 20 steps")
        for round_ in range(ROUNDS):
            record = recorded_iterations(svc, sids)
            for watcher, name in ((everything, "all"), (rooms, "the sessions' rooms")):
                wait_for(lambda: watcher.has_reached(record), timeout=45,
                         what=f"round {round_}: the watcher of {name} to reach {record} (it has {watcher.newest})")
        assert max(recorded_iterations(svc, sids).values()) > min(record.values()), "the sessions stopped stepping"
    finally:
        everything.close()
        rooms.close()

    for watcher in (everything, rooms):
        assert watcher.sizes
        for name, size in watcher.sizes:
            assert size <= (STATE_MAX_BYTES if name == "agent_state" else EVENT_MAX_BYTES), (name, size)
    logs = svc.logs()
    assert "relay dropped" not in logs and "relay lost" not in logs

    listing = svc.get("/api/agents", limit=100)
    assert len(listing.content) <= SESSIONS * STATE_MAX_BYTES, len(listing.content)
    assert all("config" not in row and "state" not in row for row in listing.json()["agents"])
    assert svc.session(sids[0])["config"]["frames"] == FRAMES  # one session's GET is whole
    sessions = svc.get(f"/api/agents/{made[0]['agent_id']}/sessions").json()["sessions"]
    assert [s["session_id"] for s in sessions] == [sids[0]] and "config" not in sessions[0]
    for m in made:
        svc.control(m["agent_id"], "destroy")
