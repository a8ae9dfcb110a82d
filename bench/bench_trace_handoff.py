"""What the worker itself pays for traces: CPU per step of the tracing
observer's hooks and its shipping thread, with the export process running
(runtime/record/trace_export.py) and its receiver unreachable, so that only the
hand-off is measured, not building, encoding or sending spans (those are the
export process's, at the lowest CPU priority).

    python -m bench.bench_trace_handoff [--steps 50000] [--quick]

Prints one JSON object: ``worker_cpu_us_per_step`` (this process's CPU time,
every thread, over the steps handed over) beside ``no_op_step_ms``, the CPU of
a no-op step for scale (BENCHMARKS.md: ~0.25 ms).  bench_guard's tracing part
reports it beside the steps/s lost.
"""
from __future__ import annotations

import argparse
import asyncio
import time
from datetime import datetime, timezone

from bench.common import emit, machine, progress

NO_OP_STEP_MS = 0.25  # a no-op step's CPU in the worker at 1,000 agents (BENCHMARKS.md, bench_step_throughput)


def run(steps: int = 50_000) -> dict:
    from runtime.record import tracing
    from runtime.record.trace_export import ExportProcess

    drops = tracing.SpanDrops()
    # Port 9 (discard) answers nothing on 127.0.0.1: the child's exports fail fast and are counted.
    process = ExportProcess(drops, env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces",
                                        "OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
    observer = tracing.Tracing(drops=drops, builder=process)
    snapshot = {"session_id": "01JBENCHTRACEHANDOFF000000", "root_session_id": None, "status": "running",
                "iteration": 0, "config": {"moniker": "noop", "interval_s": 0}, "state": {}}
    step = {"session_id": snapshot["session_id"], "iteration": 0, "status": "ok", "latency_ms": 0.2,
            "created_at": datetime.now(timezone.utc), "usage": None, "tool_calls": [], "error": None,
            "output": {"done": False}}

    async def hand_over(n: int) -> None:
        for i in range(n):
            step["iteration"] = snapshot["iteration"] = i
            await observer.step_persisted(snapshot, step)
            await observer.snapshot_saved(snapshot)

    progress(f"handing {steps} steps to the export process")
    cpu0, t0 = time.process_time(), time.perf_counter()
    asyncio.run(hand_over(steps))
    time.sleep(0.2)  # the shipping thread's last batches
    cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - t0
    process._child.kill()  # nothing to send: its receiver does not exist
    asyncio.run(observer.close())
    per_step_us = cpu_s / steps * 1e6
    return {"benchmark": "trace_handoff", "machine": machine(), "steps": steps,
            "worker_cpu_us_per_step": round(per_step_us, 2), "wall_s": round(wall_s, 2),
            "no_op_step_ms": NO_OP_STEP_MS,
            "share_of_a_no_op_step_percent": round(per_step_us / (NO_OP_STEP_MS * 1000) * 100, 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--quick", action="store_true", help="2,000 steps, for the smoke test")
    args = parser.parse_args(argv)
    emit(run(2_000 if args.quick else args.steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
