"""step_delta over GET /api/stream: a step's model output while it is generated.

What these prove: a step_delta published through app.py's /ingest namespace
reaches an SSE client following the session, with no SSE id (so it never
moves the client's cursor); a burst is coalesced to about ten a second per
session, the newest kept and an attempt's final delta never replaced; a delta
whose step was already sent is dropped; a client reconnecting with
Last-Event-ID never gets an earlier delta again; and a client that reads
nothing never makes the hub wait, its buffer bounded.  ``agentsvc tail -f``
shows them: with --json every delta as a line without a cursor, in a log one
line per attempt that ended, on a terminal one line per session rewritten in
place until its step arrives.
"""
import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest
from rich.console import Console

from api.stream import OpenStream, StreamHub
from cli import render
from tests.harness import ROOT, Service, wait_for
from tests.step_stream import Ingest, Reader, delta


@pytest.fixture(scope="module")
def shared_service(tmp_path_factory):
    """One service for this module; its streams send a keepalive every 0.5 s,
    so a reader the test closes notices at once."""
    root = tmp_path_factory.mktemp("step_delta")
    (root / "logs").mkdir()
    svc = Service(str(root / "data"), str(root / "logs"), env={"AGENTSVC_STREAM_KEEPALIVE_S": "0.5"}).start()
    yield svc
    svc.stop()


@pytest.fixture
def running(shared_service):
    """A session that took its first step and then waits an hour: running, with
    step 0 recorded and iteration 1 the one being "generated"."""
    made = shared_service.create("countdown", config={"n": 1000, "interval_s": 3600})
    shared_service.wait_steps(made["session_id"], 1)
    yield made
    shared_service.control(made["agent_id"], "destroy")


def test_deltas_reach_the_stream_without_an_id_coalesced(shared_service, running):
    svc, aid, sid = shared_service, running["agent_id"], running["session_id"]
    reader = Reader(svc, f"session:{sid}")
    ingest = Ingest(svc)
    try:
        wait_for(lambda: reader.of("ready"), timeout=90, what="the stream to be ready")
        text = ""
        started = time.monotonic()
        for i in range(100):  # ten times what agents.py sends, within one second
            text += f"word{i} "
            ingest.send(delta(aid, sid, 1, text))
            time.sleep(max(0.0, started + (i + 1) * 0.01 - time.monotonic()))
        burst_s = time.monotonic() - started
        ingest.send(delta(aid, sid, 1, text + "}", final=True))
        got = wait_for(lambda: [e for e in reader.of("step_delta") if e.data["data"]["final"]] and
                       reader.of("step_delta"), timeout=30, what="the final delta")
    finally:
        ingest.close()
        reader.close()
    assert all(e.id is None for e in got), "a step_delta never carries a cursor"
    assert 2 <= len(got) <= 12 * burst_s + 3, f"{len(got)} deltas in {burst_s:.2f} s: not coalesced"
    first = got[0].data
    assert first["id"] == sid and first["stream"] == f"step_delta:{sid}"
    assert {"iteration": 1, "attempt": 1, "function": "RunMonikerStep", "mode": "json_schema"}.items() \
        <= first["data"].items()
    texts = [e.data["data"]["text"] for e in got]
    assert texts == sorted(texts, key=len), "the newest text is kept, in order"
    assert texts[-1] == text + "}" and got[-1].data["data"]["final"] is True


def test_a_reconnect_never_replays_a_delta(shared_service, running):
    svc, aid, sid = shared_service, running["agent_id"], running["session_id"]
    first = Reader(svc, f"session:{sid}")
    ingest = Ingest(svc)
    try:
        wait_for(lambda: first.of("ready"), timeout=90, what="the stream to be ready")
        ingest.send(delta(aid, sid, 1, "before the reconnect"))
        wait_for(lambda: first.of("step_delta"), timeout=90, what="the delta")
        cursor = first.cursor()
        assert cursor, "the recorded events came with a cursor"
        first.close()

        again = Reader(svc, f"session:{sid}", last_event_id=cursor)
        try:
            wait_for(lambda: again.of("ready"), timeout=90, what="the reconnected stream to be ready")
            ingest.send(delta(aid, sid, 1, "after the reconnect"))
            wait_for(lambda: again.of("step_delta"), timeout=90, what="a delta after the reconnect")
            time.sleep(0.5)  # anything else that might come
            assert [e.data["data"]["text"] for e in again.of("step_delta")] == ["after the reconnect"]
            assert not [e for e in again.events if e.event == "agent_step"], "the cursor was past every step"
        finally:
            again.close()
    finally:
        ingest.close()


