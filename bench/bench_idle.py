"""What an idle service costs: CPU of agents.py with no agents, and memory per
idle agent with 10,000 of them.

    python -m bench.bench_idle [--quick] [--cpu-seconds 60] [--agents 10000]

1. Starts agents.py and app.py on a temporary directory, lets them settle, and
   samples psutil ``cpu_percent`` of each process over ``--cpu-seconds``
   (100 = one core).  The target is agents.py under 2 % of one core.
2. Creates ``--agents`` sessions through the store's action queue (this process
   enqueues them from many threads, so the writer group-commits them) with the
   ``echo`` moniker and ``interval_s: 86400``: each takes one step and then
   sleeps in its between-step wait, which is exactly the state of a paused
   agent (a task awaiting an event) without 10,000 extra pause actions.
   Memory per idle agent = (RSS after - RSS before) / n, once every session
   has persisted its first step.  The CPU of agents.py holding them idle is
   sampled again.
"""
import argparse
import sys
import tempfile
import time

import psutil

from bench.common import emit, enqueue_creates, machine, progress
from store import Store
from tests.harness import Service

TARGET_IDLE_CPU_PERCENT = 2.0


def cpu_percent(procs: dict, seconds: float) -> dict:
    handles = {name: psutil.Process(p.pid) for name, p in procs.items()}
    for h in handles.values():
        h.cpu_percent(None)  # starts the measuring interval
    time.sleep(seconds)
    return {name: round(h.cpu_percent(None), 2) for name, h in handles.items()}


def rss_mb(proc) -> float:
    return psutil.Process(proc.pid).memory_info().rss / 1e6


def wait_steps(store: Store, n: int, timeout: float) -> float:
    started = time.monotonic()
    while store.steps.count() < n:
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"only {store.steps.count()} of {n} agents stepped in {timeout}s")
        time.sleep(2)
        progress(f"{store.steps.count()} / {n} agents have stepped")
    return time.monotonic() - started


def run(cpu_s: float, n: int, settle_s: float) -> dict:
    result = {"benchmark": "idle", "machine": machine(), "cpu_seconds": cpu_s}
    with tempfile.TemporaryDirectory() as root:
        svc = Service(f"{root}/data", root).start()
        try:
            time.sleep(settle_s)
            cpu = cpu_percent({"agents.py": svc.agents, "app.py": svc.app}, cpu_s)
            result["idle_cpu_percent"] = cpu
            rss_before = rss_mb(svc.agents)
            store = Store(f"{root}/data/lancedb")
            progress(f"creating {n} idle agents")
            t0 = time.monotonic()
            enqueue_creates(store, n, "echo", {"interval_s": 86_400})
            enqueue_s = time.monotonic() - t0
            all_stepped_s = wait_steps(store, n, timeout=max(120.0, n * 0.2))
            time.sleep(settle_s)
            rss_after = rss_mb(svc.agents)
            result["idle_agents"] = {
                "agents": n, "enqueue_s": round(enqueue_s, 1), "all_stepped_s": round(all_stepped_s, 1),
                "rss_before_mb": round(rss_before, 1), "rss_after_mb": round(rss_after, 1),
                "kb_per_agent": round((rss_after - rss_before) * 1000 / n, 1),
                "cpu_percent_holding_them": cpu_percent({"agents.py": svc.agents}, min(cpu_s, 20))["agents.py"]}
            store.close()
        finally:
            svc.stop()
    result["target"] = {"idle_cpu_percent": TARGET_IDLE_CPU_PERCENT,
                        "met": result["idle_cpu_percent"]["agents.py"] < TARGET_IDLE_CPU_PERCENT}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--cpu-seconds", type=float, default=60.0)
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds to let the processes settle")
    args = parser.parse_args(argv)
    if args.quick:
        args.cpu_seconds, args.agents, args.settle = 2.0, 20, 1.0
    emit(run(args.cpu_seconds, args.agents, args.settle))
    return 0


if __name__ == "__main__":
    sys.exit(main())
