"""GET /api/stream: Server-Sent Events read from LanceDB by cursor.

What these prove: each event's id is a cursor, and a client reconnecting with
it (Last-Event-ID or ?after=) gets exactly the events after it, none twice;
a client following a busy session while app.py and agents.py are both
restarted receives every step exactly once, in order (the CLI's tail -f,
which resumes by itself); bad rooms and cursors are 400s; the number of open
streams is capped (503) and an idle stream is closed.
"""
import json
import subprocess
import sys
import time

import pytest
import requests

from cli.sse import parse
from store import Store
from tests.harness import ROOT, Service, wait_for


CAP = 4


def open_stream(svc, rooms: str, after: str | None = None, **headers):
    """A stream response, waiting out a 503 while streams closed by earlier
    reads still hold their slots (freed at the next keepalive)."""
    params = {"rooms": rooms, **({"after": after} if after else {})}

    def attempt():
        r = requests.get(svc.url + "/api/stream", params=params, headers=headers, stream=True, timeout=(5, 30))
        if r.status_code == 503:
            r.close()
            return None
        return r
    return wait_for(attempt, timeout=90, interval=0.2, what="a free stream slot")


@pytest.fixture(scope="module")
def shared_service(tmp_path_factory):
    """One service for the protocol tests, with a small stream cap and idle time."""
    root = tmp_path_factory.mktemp("stream")
    (root / "logs").mkdir()
    svc = Service(str(root / "data"), str(root / "logs"),
                  env={"AGENTSVC_MAX_STREAMS": str(CAP), "AGENTSVC_STREAM_IDLE_S": "3",
                       "AGENTSVC_STREAM_KEEPALIVE_S": "0.5"}).start()
    yield svc
    svc.stop()


def read_until_ready(svc, rooms: str, after: str | None = None, **headers) -> list:
    """Every event the stream sends before ``ready`` (what was recorded)."""
    with open_stream(svc, rooms, after, **headers) as r:
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = []
        for event in parse(line.decode() for line in r.iter_lines()):
            if event.event == "ready":
                return events
            events.append(event)
    raise AssertionError("the stream ended before ready")


def test_a_cursor_resumes_exactly_after_it(shared_service):
    svc = shared_service
    made = svc.create("countdown", config={"n": 6, "interval_s": 0.02})
    sid = made["session_id"]
    svc.wait_status(sid, "done")
    events = read_until_ready(svc, f"session:{sid}")
    steps = [e for e in events if e.event == "agent_step"]
    assert [e.data["data"]["iteration"] for e in steps] == list(range(6))
    assert [e.data["data"]["type"] for e in events if e.event == "action"] == ["create"]
    assert [e.data["data"]["status"] for e in events if e.event == "agent_state"] == ["done"]
    assert len({e.id for e in events}) == len(events), "every event has its own cursor"

    cursor = steps[2].id
    for again in (read_until_ready(svc, f"session:{sid}", **{"Last-Event-ID": cursor}),
                  read_until_ready(svc, f"session:{sid}", after=cursor)):
        assert [e.data["data"]["iteration"] for e in again if e.event == "agent_step"] == [3, 4, 5]
        assert not [e for e in again if e.event == "action"], "the create was before the cursor"
    assert read_until_ready(svc, f"session:{sid}", **{"Last-Event-ID": events[-1].id}) == []

    # The agent room covers the same session, and the same cursor means the same position.
    by_agent = read_until_ready(svc, f"agent:{made['agent_id']}", **{"Last-Event-ID": cursor})
    assert [e.data["data"]["iteration"] for e in by_agent if e.event == "agent_step"] == [3, 4, 5]


def test_conversation_messages_resume_by_message(shared_service):
    svc = shared_service
    conv = svc.post("/api/conversations", json={"title": "sse"}).json()["conversation_id"]
    for text in ("one", "two", "three"):
        assert svc.post(f"/api/conversations/{conv}/messages", json={"text": text}).status_code == 201
    events = read_until_ready(svc, f"conversation:{conv}")
    assert [e.data["data"]["text"] for e in events] == ["one", "two", "three"]
    rest = read_until_ready(svc, f"conversation:{conv}", **{"Last-Event-ID": events[0].id})
    assert [e.data["data"]["text"] for e in rest] == ["two", "three"]


