"""What an idle service costs: CPU of agents.py with no agents, and memory per
idle agent with 10,000 of them.

    python -m bench.bench_idle [--quick] [--cpu-seconds 60] [--agents 10000]

1. Starts agents.py and app.py on a temporary directory, lets them settle, and
   samples psutil ``cpu_percent`` of each process over ``--cpu-seconds``
   (100 = one core).  The target is agents.py under 2 % of one core.
2. Memory per idle agent, two ways (``--via``):

   - ``create`` (default): ``--agents`` create actions enqueued through the
     store from many threads (group-committed), moniker ``echo`` with
     ``interval_s: 86400``: each takes one step and then waits out its
     interval on an event, which is the state of a paused agent, without
     10,000 extra pause actions.  Fast since finishes are group-committed.
   - ``rehydrate``: stops agents.py, writes the snapshots with status
     ``paused`` through the store's upsert, and starts agents.py again, whose
     start-up resumes each as a paused SessionAgent.  Resuming is one commit
     per session, so it is slow; it measures the start-up path.

   Memory per idle agent = (RSS once they are up - RSS of the idle agents.py
   before) / how many are up within ``--rehydrate-timeout``.
3. The runtime's own share: the same number of paused SessionAgents built in
   this process with a do-nothing store (tracemalloc and RSS per agent).
"""
import argparse
import os
import re
import sys
import tempfile
import time
from datetime import datetime, timezone

import psutil

from ulid import ULID

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


def seed_paused(store: Store, n: int) -> None:
    now = datetime.now(timezone.utc)
    rows = [{"session_id": str(ULID()), "agent_id": str(ULID()), "moniker": "echo", "task": f"idle {i}",
             "config": {"interval_s": 1.0}, "status": "paused", "status_reason": "user", "iteration": -1,
             "next_step_token": "0", "state": {}, "created_at": now} for i in range(n)]
    for k in range(0, n, 1000):
        futures = [store.states.submit(row) for row in rows[k:k + 1000]]
        for future in futures:
            future.result()


def rehydrated(log_dir: str) -> int:
    """How many sessions the latest agents.py has brought back, from its log lines
    ``session <id> rehydrated|resumed status=…`` (the wording changed once)."""
    logs = sorted((f for f in os.listdir(log_dir) if f.startswith("agents.py")),
                  key=lambda f: int(f.split(".")[2]))
    with open(os.path.join(log_dir, logs[-1]), errors="replace") as f:
        return len(re.findall(r"session \S+ (?:rehydrated|resumed) status=", f.read()))


def wait_rehydrated(root: str, n: int, timeout_s: float) -> int:
    """Wait until n sessions are back or timeout_s passed; how many are back."""
    deadline = time.monotonic() + timeout_s
    while (count := rehydrated(root)) < n and time.monotonic() < deadline:
        time.sleep(1.0)
    return count


def idle_agents(svc: Service, root: str, n: int, settle_s: float, cpu_s: float, timeout_s: float) -> dict:
    rss_before = rss_mb(svc.agents)
    svc.stop_agents()
    store = Store(f"{root}/data/lancedb")
    progress(f"seeding {n} paused sessions")
    t0 = time.monotonic()
    seed_paused(store, n)
    seed_s = time.monotonic() - t0
    store.close()
    t0 = time.monotonic()
    svc.start_agents()
    count = wait_rehydrated(root, n, timeout_s)
    rehydrate_s = time.monotonic() - t0
    if count < n:
        progress(f"only {count} of {n} sessions back after {timeout_s:.0f} s; measuring those")
    time.sleep(settle_s)
    rss_after = rss_mb(svc.agents)
    return {"agents": n, "rehydrated": count, "seed_s": round(seed_s, 1), "rehydrate_s": round(rehydrate_s, 1),
            "rss_before_mb": round(rss_before, 1), "rss_after_mb": round(rss_after, 1),
            "kb_per_agent": round((rss_after - rss_before) * 1000 / max(count, 1), 1),
            "resumed_per_s": round(count / rehydrate_s, 1),
            "cpu_percent_holding_them": cpu_percent({"agents.py": svc.agents}, min(cpu_s, 20))["agents.py"]}


