"""Live events stay small, and the relay sheds load by coalescing (issue 37 item 7).

The shapes (domain/events.py): what an ``agent_state`` carries, the size bound
of every event, the config sent only when it changed.  The relay's buffer
(runtime/base/relay.py), driven without a network: a session's newer state replaces
its unsent older one in place, steps are never replaced, and what it must drop
(a full buffer, a batch not acknowledged) it tells app.py in a ``gap`` event.
And app.py's side (api/live.py): a ``gap`` reaches every browser, whatever its rooms."""
import asyncio
import json
from datetime import datetime, timezone

from app import create_app
from domain.events import (EVENT_MAX_BYTES, GAP, INGEST_NAMESPACE, ROUTING_KEYS, STATE_MAX_BYTES, ConfigChanges,
                           bounded, json_size, make_event, session_summary)
from runtime.base.relay import BATCH_BYTES, EventRelay
from store import Store

BIG = "x" * 200_000


def snapshot(**fields) -> dict:
    return {"session_id": "S1", "agent_id": "A1", "moniker": "scripted", "task": "count", "status": "running",
            "iteration": 3, "config": {"interval_s": 0, "frames": [{"text": BIG}]}, "state": {"n": 3},
            "result": {"text": "three", "data": None}, "pending_guidance": [{"text": "g"}], "used_guidance": ["a"],
            "usage": {"input_tokens": 5}, "last_error": None, "created_at": datetime.now(timezone.utc), **fields}


# ---- shapes ----------------------------------------------------------------