def test_a_delta_of_a_step_already_sent_is_dropped(shared_service, running):
    """Step 0 is recorded and was sent: a late delta of iteration 0 is over."""
    svc, aid, sid = shared_service, running["agent_id"], running["session_id"]
    reader = Reader(svc, f"session:{sid}")
    ingest = Ingest(svc)
    try:
        wait_for(lambda: [e for e in reader.of("agent_step") if e.data["data"]["iteration"] == 0],
                 timeout=30, what="step 0 on the stream")
        ingest.send(delta(aid, sid, 0, "late"))
        time.sleep(0.3)  # past the gap, so the next is not coalesced with it
        ingest.send(delta(aid, sid, 1, "current"))
        wait_for(lambda: reader.of("step_delta"), timeout=90, what="the current delta")
        time.sleep(0.3)
        assert [e.data["data"]["text"] for e in reader.of("step_delta")] == ["current"]
    finally:
        ingest.close()
        reader.close()


def test_other_sessions_deltas_stay_out(shared_service, running):
    svc, aid, sid = shared_service, running["agent_id"], running["session_id"]
    reader = Reader(svc, f"agent:{aid}")  # the agent room covers its sessions too
    ingest = Ingest(svc)
    try:
        wait_for(lambda: reader.of("ready"), timeout=90, what="the stream to be ready")
        ingest.send(delta("OTHERAGENT", "OTHERSESSION", 1, "not yours"), delta(aid, sid, 1, "yours"))
        wait_for(lambda: reader.of("step_delta"), timeout=90, what="the delta")
        time.sleep(0.3)
        assert [e.data["data"]["text"] for e in reader.of("step_delta")] == ["yours"]
    finally:
        ingest.close()
        reader.close()


# ---- the hub's side, without a server ----------------------------------------------

def payload(session: str, text: str, *, final: bool = False, attempt: int = 1) -> dict:
    event = delta("A", session, 1, text, final=final, attempt=attempt)
    return {"id": event["id"], "stream": event["stream"], "seq": 1, "epoch": "E", "data": event["data"]}


def test_a_final_delta_is_never_replaced_and_sessions_are_paced_apart():
    stream = OpenStream(frozenset({"agent:A"}), gap_s=0.2, max_pending=8)
    stream.live("step_delta", payload("S1", "a"))
    stream.live("step_delta", payload("S1", "ab", final=True))  # replaces "a"
    stream.live("step_delta", payload("S1", "x", attempt=2))  # the next attempt: the final stays
    stream.live("step_delta", payload("S1", "xy", attempt=2))  # replaces "x"
    stream.live("step_delta", payload("S2", "other"))
    assert [p["data"]["text"] for _, p in stream.take_live()] == ["ab", "other"]  # one per session
    assert stream.take_live() == [], "S1's next waits out the gap"
    assert stream.take_recorded(), "the first read of the record is owed"
    started = time.monotonic()
    stream.wait(5.0)  # wakes when it is due, not after the timeout
    assert 0.1 < time.monotonic() - started < 2.0
    assert [p["data"]["text"] for _, p in stream.take_live()] == ["xy"]


def test_a_client_that_reads_nothing_never_makes_the_hub_wait():
    hub = StreamHub(max_streams=2, poll_s=1, idle_s=60, keepalive_s=15, live_max_pending=16)
    _, stream = hub.open(frozenset({"agent:A"}))
    started = time.monotonic()
    for i in range(20_000):  # finals of many sessions: nothing coalesces them
        hub.published("step_delta", ["all", "agent:A", f"session:S{i}"], payload(f"S{i}", "t", final=True))
    assert time.monotonic() - started < 10
    due = stream.take_live()
    assert len(due) == 16 and stream.dropped == 20_000 - 16
    assert [p["data"]["session_id"] for _, p in due] == [f"S{i}" for i in range(20_000 - 16, 20_000)], \
        "the newest are kept"
    assert stream.take_recorded() and not stream.take_recorded(), "only the first read of the record is owed"
    hub.published("agent_step", ["agent:A"], payload("S1", "t"))
    assert stream.take_recorded() and not stream.take_live(), "a recorded event wakes a read, nothing more"


# ---- agentsvc tail -f ----------------------------------------------------------------

def sse_payload(data: dict, name: str = "step_delta") -> dict:
    """An event's payload as cli.sse hands it over: {id, stream, data}."""
    return {"id": data.get("session_id"), "stream": f"{name}:{data.get('session_id')}", "data": data}


