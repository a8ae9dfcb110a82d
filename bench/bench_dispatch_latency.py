"""Dispatch latency: an HTTP control action -> its handler starting, idle and
while 100 agents step.

    python -m bench.bench_dispatch_latency [--quick] [--n 60] [--busy 100] [--interval 0.1]

Starts agents.py and app.py on a temporary directory and alternates pause and
resume on one agent.  Two figures per action, both from this machine's clock:

- ``applied``: the action's created_at -> processed_at (what bench_control_latency
  reports).  An upper bound: it includes the handler and the finishing update.
- ``dispatch``: applied minus the handler+finish time that agents.py logs for
  the action (``action <id> pause done in <ms> ms``): accepted -> handler start.
  A slight underestimate, as processed_at is taken before the finish commits.

``in_process`` repeats the busy phase with AgentService in this process, where
the handler's start is stamped exactly (the dispatcher's ``handle`` is wrapped)
and each queue call the dispatcher makes (pending query, claim, finish) is
timed: that says where a busy dispatch spends its time.

A random gap (0..--gap s) separates actions, so the poller is caught in every
phase of its idle back-off rather than always right after finding work.
"""
import argparse
import asyncio
import random
import sys
import tempfile
import time
from datetime import datetime, timezone

from bench.common import (emit, enqueue_creates, handler_ms_from_logs, machine, progress, run_in_process, summary,
                          time_calls, ts, wait_until)
from store import Store
from tests.harness import Service, wait_for

TARGET_BUSY = {"dispatch_p50_ms": 25, "dispatch_p99_ms": 150}


def measure(svc: Service, agent_id: str, n: int, gap_s: float) -> list[dict]:
    actions = []
    for i in range(n):
        time.sleep(random.uniform(0, gap_s))
        r = svc.post(f"/api/agents/{agent_id}/{'pause' if i % 2 == 0 else 'resume'}", json={})
        assert r.status_code == 202, r.text
        action = svc.action(r.json()["action_id"], timeout=60)
        assert action["status"] == "done", action
        actions.append(action)
    return actions


def figures(actions: list[dict], log_dir: str) -> dict:
    handler_ms = handler_ms_from_logs(log_dir)
    applied = [(ts(a["processed_at"]) - ts(a["created_at"])).total_seconds() * 1000 for a in actions]
    dispatch = [ms - handler_ms[a["id"]] for a, ms in zip(actions, applied) if a["id"] in handler_ms]
    return {"applied": summary(applied), "dispatch": summary(dispatch),
            "handler": summary(handler_ms[a["id"]] for a in actions if a["id"] in handler_ms)}


def start_busy(svc: Service, n: int, interval_s: float) -> list[dict]:
    busy = [svc.create("joke", f"subject {i}", config={"interval_s": interval_s}) for i in range(n)]
    for b in busy[:: max(1, n // 10)]:  # a sample: all were queued before these
        wait_for(lambda: svc.steps(b["session_id"]), timeout=120, what="busy agents stepping")
    return busy


def steps_per_s(svc: Service, busy: list[dict], seconds: float = 3.0) -> float:
    """How fast the busy agents actually step (they may fall behind their interval)."""
    def total():
        return sum(svc.session(b["session_id"]).get("iteration", 0) for b in busy)
    before = total()
    time.sleep(seconds)
    return round((total() - before) / seconds, 1)


def in_process(n: int, busy_n: int, interval_s: float, gap_s: float) -> dict:
    """Busy phase in-process: exact accepted -> handler-start, and the queue calls' times."""
    with tempfile.TemporaryDirectory() as root:
        store = Store(f"{root}/db")
        target = enqueue_creates(store, 1, "joke", {"interval_s": 0.5})[0]
        enqueue_creates(store, busy_n, "joke", {"interval_s": interval_s})
        calls: dict[str, list[float]] = {}
        dispatch_ms: list[float] = []

        async def scenario(service):
            time_calls(service.persist, QUEUE_CALLS, calls)
            handle = service.dispatcher.handle

            async def stamped(action):
                dispatch_ms.append((datetime.now(timezone.utc) - ts(action["created_at"])).total_seconds() * 1000)
                await handle(action)
            service.dispatcher.handle = stamped
            await wait_until(lambda: len(service.sessions.running()) >= busy_n + 1, 300, what="busy sessions")
            await asyncio.sleep(2)
            for key in calls:
                calls[key].clear()
            dispatch_ms.clear()
            for i in range(n):
                await asyncio.sleep(random.uniform(0, gap_s))
                action = await asyncio.to_thread(store.actions.enqueue, "pause" if i % 2 == 0 else "resume",
                                                 agent_id=target["agent_id"], session_id=target["session_id"])
                await wait_until(lambda: (store.actions.get(action["id"]) or {}).get("status") in ("done", "failed"),
                                 60, interval=0.01, what="control action")
        try:
            run_in_process(store, scenario)
        finally:
            store.close()
    return {"dispatch": summary(dispatch_ms), **{name: summary(ms) for name, ms in calls.items()}}


QUEUE_CALLS = ("pending_actions", "claim_actions", "finish_action", "save_snapshot")


def run(n: int, busy_n: int, interval_s: float, gap_s: float) -> dict:
    result = {"benchmark": "dispatch_latency", "machine": machine(), "n": n, "busy_agents": busy_n,
              "busy_interval_s": interval_s}
    with tempfile.TemporaryDirectory() as root:
        svc = Service(f"{root}/data", root).start()
        try:
            target = svc.create("joke", "cats", config={"interval_s": 0.5})
            svc.action(target["action_id"], timeout=60)
            progress("idle")
            result["idle"] = figures(measure(svc, target["agent_id"], n, gap_s), root)
            progress(f"starting {busy_n} busy agents")
            busy = start_busy(svc, busy_n, interval_s)
            result["busy_steps_per_s"] = steps_per_s(svc, busy)
            progress("busy")
            result["busy"] = figures(measure(svc, target["agent_id"], n, gap_s), root)
        finally:
            svc.stop()
    progress("busy, in-process breakdown")
    result["in_process"] = in_process(n, busy_n, interval_s, gap_s)
    d = result["busy"]["dispatch"]
    result["target"] = {**TARGET_BUSY, "met": (d["p50_ms"] or 1e9) <= 25 and (d["p99_ms"] or 1e9) <= 150}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--n", type=int, default=60, help="control actions per phase")
    parser.add_argument("--busy", type=int, default=100, help="agents stepping in the background")
    parser.add_argument("--interval", type=float, default=0.1, help="interval_s of the busy agents")
    parser.add_argument("--gap", type=float, default=0.2, help="longest random pause between actions, s")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.busy, args.gap = 3, 2, 0.02
    emit(run(args.n, args.busy, args.interval, args.gap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