def test_an_event_that_fits_is_unchanged_and_a_big_one_leaves_its_largest_fields_out():
    small = {"id": "s1", "session_id": "S1", "text": "hi", "at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)}
    assert bounded(small) == {"id": "s1", "session_id": "S1", "text": "hi", "at": "2026-01-02T03:04:05Z"}

    big = {"id": "s1", "session_id": "S1", "iteration": 4, "status": "ok", "text": "t" * 1000,
           "state": {"blob": "s" * 100_000}, "data": {"blob": "d" * 70_000}}
    out = bounded(big)
    assert json_size(out) <= EVENT_MAX_BYTES
    assert set(out["omitted"]) == {"state", "data"} and out["omitted"]["state"] > 100_000
    assert out["text"] == "t" * 1000 and "state" not in out and "data" not in out
    assert {k: out[k] for k in ("id", "session_id", "iteration", "status")} == {
        "id": "s1", "session_id": "S1", "iteration": 4, "status": "ok"}


def test_routing_keys_are_never_left_out():
    data = {key: "k" for key in ROUTING_KEYS} | {"blob": "b" * 10_000}
    out = bounded(data, max_bytes=2_000)
    assert ROUTING_KEYS <= set(out) and out["omitted"] == {"blob": 10_002}


def test_a_state_event_carries_what_changes_not_the_config_nor_the_guidance_lists():
    out = session_summary(snapshot())
    assert "config" not in out and "pending_guidance" not in out and "used_guidance" not in out
    assert out["state"] == {"n": 3} and out["iteration"] == 3 and out["usage"] == {"input_tokens": 5}
    assert "omitted" not in out and json_size(out) < 1_000


def test_a_changed_config_rides_along_and_is_left_out_when_too_big():
    small = session_summary(snapshot(config={"interval_s": 0}), config=True)
    assert small["config"] == {"interval_s": 0}
    big = session_summary(snapshot(), config=True)
    assert "config" not in big and big["omitted"]["config"] > 200_000 and json_size(big) <= STATE_MAX_BYTES


def test_a_large_state_is_left_out_with_a_flag_and_a_large_result_summarised():
    out = session_summary(snapshot(state={"blob": BIG}, result={"text": "r" * 5_000, "data": {"blob": BIG}}))
    assert json_size(out) <= STATE_MAX_BYTES
    assert out["omitted"] == {"state": json_size({"blob": BIG})}
    assert out["result"] == {"text": "r" * 500 + "…"} and out["summarised"]["result"] > 200_000


def test_config_changes_are_seen_by_identity_of_the_values_or_by_value():
    changes = ConfigChanges()
    config = {"interval_s": 0, "frames": [{"text": BIG}]}
    first = snapshot(config=dict(config))
    assert changes.changed(first)
    assert not changes.changed(snapshot(config=dict(config)))  # a new dict with the same values
    assert not changes.changed(snapshot(config={"interval_s": 0, "frames": [{"text": BIG}]}))  # equal, read again
    assert changes.changed(snapshot(config=dict(config, budget_tokens=10)))
    assert not changes.changed(snapshot(config=dict(config, budget_tokens=10), status="done"))
    assert changes.changed(snapshot(config=dict(config, budget_tokens=10), status="running"))  # woken: sent again


# ---- the relay's buffer ------------------------------------------------------

class FakeClient:
    """The relay's socket.io client as far as _send uses it: an ingest namespace
    that acknowledges (or not) each batch, recording what was sent."""

    def __init__(self, ack: bool = True):
        self.ack, self.batches = ack, []
        self.namespaces = {INGEST_NAMESPACE: "sid"}

    async def call(self, name, batch, namespace, timeout):
        if not self.ack:
            raise TimeoutError()
        if self.ack == "refuse":
            return {"ok": False, "error": "a batch is a list of at most 1000 events"}
        self.batches.append(batch)
        return {"ok": True, "accepted": len(batch)}


def relay(**options) -> EventRelay:
    async def make():
        return EventRelay("http://127.0.0.1:9", "token", **options)
    return asyncio.run(make())


def drain(r: EventRelay, client: FakeClient) -> list[dict]:
    """Send what the relay holds, as its task does, until it holds nothing or a batch fails."""
    r._client = client

    async def send_all():
        while (r.buffer or r._gap is not None) and await r._send(r._next_batch()):
            pass
    asyncio.run(send_all())
    return [event for batch in client.batches for event in batch]


def step(i: int, session: str = "S1") -> dict:
    return {"id": f"step-{session}-{i}", "session_id": session, "agent_id": "A1", "iteration": i, "status": "ok",
            "state": {"n": i}}


def test_a_sessions_newer_state_replaces_its_unsent_one_in_place_and_steps_are_all_kept():
    r = relay()
    asyncio.run(r.step_persisted(snapshot(iteration=0), step(0)))
    asyncio.run(r.step_persisted(snapshot(session_id="S2", iteration=0), step(0, "S2")))
    for i in range(1, 50):
        asyncio.run(r.step_persisted(snapshot(iteration=i), step(i)))
    assert len(r.buffer) == 51 + 2 and r.coalesced == 49  # 51 steps, one state per session
    sent = drain(r, FakeClient())
    assert [e["data"]["iteration"] for e in sent if e["event"] == "agent_step" and e["id"].startswith("step-S1")] \
        == list(range(50))
    states = [e for e in sent if e["event"] == "agent_state"]
    assert [(e["id"], e["data"]["iteration"]) for e in states] == [("S1", 49), ("S2", 0)]
    assert sent.index(states[0]) == 1  # where the first state of S1 waited, not behind every later step
    assert r.dropped == 0 and not any(e["event"] == GAP for e in sent)


def test_the_config_goes_with_the_first_state_and_with_a_change_even_when_the_change_was_coalesced():
    r = relay()
    config = {"interval_s": 0}
    asyncio.run(r.snapshot_saved(snapshot(config=dict(config))))
    first = drain(r, FakeClient())
    assert first[0]["data"]["config"] == config
    asyncio.run(r.snapshot_saved(snapshot(config=dict(config, budget_tokens=99))))  # a raised budget
    asyncio.run(r.snapshot_saved(snapshot(config=dict(config, budget_tokens=99), iteration=4)))  # replaces it
    asyncio.run(r.snapshot_saved(snapshot(config=dict(config, budget_tokens=99), iteration=5)))
    [state] = drain(r, FakeClient())
    assert state["data"]["iteration"] == 5 and state["data"]["config"]["budget_tokens"] == 99
    asyncio.run(r.snapshot_saved(snapshot(config=dict(config, budget_tokens=99), iteration=6)))
    [later] = drain(r, FakeClient())
    assert "config" not in later["data"]


def test_every_relayed_event_is_bounded():
    r = relay()
    asyncio.run(r.step_persisted(snapshot(state={"blob": BIG}), dict(step(1), state={"blob": BIG})))
    asyncio.run(r.action_finished({"id": "act1", "type": "create", "session_id": "S1", "agent_id": "A1",
                                   "payload": {"config": {"frames": [{"text": BIG}]}}}, True, None))
    asyncio.run(r.tool_call_updated({"id": "call1", "session_id": "S1", "name": "add", "status": "success",
                                     "args": {"blob": BIG}}))
    sent = drain(r, FakeClient())
    assert len(sent) == 4
    for event in sent:
        limit = STATE_MAX_BYTES if event["event"] == "agent_state" else EVENT_MAX_BYTES
        assert json_size(event["data"]) <= limit, event["event"]
        assert event["data"]["omitted"], event["event"]


def test_a_full_buffer_drops_the_oldest_and_the_next_batch_says_which_sessions():
    r = relay(max_events=10)
    for i in range(15):
        asyncio.run(r.step_persisted(snapshot(session_id=f"S{i}"), step(i, f"S{i}")))
    assert len(r.buffer) == 10 and r.dropped == 20
    sent = drain(r, FakeClient())
    gap = sent[0]
    assert gap["event"] == GAP and gap["data"]["reason"] == "buffer_full" and gap["data"]["dropped"] == 20
    assert gap["data"]["sessions"] == sorted(f"S{i}" for i in range(10))
    assert [e["id"] for e in sent[1:]] == [x for i in range(10, 15) for x in (f"step-S{i}-{i}", f"S{i}")]


def test_a_batch_not_acknowledged_is_told_with_the_next_one_not_sent_again():
    r = relay()
    asyncio.run(r.step_persisted(snapshot(), step(1)))
    assert drain(r, FakeClient(ack=False)) == []
    assert r.dropped == 2
    asyncio.run(r.step_persisted(snapshot(iteration=2), step(2)))
    sent = drain(r, FakeClient())
    assert sent[0]["event"] == GAP and sent[0]["data"] == {"reason": "not_acknowledged", "dropped": 2,
                                                            "sessions": ["S1"]}
    assert [e["event"] for e in sent[1:]] == ["agent_step", "agent_state"]


def test_a_refused_batch_counts_as_lost():
    r = relay()
    asyncio.run(r.step_persisted(snapshot(), step(1)))
    assert drain(r, FakeClient(ack="refuse")) == [] and r.dropped == 2 and r.sent == 0


def test_a_batch_stays_under_the_size_app_py_accepts():
    """app.py's Socket.IO server closes the connection on a message over
    1,000,000 bytes: the relay's batches stay under BATCH_BYTES, states counted
    at their built size."""
    r = relay()
    for i in range(40):  # steps of ~50 KB and states of ~8 KB
        asyncio.run(r.step_persisted(snapshot(session_id=f"S{i}", state={"blob": "s" * 7_000}),
                                     dict(step(i, f"S{i}"), text="t" * 50_000)))
    client = FakeClient()
    sent = drain(r, client)
    assert len(sent) == 80 and len(client.batches) > 1
    for batch in client.batches:
        assert sum(json_size(e["data"]) for e in batch) <= BATCH_BYTES + EVENT_MAX_BYTES
        assert len(json.dumps(batch)) < 1_000_000
    assert r.buffered_bytes == 0


def test_a_reconnected_relay_tells_every_browser_to_catch_up_first():
    r = relay()
    asyncio.run(r._connected())
    asyncio.run(r.step_persisted(snapshot(), step(1)))
    sent = drain(r, FakeClient())
    assert sent[0]["event"] == GAP and sent[0]["data"]["reason"] == "connected" and sent[0]["data"]["sessions"] is None


def test_drops_are_logged_at_most_every_few_seconds(caplog):
    r = relay(max_events=1)
    for i in range(5):
        asyncio.run(r.step_persisted(snapshot(), step(i)))
    r._log_drops(now=1000.0)
    r._log_drops(now=1001.0)
    for i in range(5, 8):
        asyncio.run(r.step_persisted(snapshot(), step(i)))
    r._log_drops(now=1002.0)
    r._log_drops(now=1006.0)
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "runtime.relay"]
    assert lines == ["relay lost 9 events (9 buffer full); browsers were told to catch up from the record",
                     "relay lost 6 events (6 buffer full); browsers were told to catch up from the record"]


