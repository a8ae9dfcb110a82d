"""Step throughput: persisted steps per second with 10, 100 and 1,000 concurrent
agents on a no-op moniker, and how long each step waits for its commit.

    python -m bench.bench_step_throughput [--quick] [--agents 10,100,1000] [--seconds 15] [--relay]
                                          [--traces http://127.0.0.1:6006]

Runs AgentService in this process on a Store in a temporary directory (no HTTP:
this measures the runtime and the store, not Flask).  Sessions are created
through the action queue with ``interval_s: 0`` and the bench-local ``noop``
moniker, so what is left is the service's per-step overhead: frame validation,
the step row's group commit, and the snapshot's group-committed merge_insert.

Figures per agent count: steps/s over a window after warm-up; p50/p99 time a
step waits in ``Persistence.append_step`` and a snapshot in ``save_snapshot``
(the bench wraps the Persistence object); commits per second and rows per
commit from the writer's own counters; the process's CPU time per step (all
threads, Python and LanceDB's native code), which says whether the machine's
two cores, rather than waiting, are the limit.

``--relay`` also relays every step's live events (runtime/base/relay.py, on the
step's path through the observers) to a real app.py started for the run, as
agents.py does, and reports what the relay sent, coalesced and dropped.

``--traces URL`` also attaches the tracing observer (runtime/record/tracing.py,
as agents.py's ``tracing`` chore does when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is
set), exporting over OTLP/HTTP to the receiver at URL, and reports the spans
ended and dropped in the window.  bench_guard.py's ``tracing`` part starts
Arize Phoenix as that receiver and alternates runs with and without it.
"""
import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time

from bench.common import (CommitTimer, emit, enqueue_creates, machine, progress, run_in_process, summary,
                          wait_until)
from store import Store

TARGET_STEPS_PER_S = 5000  # with 1,000 agents


def start_app(root: str) -> tuple[subprocess.Popen, str, str]:
    """app.py on a data directory of its own, taking live events: (process, url, token)."""
    from tests.harness import ROOT, free_port, wait_for
    import requests

    port, token = free_port(), "bench-token"
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "app.py"), "--data-dir", f"{root}/app",
                             "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "AGENTSVC_EVENTS_TOKEN": token})
    url = f"http://127.0.0.1:{port}"

    def answers():
        try:
            return requests.get(url + "/api/health", timeout=5).status_code == 200
        except requests.RequestException:
            return False
    wait_for(answers, timeout=120, what="app.py to answer")
    return proc, url, token


# How long the close may take the export process to build and send what it was handed
# (a stopping worker gives it 15 s; at nice 19 beside a whole test run it can need more,
# and one killed at the deadline reports nothing of its last half second).
CLOSE_TRACES_S = 180.0


def tracing_observer(url: str):
    """The tracing observer agents.py attaches, with its export process sending to
    the OTLP/HTTP receiver at ``url``: (observer, spans ended so far)."""
    from runtime.record import tracing
    from runtime.record.trace_export import ExportProcess

    drops = tracing.SpanDrops()
    process = ExportProcess(drops, env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url.rstrip("/") + "/v1/traces"})
    return tracing.Tracing(drops=drops, builder=process), lambda: (process.ended, cpu_seconds(process.pid))