class _NoStore:
    async def save_snapshot(self, row: dict) -> None:
        pass


def runtime_footprint(n: int) -> dict:
    """The runtime's own cost of n paused sessions, in this process with no store:
    SessionAgent objects whose runner tasks wait on their pause event.  Set
    against agents.py's RSS delta, it tells the agents' share from the rest
    (LanceDB caches, buffers)."""
    import asyncio
    import gc
    import tracemalloc

    from bench.common import NOOP
    from runtime.session.agent import SessionAgent

    async def build():
        gc.collect()
        rss0 = psutil.Process().memory_info().rss
        tracemalloc.start()
        agents = [SessionAgent(moniker=NOOP, persist=_NoStore(), snapshot={
            "agent_id": f"a{i}", "session_id": f"s{i}", "status": "paused", "iteration": -1,
            "config": {"interval_s": 1.0}, "state": {}, "created_at": None}) for i in range(n)]
        for agent in agents:
            agent.start()
        await asyncio.sleep(0.2)
        heap, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss = psutil.Process().memory_info().rss - rss0
        for agent in agents:
            agent.runner.cancel()
        await asyncio.gather(*(a.runner for a in agents), return_exceptions=True)
        return {"agents": n, "python_heap_kb_per_agent": round(heap / n / 1000, 2),
                "rss_kb_per_agent": round(rss / n / 1000, 2)}
    return asyncio.run(build())


def idle_created(svc: Service, root: str, n: int, settle_s: float, cpu_s: float, timeout_s: float) -> dict:
    """n sessions created through the action queue (echo, interval_s 86400): each
    takes one step and then waits out its interval, like a paused agent."""
    rss_before = rss_mb(svc.agents)
    store = Store(f"{root}/data/lancedb")
    progress(f"creating {n} idle agents through the action queue")
    t0 = time.monotonic()
    enqueue_creates(store, n, "echo", {"interval_s": 86_400})
    enqueue_s = time.monotonic() - t0
    deadline = time.monotonic() + timeout_s
    while (stepped := store.steps.count()) < n and time.monotonic() < deadline:
        time.sleep(2.0)
    created_s = time.monotonic() - t0
    store.close()
    time.sleep(settle_s)
    rss_after = rss_mb(svc.agents)
    return {"agents": n, "stepped": stepped, "enqueue_s": round(enqueue_s, 1), "all_stepped_s": round(created_s, 1),
            "rss_before_mb": round(rss_before, 1), "rss_after_mb": round(rss_after, 1),
            "kb_per_agent": round((rss_after - rss_before) * 1000 / max(stepped, 1), 1),
            "cpu_percent_holding_them": cpu_percent({"agents.py": svc.agents}, min(cpu_s, 20))["agents.py"]}


def run(cpu_s: float, n: int, settle_s: float, timeout_s: float, via: str = "create") -> dict:
    result = {"benchmark": "idle", "machine": machine(), "cpu_seconds": cpu_s}
    with tempfile.TemporaryDirectory() as root:
        svc = Service(f"{root}/data", root).start()
        try:
            time.sleep(settle_s)
            cpu = cpu_percent({"agents.py": svc.agents, "app.py": svc.app}, cpu_s)
            result["idle_cpu_percent"] = cpu
            measure = idle_created if via == "create" else idle_agents
            result["idle_agents"] = {"via": via, **measure(svc, root, n, settle_s, cpu_s, timeout_s)}
            result["runtime_only"] = runtime_footprint(n)
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
    parser.add_argument("--via", choices=("create", "rehydrate"), default="create",
                        help="make the idle agents with create actions, or as paused snapshots resumed at start")
    parser.add_argument("--rehydrate-timeout", type=float, default=300.0,
                        help="stop waiting for the idle agents after this long, and measure those that are up")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds to let the processes settle")
    args = parser.parse_args(argv)
    if args.quick:
        args.cpu_seconds, args.agents, args.settle = 1.0, 10, 0.5
    emit(run(args.cpu_seconds, args.agents, args.settle, args.rehydrate_timeout, args.via))
    return 0


if __name__ == "__main__":
    sys.exit(main())