# ---- app.py's side ------------------------------------------------------------

def test_a_gap_reaches_every_browser_whatever_its_rooms(tmp_path):
    store = Store(str(tmp_path / "db"))
    try:
        app = create_app(store, events_token="t")
        socketio = app.extensions["socketio"]
        ingest = socketio.test_client(app, namespace=INGEST_NAMESPACE, auth={"token": "t"})
        following, idle = socketio.test_client(app), socketio.test_client(app)
        following.emit("subscribe", {"rooms": ["session:S9"]}, callback=True)
        for c in (following, idle):
            c.get_received()
        gap = {"event": GAP, "id": "g1", "stream": GAP, "data": {"reason": "buffer_full", "dropped": 3,
                                                                 "sessions": ["S1"]}}
        ack = ingest.emit("events", [gap, make_event("agent_step", "x", {"session_id": "S1", "iteration": 0})],
                          namespace=INGEST_NAMESPACE, callback=True)
        assert ack == {"ok": True, "accepted": 2}
        for c in (following, idle):
            [got] = [e["args"][0] for e in c.get_received() if e["name"] == GAP]
            assert got["id"] == "g1" and got["data"]["dropped"] == 3 and "epoch" in got
    finally:
        store.close()


def test_the_needs_you_room_gets_every_tool_call_and_nothing_else(tmp_path):
    """What the dashboard's Needs-you count follows on every page (issue 40,
    item 8): any session's tool_call events, and not the steps or states that
    "all" carries; the SSE stream refuses it as it refuses "all"."""
    store = Store(str(tmp_path / "db"))
    try:
        app = create_app(store, events_token="t")
        socketio = app.extensions["socketio"]
        ingest = socketio.test_client(app, namespace=INGEST_NAMESPACE, auth={"token": "t"})
        counting = socketio.test_client(app)
        ack = counting.emit("subscribe", {"rooms": ["needs-you"]}, callback=True)
        assert ack["ok"] and ack["rooms"] == ["needs-you"]
        counting.get_received()
        events = [make_event("tool_call", "c1", {"id": "c1", "session_id": "S1", "agent_id": "A1",
                                                 "status": "waiting_result"}),
                  make_event("agent_step", "s1", {"session_id": "S1", "agent_id": "A1", "iteration": 0}),
                  make_event("agent_state", "S2", {"session_id": "S2", "agent_id": "A2", "status": "running"}),
                  make_event("tool_call", "c2", {"id": "c2", "session_id": "S2", "agent_id": "A2",
                                                 "status": "waiting_approval"})]
        assert ingest.emit("events", events, namespace=INGEST_NAMESPACE, callback=True)["accepted"] == 4
        got = [(e["name"], e["args"][0]["id"]) for e in counting.get_received()]
        assert got == [("tool_call", "c1"), ("tool_call", "c2")]
        r = app.test_client().get("/api/stream?rooms=needs-you")
        assert r.status_code == 400 and r.json["error"]["code"] == "invalid_room"
    finally:
        store.close()
