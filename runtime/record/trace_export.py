"""The worker's export process: spans built and sent outside the worker.

A span per step at thousands of steps a second is thousands of SDK span
objects and their protobuf encoding a second; built on a thread of the worker
they share its interpreter lock with the event loop, and a busy worker lost
half its steps to them (BENCHMARKS.md).  So the worker's tracing observer
(runtime/record/tracing.py) only keeps the few fields each span reads and
appends them to a bounded buffer; :class:`ExportProcess`'s shipping thread
pickles that buffer every ``SHIP_EVERY_S`` into a pipe, and a child process
(``python -m runtime.record.trace_export``, :func:`main`) builds the spans with
:class:`~runtime.record.spans.SpanEmitter` and exports them with the SDK's
batching OTLP/HTTP exporter, configured by the same ``OTEL_*`` variables.

Never slow a step, never break one:
- the child runs at the lowest CPU priority (``NICE``): when the cores are
  busy it is the one that waits, and a step never does;
- when it falls behind, the pipe fills, the shipping thread waits on it, and
  what finds the buffer full is dropped and counted; so is what the SDK's
  queue or the receiver refuses inside the child, which reports its totals
  on its stdout (:class:`~runtime.record.spans.SpanDrops`, ``/metrics``);
- a child that dies is started again (at most every ``RESTART_EVERY_S``), and
  a worker that dies closes the pipe: the child sends what it holds and exits.
"""
from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from runtime.record.spans import MAX_QUEUE, SpanDrops

log = logging.getLogger("runtime.tracing")

SHIP_EVERY_S = 0.05  # how long fields wait in the worker before they go down the pipe
REPORT_EVERY_S = 0.5  # how often the child reports what it ended and dropped
RESTART_EVERY_S = 5.0
NICE = 19  # the lowest priority: it gets the CPU the worker leaves (see the module docstring)
KINDS = ("step", "tool_call", "session")  # SpanEmitter.emit_<kind>: nothing else is called
_HEADER = 4  # bytes of a frame's length


class ExportProcess:
    """The worker's side: a bounded buffer, the thread that ships it, and the child."""

    def __init__(self, drops: SpanDrops, env: dict | None = None, max_pending: int = MAX_QUEUE):
        self._drops = drops
        self._env = {**os.environ, **(env or {})}
        self._max = max_pending
        self._pending: list = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._totals = {"ended": 0, "dropped": 0}  # of the children before this one
        self._child_totals = {"ended": 0, "dropped": 0}
        self._started_at = 0.0
        self._child: subprocess.Popen | None = None
        self._start_child()
        self._shipper = threading.Thread(target=self._ship, name="trace shipper", daemon=True)
        self._shipper.start()

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    @property
    def ended(self) -> int:
        """Spans the export processes reported built and ended (sent or dropped; a killed
        child's last half second of work is not reported)."""
        return self._totals["ended"] + self._child_totals["ended"]

    # ---- on the event loop ------------------------------------------------

    def submit(self, kind: str, *args) -> None:
        with self._lock:
            if len(self._pending) < self._max:
                self._pending.append((kind, args))
                return
        self._drops.add(1)

    # ---- the shipping thread ------------------------------------------------

    def _ship(self) -> None:
        while not self._closing.wait(SHIP_EVERY_S):
            self._ship_pending()
        self._ship_pending()

    def _ship_pending(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        if not batch:
            return
        if self._child.poll() is not None and not self._restart():
            self._drops.add(len(batch))
            return
        frame = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._child.stdin.write(len(frame).to_bytes(_HEADER, "big") + frame)
            self._child.stdin.flush()
        except (OSError, ValueError):  # the child died under us (its pipe is closed)
            self._drops.add(len(batch))

    def _restart(self) -> bool:
        if time.monotonic() - self._started_at < RESTART_EVERY_S:
            return False
        log.warning("trace export process %s exited with %s; starting another", self._child.pid,
                    self._child.returncode)
        self._reader.join(1.0)
        for key in self._totals:
            self._totals[key] += self._child_totals[key]
        self._child_totals = {"ended": 0, "dropped": 0}
        self._start_child()
        return True

    # ---- the child ----------------------------------------------------------

    def _start_child(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # where `runtime` is importable from
        env = dict(self._env, PYTHONPATH=os.pathsep.join(p for p in (root, self._env.get("PYTHONPATH")) if p))
        self._started_at = time.monotonic()
        self._child = subprocess.Popen([sys.executable, "-m", "runtime.record.trace_export"], env=env,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=root)
        self._reader = threading.Thread(target=self._read_reports, args=(self._child,),
                                        name="trace export reports", daemon=True)
        self._reader.start()

    def _read_reports(self, child: subprocess.Popen) -> None:
        """The child's lines ``ended N dropped M``: its totals so far."""
        for line in child.stdout:
            parts = line.split()
            if len(parts) == 4 and parts[0] == b"ended" and parts[2] == b"dropped":
                self._child_totals = {"ended": int(parts[1]), "dropped": int(parts[3])}
                self._drops.report(self._totals["dropped"] + self._child_totals["dropped"])

    def close(self, timeout_s: float = 15.0) -> None:
        """Ship what is buffered, close the pipe, and wait for the child to send it
        and exit (blocking: call it in a thread)."""
        self._closing.set()
        self._shipper.join(timeout_s)
        try:
            self._child.stdin.close()
        except OSError:
            pass
        try:
            self._child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("trace export process %s still sending after %.0f s; killed", self._child.pid, timeout_s)
            self._child.kill()
            self._child.wait()
        self._reader.join(timeout_s)


def main() -> int:
    """The child: read frames from stdin until it closes, build and export their
    spans, report totals on stdout; then send what is left and exit."""
    try:
        os.nice(NICE)
    except OSError:
        pass
    # A Ctrl-C or a SIGTERM to the whole group stops the worker, whose exit closes the
    # pipe: the child then sends what it holds and exits, rather than dying with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="trace export %(process)d: %(levelname)s %(message)s")
    from opentelemetry.sdk.trace import SpanProcessor

    from runtime.record.spans import SpanEmitter, provider

    class Ended(SpanProcessor):
        count = 0

        def on_end(self, span) -> None:
            self.count += 1

    found, ids, drops = provider()
    ended = Ended()
    found.add_span_processor(ended)
    emitter = SpanEmitter(found, ids)
    stop = threading.Event()

    def report() -> None:
        sys.stdout.buffer.write(f"ended {ended.count} dropped {drops.dropped}\n".encode())
        sys.stdout.buffer.flush()

    def reporting() -> None:
        while not stop.wait(REPORT_EVERY_S):
            report()
    threading.Thread(target=reporting, name="reports", daemon=True).start()

    pipe = sys.stdin.buffer
    while True:
        head = pipe.read(_HEADER)
        frame = pipe.read(int.from_bytes(head, "big")) if len(head) == _HEADER else b""
        if not frame:
            break
        for kind, args in pickle.loads(frame):
            try:
                if kind in KINDS:
                    getattr(emitter, f"emit_{kind}")(*args)
            except Exception:  # noqa: BLE001 - one bad row loses its spans, not the others
                logging.getLogger("runtime.tracing").exception("trace spans of a %s not built", kind)
    found.shutdown()
    stop.set()
    report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