def tail_view_output(terminal: bool, events: list[tuple[str, dict]]) -> tuple[str, dict]:
    """What TailView prints for ``events`` on a terminal or not, and what it still shows as generating."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=terminal, width=100, highlight=False, soft_wrap=False,
                      _environ={"TERM": "xterm"})
    with render.TailView(console) as view:
        for name, data in events:
            view.show(name, data)
        still = dict(view.generating)
    return buffer.getvalue(), still


def generation(final_text: str = "the end of it") -> list[tuple[str, dict]]:
    deltas = [delta("A", "SESSION01", 3, "x" * n) for n in (10, 200, 400)]
    deltas.append(delta("A", "SESSION01", 3, final_text, final=True, tokens=412))
    step = {"id": "STEP", "session_id": "SESSION01", "iteration": 3, "status": "ok", "text": "stepped"}
    return [("step_delta", sse_payload(e["data"])) for e in deltas] + [("agent_step", sse_payload(step, "agent_step"))]


def test_tail_in_a_log_prints_one_line_per_finished_attempt():
    out, still = tail_view_output(False, generation())
    lines = out.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("model   SION01 #3 attempt 1 ended: 412 tokens, json_schema: the end of it")
    assert lines[1].startswith("step    SION01 #3 ok: stepped")
    assert still == {}


def test_tail_on_a_terminal_rewrites_one_line_per_session_until_its_step():
    events = generation("…and the answer is 42")
    out, still = tail_view_output(True, events[:3])
    assert still and list(still) == ["SESSION01"], "one line for the session"
    assert out.count("generating: ") >= 3 and "\x1b[2K" in out, "rewritten in place"
    assert "100 tokens, json_schema: …" + "x" * 40 in out, "the end of the text so far, cut to the width"
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out).replace("\r", "\n")  # without the terminal's controls
    assert all(len(line) < 100 for line in shown.splitlines()), "one terminal line each"
    out, still = tail_view_output(True, events)
    assert still == {}, "the step ends the line"
    assert "step    SION01 #3 ok: stepped" in out


def test_tail_follows_deltas_as_json_and_in_a_log(shared_service, running):
    """tail -f: --json prints every delta as a line without a cursor; a table
    into a pipe prints only the attempts that ended."""
    svc, aid, sid = shared_service, running["agent_id"], running["session_id"]
    cli = [sys.executable, "-m", "cli", "tail", "-f", f"session:{sid}"]
    env = {**svc.env, "AGENTSVC_URL": svc.url}
    outputs = {mode: open(os.path.join(svc.log_dir, f"tail-{mode}.out"), "w+") for mode in ("json", "table")}
    procs = {mode: subprocess.Popen(cli + (["--json"] if mode == "json" else []), cwd=ROOT, env=env,
                                    stdout=outputs[mode], stderr=subprocess.STDOUT)
             for mode in outputs}

    def printed(mode: str) -> str:
        with open(outputs[mode].name) as f:
            return f.read()

    ingest = Ingest(svc)
    try:
        for mode in procs:  # each printed the recorded step first: it is following
            wait_for(lambda: "999 to go" in printed(mode), timeout=60, what=f"tail ({mode}) to start")
        for n in range(1, 4):
            ingest.send(delta(aid, sid, 1, "thinking " * n))
            time.sleep(0.15)  # past the stream's gap: each is sent
        ingest.send(delta(aid, sid, 1, '{"text": "done thinking"}', final=True))
        lines = wait_for(lambda: [json.loads(x) for x in printed("json").splitlines()
                                  if '"step_delta"' in x and '"final": true' in x] and
                         [json.loads(x) for x in printed("json").splitlines() if '"step_delta"' in x],
                         timeout=30, what="the deltas in --json")
        wait_for(lambda: "attempt 1 ended" in printed("table"), timeout=90, what="the final delta in the table")
    finally:
        ingest.close()
        for proc in procs.values():
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0
    texts = [line["data"]["text"] for line in lines]  # a slow stream may have coalesced two
    assert texts[-1] == '{"text": "done thinking"}' and texts[:-1] == sorted(set(texts[:-1]), key=len)
    assert set(texts[:-1]) <= {"thinking " * n for n in range(1, 4)}
    assert all("cursor" not in line and line["event"] == "step_delta" and line["id"] == sid for line in lines)
    table = [line for line in printed("table").splitlines() if line.startswith("model")]
    assert table == [f"model   {sid[-6:]} #1 attempt 1 ended: {len(lines[-1]['data']['text']) // 4} tokens, "
                     f'json_schema: {{"text": "done thinking"}}']


def test_tail_on_a_terminal_shows_the_live_line(shared_service, running):
    svc, aid, sid = shared_service, running["agent_id"], running["session_id"]
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "cli", "tail", "-f", f"session:{sid}"], cwd=ROOT,
                            env={**svc.env, "AGENTSVC_URL": svc.url, "TERM": "xterm", "COLUMNS": "120"},
                            stdin=secondary, stdout=secondary, stderr=secondary)
    os.close(secondary)
    screen = bytearray()

    def read() -> str:
        while select.select([primary], [], [], 0)[0]:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the process ended
                break
            if not chunk:
                break
            screen.extend(chunk)
        return screen.decode(errors="replace")

    ingest = Ingest(svc)
    try:
        wait_for(lambda: "999 to go" in read(), timeout=60, what="tail to print the recorded step")
        ingest.send(delta(aid, sid, 1, "a plan in the making"))
        wait_for(lambda: f"model   {sid[-6:]} #1 generating: 5 tokens, json_schema: a plan in the making" in read(),
                 timeout=30, what="the live line")
    finally:
        ingest.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        os.close(primary)
