"""Step throughput: persisted steps per second with 10, 100 and 1,000 concurrent
agents on a no-op moniker, and how long each step waits for its commit.

    python -m bench.bench_step_throughput [--quick] [--agents 10,100,1000] [--seconds 15]

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
"""
import argparse
import asyncio
import sys
import tempfile
import time

from bench.common import (CommitTimer, emit, enqueue_creates, machine, progress, run_in_process, summary,
                          wait_until)
from store import Store

TARGET_STEPS_PER_S = 5000  # with 1,000 agents


def measure(n: int, seconds: float, warmup_s: float) -> dict:
    """Steps/s and commit waits for n no-op agents, on a fresh store."""
    with tempfile.TemporaryDirectory() as root:
        store = Store(f"{root}/db")
        started = time.perf_counter()
        enqueue_creates(store, n, "noop", {"interval_s": 0})
        enqueue_s = time.perf_counter() - started

        async def scenario(service):
            timer = CommitTimer(service.persist)
            t0 = time.perf_counter()
            await wait_until(lambda: len(service.sessions.running()) >= n, timeout=600, what=f"{n} sessions")
            all_started_s = time.perf_counter() - t0
            await asyncio.sleep(warmup_s)
            timer.reset()
            stats = store.writer.stats
            c0, r0, s0 = stats.commits, stats.rows, stats.commit_seconds
            t1, cpu1 = time.perf_counter(), time.process_time()
            await asyncio.sleep(seconds)
            elapsed, cpu_s = time.perf_counter() - t1, time.process_time() - cpu1
            steps, commits = timer.steps_done, stats.commits - c0
            return {"agents": n, "steps_per_s": round(steps / elapsed, 1), "steps": steps,
                    "seconds": round(elapsed, 2), "enqueue_creates_s": round(enqueue_s, 2),
                    "sessions_started_s": round(all_started_s, 2),
                    "step_commit_wait": summary(timer.step_ms), "snapshot_commit_wait": summary(timer.snapshot_ms),
                    "commits_per_s": round(commits / elapsed, 1),
                    "rows_per_commit": round((stats.rows - r0) / max(commits, 1), 1),
                    "commit_busy_fraction": round((stats.commit_seconds - s0) / elapsed, 2),
                    "process_cpu_cores": round(cpu_s / elapsed, 2),
                    "cpu_ms_per_step": round(cpu_s * 1000 / max(steps, 1), 3)}
        try:
            return run_in_process(store, scenario)
        finally:
            store.close()


def run(counts: list[int], seconds: float, warmup_s: float) -> dict:
    result = {"benchmark": "step_throughput", "machine": machine(), "moniker": "noop (bench-local)", "runs": []}
    for n in counts:
        progress(f"{n} agents")
        result["runs"].append(measure(n, seconds, warmup_s))
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
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.seconds, args.warmup = "5", 1.0, 0.5
    emit(run([int(x) for x in args.agents.split(",")], args.seconds, args.warmup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