def cpu_seconds(pid: int | None) -> float:
    """CPU time (user + system) of another process so far, from /proc (0 when it is gone)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(n: int, seconds: float, warmup_s: float, relay: bool = False, traces: str | None = None) -> dict:
    """Steps/s and commit waits for n no-op agents, on a fresh store (``relay``:
    their live events relayed to a real app.py; ``traces``: spans exported to
    the OTLP/HTTP receiver at that URL)."""
    from runtime.base.relay import EventRelay

    with tempfile.TemporaryDirectory() as root:
        store = Store(f"{root}/db")
        app = start_app(root) if relay else None
        started = time.perf_counter()
        enqueue_creates(store, n, "noop", {"interval_s": 0})
        enqueue_s = time.perf_counter() - started

        async def scenario(service):
            relayed = traced = spans = None
            if app is not None:
                relayed = EventRelay(app[1], app[2])
                service.observers.add(relayed)
                relayed.start()
            if traces:
                traced, counted = tracing_observer(traces)
                service.observers.add(traced)
                spans = lambda: (*counted(), traced.drops.dropped)  # noqa: E731
            try:
                result = await measured(service, relayed, spans)
            finally:
                if relayed is not None:
                    await relayed.close()
                if traced is not None:  # the export process runs at nice 19: under load it
                    await traced.close(builder_timeout_s=CLOSE_TRACES_S)  # needs long to send all
            if traced is not None:  # what the export process built of all it was handed, once it sent it
                result["traces"]["spans_ended_by_close"] = spans()[0]
            return result

        async def measured(service, relayed, spans):
            timer = CommitTimer(service.persist)
            t0 = time.perf_counter()
            await wait_until(lambda: len(service.sessions.running()) >= n, timeout=600, what=f"{n} sessions")
            all_started_s = time.perf_counter() - t0
            await asyncio.sleep(warmup_s)
            timer.reset()
            stats = store.writer.stats
            c0, r0, s0 = stats.commits, stats.rows, stats.commit_seconds
            counted = lambda: {k: getattr(relayed, k, None) for k in ("sent", "coalesced", "dropped")}  # noqa: E731
            r1 = counted() if relayed is not None else None
            p1 = spans() if spans else None
            t1, cpu1 = time.perf_counter(), time.process_time()
            await asyncio.sleep(seconds)
            elapsed, cpu_s = time.perf_counter() - t1, time.process_time() - cpu1
            r2 = counted() if relayed is not None else None
            p2 = spans() if spans else None
            steps, commits = timer.steps_done, stats.commits - c0
            return {"agents": n, "steps_per_s": round(steps / elapsed, 1), "steps": steps,
                    "seconds": round(elapsed, 2), "enqueue_creates_s": round(enqueue_s, 2),
                    "sessions_started_s": round(all_started_s, 2),
                    "step_commit_wait": summary(timer.step_ms), "snapshot_commit_wait": summary(timer.snapshot_ms),
                    "commits_per_s": round(commits / elapsed, 1),
                    "rows_per_commit": round((stats.rows - r0) / max(commits, 1), 1),
                    "commit_busy_fraction": round((stats.commit_seconds - s0) / elapsed, 2),
                    "process_cpu_cores": round(cpu_s / elapsed, 2),
                    "cpu_ms_per_step": round(cpu_s * 1000 / max(steps, 1), 3),
                    **({"relay_events_in_window": {k: None if r2[k] is None else r2[k] - r1[k] for k in r2},
                        "relay_buffered_at_end": len(relayed.buffer)} if relayed is not None else {}),
                    **({"traces": {"receiver": traces, "spans_ended_in_window": p2[0] - p1[0],
                                   "export_process_cpu_ms_per_step": round((p2[1] - p1[1]) * 1000 / max(steps, 1), 3),
                                   "spans_dropped_in_window": p2[2] - p1[2]}} if spans else {})}
        try:
            return run_in_process(store, scenario)
        finally:
            store.close()
            if app is not None:
                app[0].terminate()
                app[0].wait(timeout=30)


def run(counts: list[int], seconds: float, warmup_s: float, relay: bool = False, traces: str | None = None) -> dict:
    result = {"benchmark": "step_throughput", "machine": machine(), "moniker": "noop (bench-local)",
              "relay": relay, "traces": traces, "runs": []}
    for n in counts:
        progress(f"{n} agents")
        result["runs"].append(measure(n, seconds, warmup_s, relay, traces))
    biggest = result["runs"][-1]
    result["target"] = {"steps_per_s": TARGET_STEPS_PER_S, "agents": biggest["agents"],
                        "met": biggest["steps_per_s"] >= TARGET_STEPS_PER_S}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--agents", default="10,100,1000", help="comma-separated agent counts")
    parser.add_argument("--seconds", type=float, default=15.0, help="measuring window per count")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--relay", action="store_true", help="relay the live events to a real app.py")
    parser.add_argument("--traces", metavar="URL", help="attach the tracing observer, exporting to this OTLP/HTTP receiver")
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.seconds, args.warmup = "5", 1.0, 0.5
    emit(run([int(x) for x in args.agents.split(",")], args.seconds, args.warmup, args.relay, args.traces))
    return 0


if __name__ == "__main__":
    sys.exit(main())