def test_bad_requests_are_400(shared_service):
    svc = shared_service
    for params in ({}, {"rooms": "all"}, {"rooms": "nosuch:1"}, {"rooms": "session:bad id"},
                   {"rooms": "session:x", "after": "step:x=notanumber"}, {"rooms": "session:x", "after": "zzz"},
                   {"rooms": "session:x", "tail": "-3"}, {"rooms": ",".join(f"session:s{i}" for i in range(21))}):
        r = svc.get("/api/stream", **params)
        assert r.status_code == 400, (params, r.text)
        assert r.json()["error"]["code"] in ("invalid_request", "invalid_room", "invalid_cursor")


def test_open_streams_are_capped_and_idle_ones_closed(shared_service):
    """AGENTSVC_MAX_STREAMS=4: a fifth is refused with 503 until one closes;
    AGENTSVC_STREAM_IDLE_S=3: a stream with nothing to send ends with 'idle'."""
    svc = shared_service
    opened = [open_stream(svc, f"session:idle{i}") for i in range(CAP)]
    try:
        assert all(r.status_code == 200 for r in opened)
        refused = svc.get("/api/stream", rooms="session:one-too-many")
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "too_many_streams"
        events = list(parse(line.decode() for line in opened[0].iter_lines()))
        assert [e.event for e in events] == ["ready", "idle"]
    finally:
        for r in opened:
            r.close()
    open_stream(svc, "session:x").close()  # the slots come back


def test_tail_follows_across_restarts_of_both_processes(service):
    """A client reads a busy session's stream (agentsvc tail -f) while app.py is
    restarted and agents.py is killed (-9) and restarted: it receives every
    step exactly once, in order, and the steps it missed while app.py was down
    come from LanceDB."""
    svc = service
    made = svc.create("joke", "cats", config={"interval_s": 0.03})
    sid = made["session_id"]
    svc.wait_steps(sid, 3)
    out = open(f"{svc.log_dir}/tail.jsonl", "w")
    tail = subprocess.Popen([sys.executable, "-m", "cli", "tail", "-f", "--all", "--until-finished", "--json",
                             f"session:{sid}"], cwd=ROOT, stdout=out, stderr=subprocess.PIPE, text=True,
                            env={**svc.env, "AGENTSVC_URL": svc.url})

    def received() -> list[int]:
        with open(f"{svc.log_dir}/tail.jsonl") as f:
            return [json.loads(x)["data"]["iteration"] for x in f.read().splitlines()
                    if x.endswith("}") and json.loads(x)["event"] == "agent_step"]

    store = Store(svc.data_dir + "/lancedb")
    try:
        seen = len(received())
        wait_for(lambda: len(received()) > seen + 2, timeout=60, what="the tail to receive steps")
        svc.stop_app()
        svc.kill_agents()
        svc.start_agents()  # steps while app.py is down: only LanceDB has them
        before = store.steps.count(sid)
        wait_for(lambda: store.steps.count(sid) >= before + 5, timeout=60, what="steps while app.py is down")
        svc.start_app()
        seen = len(received())
        wait_for(lambda: len(received()) > seen + 5, timeout=60, what="the tail to catch up and go on")
        svc.control(made["agent_id"], "destroy")
        assert tail.wait(timeout=60) == 0, tail.stderr.read()
    finally:
        store.close()
        if tail.poll() is None:
            tail.kill()
    stored = [s["iteration"] for s in svc.steps(sid)]
    assert stored == list(range(len(stored)))
    assert received() == stored, "the client missed or repeated steps"


def test_cursor_round_trip_and_rejects():
    from api.stream import format_cursor, parse_cursor
    cursor = {("step", "S1"): 12, ("action", "S1"): "01J0ACTION", ("state", "S1"): 1795405578693730,
              ("msg", "conv.1:x"): "01J0MESSAGE"}
    assert parse_cursor(format_cursor(cursor)) == cursor
    assert parse_cursor("") == {} and parse_cursor(None) == {}
    for bad in ("step:S1=x", "nosuch:S1=1", "step:S1", "step:bad id=1", "msg:C1=bad'id", "step:S1=-5",
                ";".join(f"step:s{i}=1" for i in range(501))):
        with pytest.raises(ValueError):
            parse_cursor(bad)
