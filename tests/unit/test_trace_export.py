"""The worker's export process (runtime/record/trace_export.py), for real: a
child process that builds the spans and sends them over OTLP/HTTP to a
receiver here, which decodes what arrives.  It sends what the worker handed
over, counts what the receiver refuses, is started again when it dies, and
still sends what it holds when the worker itself dies."""
import asyncio
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from runtime.record import trace_export, tracing

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


class Receiver:
    """An OTLP/HTTP trace receiver: the names and span ids of what arrived, or 500 to every batch."""

    def __init__(self, refuse: bool = False):
        self.spans: list[tuple[str, bytes]] = []
        received = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if refuse:
                    self.send_response(500)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        received.extend((span.name, span.span_id) for span in scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{self.server.server_port}/v1/traces",
                    "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_EXPORTER_OTLP_TIMEOUT": "5"}

    def names(self) -> list[str]:
        return [name for name, _ in self.spans]

    def stop(self):
        self.server.shutdown()


def wait_for(condition, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def steps(traces, session_id, n, first=0):
    snapshot = {"session_id": session_id, "status": "running", "created_at": T0, "config": {"big": "x" * 10_000}}

    async def run():
        for i in range(first, first + n):
            await traces.step_persisted(snapshot, {"session_id": session_id, "iteration": i, "status": "ok",
                                                   "latency_ms": 2, "created_at": T0, "output": "y" * 1000})
    asyncio.run(run())


@pytest.fixture
def receiver():
    found = Receiver()
    yield found
    found.stop()


def test_the_export_process_sends_every_span_it_was_handed(receiver):
    drops = tracing.SpanDrops()
    process = trace_export.ExportProcess(drops, env=receiver.env)
    traces = tracing.Tracing(drops=drops, builder=process)
    assert process.pid != os.getpid()
    steps(traces, "S", 20)
    finished = {"session_id": "S", "status": "done", "iteration": 20, "created_at": T0, "status_changed_at": T0,
                "name": "worker", "config": {"big": "x" * 10_000}}
    asyncio.run(traces.tool_call_updated({"id": "C1", "session_id": "S", "name": "add", "iteration": 3,
                                          "status": "success", "created_at": T0, "finished_at": T0}))
    asyncio.run(traces.snapshot_saved(finished))
    asyncio.run(traces.close())
    assert sorted(receiver.names()) == sorted([f"step {i}" for i in range(20)] + ["execute_tool add", "session worker"])
    ids = {name: span_id for name, span_id in receiver.spans}
    assert int.from_bytes(ids["step 7"], "big") == tracing.step_span_id("S", 7)  # derived ids cross the pipe
    assert int.from_bytes(ids["execute_tool add"], "big") == tracing.tool_span_id("C1")
    assert process.ended == 22 and drops.dropped == 0


def test_what_the_receiver_refuses_is_counted_in_the_worker():
    refusing = Receiver(refuse=True)
    try:
        drops = tracing.SpanDrops()
        process = trace_export.ExportProcess(drops, env=refusing.env)
        traces = tracing.Tracing(drops=drops, builder=process)
        steps(traces, "S", 10)
        asyncio.run(traces.close())
        assert drops.dropped == 10 and process.ended == 10
    finally:
        refusing.stop()


def test_a_full_buffer_drops_and_counts_the_new_span(receiver, monkeypatch):
    monkeypatch.setattr(trace_export, "SHIP_EVERY_S", 3600.0)  # nothing is shipped before close()
    drops = tracing.SpanDrops()
    process = trace_export.ExportProcess(drops, env=receiver.env, max_pending=3)
    traces = tracing.Tracing(drops=drops, builder=process)
    steps(traces, "S", 5)
    assert drops.dropped == 2
    asyncio.run(traces.close())
    assert sorted(receiver.names()) == ["step 0", "step 1", "step 2"]


def test_a_dead_export_process_is_started_again(receiver, monkeypatch):
    monkeypatch.setattr(trace_export, "RESTART_EVERY_S", 0.0)
    drops = tracing.SpanDrops()
    process = trace_export.ExportProcess(drops, env=receiver.env)
    traces = tracing.Tracing(drops=drops, builder=process)
    steps(traces, "S", 3)
    wait_for(lambda: len(receiver.spans) == 3 and process.ended == 3, what="the first spans, reported")
    first = process.pid
    process._child.kill()
    process._child.wait()
    steps(traces, "S", 3, first=3)
    asyncio.run(traces.close())
    assert process.pid != first
    assert sorted(receiver.names()) == sorted(f"step {i}" for i in range(6))
    assert process.ended == 6 and drops.dropped == 0


def test_the_spans_a_dying_worker_handed_over_are_still_sent(receiver):
    """The worker is SIGKILLed right after its shipping thread wrote the spans: the
    child reads the pipe to its end, sends them, and exits."""
    script = (
        "import asyncio, os, signal, time\n"
        "from runtime.record import tracing, trace_export\n"
        "drops = tracing.SpanDrops()\n"
        "process = trace_export.ExportProcess(drops)\n"
        "traces = tracing.Tracing(drops=drops, builder=process)\n"
        "snap = {'session_id': 'D', 'status': 'running'}\n"
        "async def run():\n"
        "    for i in range(30):\n"
        "        await traces.step_persisted(snap, {'session_id': 'D', 'iteration': i, 'status': 'ok'})\n"
        "asyncio.run(run())\n"
        "while process._pending:\n"
        "    time.sleep(0.01)\n"
        "time.sleep(0.2)\n"
        "print(process.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    worker = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, **receiver.env},
                            capture_output=True, text=True, timeout=120)
    assert worker.returncode == -9, worker.stderr
    child = int(worker.stdout.split()[0])
    wait_for(lambda: len(receiver.spans) == 30, what="the dead worker's spans")
    wait_for(lambda: not Path(f"/proc/{child}").exists() or "zombie" in Path(f"/proc/{child}/status").read_text(),
             what="the export process to exit")
    assert sorted(receiver.names()) == sorted(f"step {i}" for i in range(30))
