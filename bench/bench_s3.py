"""What the store costs on a real S3-compatible server (SeaweedFS on 127.0.0.1,
tests/servers.py: seaweedfs_s3): S3 requests by type per persisted step and
per idle hour, turned into dollars at AWS S3's list prices.

    python -m bench.bench_s3 [--quick] [--agents 1,100,1000] [--seconds 30] [--idle-seconds 90]
                             [--paused 1000] [--agents-arg=--watch-interval=1]
                             [--scaleout 1x100,2x100,4x100,1x1000,2x1000] [--scaleout-seconds 20]
                             [--controls 10] [--dead-after 5] [--chore-calls 5]
                             [--skip steps,idle,chores,scaleout]

``--quick`` (the smoke test's) runs only the per-step part, one agent, 2 s
windows: starting app.py and agents.py for the idle, chores and scale-out
parts would take the suite tens of seconds more.

SeaweedFS counts the requests itself (its Prometheus ``SeaweedFS_s3_request_total``
by type: PUT, GET, LIST, COPY, DELETE; a HEAD is counted as a GET), per bucket;
each run gets a bucket of its own, so nothing else is counted.

- ``steps``: n no-op agents (the bench-local ``noop`` moniker, ``interval_s`` 0)
  run by AgentService in this process (as bench_step_throughput does) on the
  bucket; requests are counted over a window of ``--seconds`` after the
  sessions are up and a warm-up, and divided by the steps persisted in it.
  Twice per n: maintenance off, then on (store/maintenance.py's Maintainer as
  agents.py builds it: every 100 versions, 10 s of old versions kept).  What
  maintenance costs = the second run's requests - its steps x the first run's
  requests per step, per hour of the window.
- ``idle``: the real agents.py and app.py (tests/harness.py: Service, one
  worker process) on the bucket, with 0 and then ``--paused`` paused sessions
  (created and paused through the queue before the window), maintenance on and
  off (agents.py ``--maintain-every-versions 0``); the bench does not touch the
  bucket during the window of ``--idle-seconds``; requests per hour are the
  window's count scaled to an hour.

- ``chores``: what each periodic read of an idle agents.py costs: every chore
  (heartbeat, idle poll, full poll, lease release, adoption round, health
  monitor, eval-run round, archive sweep, maintenance round) called
  ``--chore-calls`` times in this process on a bucket nothing else touches,
  with 0 and then ``--paused`` paused sessions (made by a real agents.py run
  under the same worker id, so the adoption round reads them as its own);
  requests per call, and per hour at the period each had on a local disk
  (idle saving off: object storage's idle saving skips most calls instead).

- ``scaleout``: per ``WORKERSxAGENTS`` plan, that many agents.py processes
  (separate processes, one worker each, with their own ``--worker-id``, on the
  same bucket; ``--dead-after`` 5 s) and app.py; echo sessions at
  ``interval_s`` 0 created through the queue (spread by the create share);
  steps/s over a window (rows of agent_steps counted before and after); an
  HTTP pause/resume of one more agent, accepted -> applied (``created_at`` ->
  ``processed_at``), ``--controls`` times while they step; then SIGKILL of the
  last worker and the seconds until no running session is still its
  (survivors adopt them once its heartbeat is ``--dead-after`` old).

Dollars at AWS S3 Standard list prices: PUT, COPY, POST and LIST $0.005 per
1,000 requests; GET and HEAD $0.0004 per 1,000; DELETE free.  SeaweedFS on
the same 2 cores is slower than S3, so steps/s here are not S3's; the
requests each step makes are the same whatever the server's speed.
"""
import argparse
import json
import os
import sys
import tempfile
import time
import uuid

from bench.common import (Bucket, CommitTimer, emit, enqueue_creates, machine, minus, progress, run_in_process, scaled,
                          wait_until)
from store import Store
from store.maintenance import Maintainer
from tests.harness import Service, wait_for
from tests.servers import seaweedfs_s3

PRICE_PER_1K = {"PUT": 0.005, "GET": 0.0004, "DELETE": 0.0}  # AWS S3 Standard, by request class


def price_class(kind: str) -> str:
    """AWS's class of a request type as SeaweedFS labels it: GET (and HEAD,
    which SeaweedFS counts as GET) in the cheap class, DELETE free, and every
    other (PUT, POST, LIST, COPY, multipart) in the PUT class."""
    return kind if kind in ("GET", "DELETE") else "PUT"


def dollars(counts: dict[str, float]) -> float:
    return sum(n * PRICE_PER_1K[price_class(kind)] / 1000 for kind, n in counts.items())


# ---- per step -----------------------------------------------------------------

def step_window(bucket: Bucket, n: int, seconds: float, warmup_s: float, maintenance: bool,
                watch_s: float) -> dict:
    """Requests by type and steps persisted in a window, n no-op agents stepping."""
    store = Store(bucket.uri, storage_options=bucket.options)
    try:
        enqueue_creates(store, n, "noop", {"interval_s": 0})
        maintainer = Maintainer(store, every_versions=100, keep_versions_s=10) if maintenance else None

        async def scenario(service):
            timer = CommitTimer(service.persist)
            await wait_until(lambda: len(service.sessions.running()) >= n, timeout=900, what=f"{n} sessions")
            await wait_until(lambda: timer.steps_done >= n, timeout=900, what="a step each")
            import asyncio
            await asyncio.sleep(warmup_s)
            before, steps0, t0 = bucket.requests(), timer.steps_done, time.monotonic()
            await asyncio.sleep(seconds)
            after, steps1, t1 = bucket.requests(), timer.steps_done, time.monotonic()
            return minus(after, before), steps1 - steps0, t1 - t0
        counts, steps, elapsed = run_in_process(store, scenario, maintainer=maintainer, watch_s=watch_s)
    finally:
        store.close()
    return {"counts": counts, "steps": steps, "seconds": round(elapsed, 1)}


def steps_part(server, endpoint: str, counts: list[int], seconds: float, warmup_s: float, watch_s: float) -> list:
    out = []
    for n in counts:
        runs = {}
        for maintenance in (False, True):
            progress(f"steps: {n} agents, maintenance {'on' if maintenance else 'off'}, {seconds} s window")
            runs[maintenance] = step_window(Bucket(server, endpoint), n, seconds, warmup_s, maintenance, watch_s)
            progress(json.dumps(runs[maintenance]))
        off, on = runs[False], runs[True]
        per_step = scaled(off["counts"], 1 / max(off["steps"], 1))
        upkeep = {k: on["counts"].get(k, 0) - on["steps"] * per_step.get(k, 0) for k in on["counts"]}
        upkeep_per_h = scaled(upkeep, 3600 / on["seconds"], 0)
        out.append({"agents": n, "window_s": seconds, "steps_per_s": round(off["steps"] / off["seconds"], 1),
                    "requests_per_step": per_step,
                    "put_class_per_step": round(sum(v for k, v in per_step.items() if price_class(k) == "PUT"), 3),
                    "dollars_per_million_steps": round(dollars(per_step) * 1e6, 2),
                    "with_maintenance": {"steps_per_s": round(on["steps"] / on["seconds"], 1),
                                         "requests_per_step": scaled(on["counts"], 1 / max(on["steps"], 1)),
                                         "dollars_per_million_steps": round(
                                             dollars(on["counts"]) / max(on["steps"], 1) * 1e6, 2)},
                    "maintenance_requests_per_hour": upkeep_per_h,
                    "maintenance_dollars_per_day": round(dollars(upkeep_per_h) * 24, 2),
                    "raw": {"maintenance_off": off, "maintenance_on": on}})
    return out


# ---- idle ---------------------------------------------------------------------

def pause_all(bucket: Bucket, n: int) -> None:
    """n sessions created and paused through the queue (as the HTTP API enqueues
    them), waited for through a Store of the bench's, closed before the window."""
    store = Store(bucket.uri, storage_options=bucket.options)
    try:
        made = enqueue_creates(store, n, "echo", {"interval_s": 86400})
        states = store.tables["agent_state"]
        wait_for(lambda: states.count_rows("status = 'running'") >= n, timeout=900, interval=1,
                 what=f"{n} sessions running")
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda a: store.actions.enqueue("pause", agent_id=a["agent_id"],
                                                          session_id=a["session_id"]), made))
        wait_for(lambda: states.count_rows("status = 'paused'") >= n, timeout=900, interval=1,
                 what=f"{n} sessions paused")
    finally:
        store.close()


def idle_window(bucket: Bucket, root: str, paused: int, seconds: float, agents_args: list[str]) -> dict:
    os.makedirs(f"{root}/logs", exist_ok=True)
    env = bucket.service_env()
    svc = Service(f"{root}/data", f"{root}/logs", agents_args=agents_args, env=env).start()
    try:
        if paused:
            pause_all(bucket, paused)
        time.sleep(10)  # the last pauses' commits and a maintenance round settle
        before, t0 = bucket.requests(), time.monotonic()
        time.sleep(seconds)
        counts, elapsed = minus(bucket.requests(), before), time.monotonic() - t0
    finally:
        svc.stop()
    per_h = scaled(counts, 3600 / elapsed, 0)
    return {"paused_sessions": paused, "agents_args": agents_args, "window_s": round(elapsed, 1),
            "requests_per_hour": per_h, "total_per_hour": sum(per_h.values()),
            "dollars_per_day": round(dollars(per_h) * 24, 3)}


def idle_part(server, endpoint: str, paused_counts: list[int], seconds: float, agents_args: list[str]) -> list:
    out = []
    for paused in paused_counts:
        runs = {}
        for label, extra in (("maintenance_off", ["--maintain-every-versions", "0"]), ("maintenance_on", [])):
            progress(f"idle: {paused} paused, {label}, {seconds} s window, agents.py {agents_args + extra}")
            with tempfile.TemporaryDirectory() as root:
                runs[label] = idle_window(Bucket(server, endpoint), root, paused, seconds, agents_args + extra)
            progress(json.dumps(runs[label]))
        upkeep = minus(runs["maintenance_on"]["requests_per_hour"], runs["maintenance_off"]["requests_per_hour"])
        out.append({"paused_sessions": paused, **runs, "maintenance_requests_per_hour": upkeep})
    return out


# ---- chores: what each periodic read of an idle agents.py costs -----------------

def chore_calls(service, store) -> dict:
    """The periodic reads of an idle agents.py, by name: (how often it runs
    now, seconds; the call).  Periods as AgentService and agents.py set them."""
    from evals.scorers import default_registry as default_scorers
    from runtime.record.archive import Archiver
    from runtime.record.eval_runner import EvalRunner

    maintainer = Maintainer(store, every_versions=100, keep_versions_s=10)
    evals = EvalRunner(store, default_scorers(), worker_id=service.worker_id)
    archiver = Archiver(store, worker_id=service.worker_id)
    dispatcher, persist = service.dispatcher, service.persist

    async def look():
        persist.queue_change_token()
    return {
        "heartbeat": (service.heartbeat_s, service._beat),
        "idle poll (a look at the queue's version)": (dispatcher.idle_poll_s, look),
        "full poll (pending query)": (dispatcher.full_poll_s, lambda: persist.pending_actions(dispatcher.batch)),
        "lease release": (dispatcher.release_every_s, persist.release_expired_actions),
        "adoption round": (service.adopt_every_s, service.adopt),
        "health monitor (retention)": (service.monitor.every_s, service.monitor.check),
        "eval run round": (evals.every_s, evals.round),
        "archive sweep": (archiver.every_s, archiver.sweep),
        "maintenance round": (service.maintain_every_s, lambda: persist.run_maintenance(maintainer)),
    }


def chores_part(server, endpoint: str, paused_counts: list[int], calls: int) -> list:
    """Each chore called ``calls`` times on a bucket nothing else touches (with
    0 and then ``paused`` paused sessions, which the adoption round reads):
    requests per call, and per hour at its period."""
    import asyncio
    from monikers import default_registry
    from runtime.worker.service import AgentService

    out = []
    for paused in paused_counts:
        bucket = Bucket(server, endpoint)
        if paused:
            root = tempfile.mkdtemp()
            os.makedirs(f"{root}/logs")
            env = bucket.service_env()
            svc = Service(f"{root}/data", f"{root}/logs", agents_args=["--worker-id", "bench-chores"],
                          env=env).start()
            try:
                pause_all(bucket, paused)
            finally:
                svc.stop()
        store = Store(bucket.uri, storage_options=bucket.options)

        async def measure():
            # today's cadence on a local disk (no idle saving): each chore's period is fixed
            service = AgentService(store, default_registry(), worker_id="bench-chores", idle_saving=False,
                                   heartbeat_s=2.0)
            await service.persist.heartbeat(service.worker_id)
            rows = {}
            for name, (period, call) in chore_calls(service, store).items():
                await call()  # warm: first reads open what later ones reuse
                before = bucket.requests()
                for _ in range(calls):
                    await call()
                per_call = scaled(minus(bucket.requests(), before), 1 / calls, 2)
                per_h = scaled(per_call, 3600 / period, 0)
                rows[name] = {"period_s": period, "per_call": per_call, "per_hour": per_h,
                              "total_per_hour": sum(per_h.values())}
                progress(f"chores, {paused} paused: {name}: {json.dumps(rows[name])}")
            for agent in service.sessions.running():  # adopted paused sessions: stop their runners
                agent.runner.cancel()
            return rows
        try:
            from runtime.base.aio import run_bounded
            rows = run_bounded(measure(), grace_s=1.0)
        finally:
            store.close()
        out.append({"paused_sessions": paused, "calls": calls, "chores": rows,
                    "total_per_hour": sum(r["total_per_hour"] for r in rows.values())})
    return out


# ---- scale-out and control latency ------------------------------------------------

def count_where(bucket: Bucket, table: str, where: str | None = None) -> int:
    """Rows of a table, read through a connection of the bench's own (its requests
    count, so windows that count requests never call this)."""
    import lancedb
    db = lancedb.connect(bucket.uri, storage_options=bucket.options)
    return db.open_table(table).count_rows(where)


def scaleout_run(server, endpoint: str, workers: int, agents: int, seconds: float, controls: int,
                 dead_after: float, kill: bool) -> dict:
    """``workers`` agents.py processes (one worker each, ids bench-w0..) and app.py
    on a bucket; ``agents`` echo sessions stepping at interval 0, created through
    the queue; steps/s over the window; meanwhile ``controls`` HTTP pause/resume
    of one more echo agent (interval 1 s), accepted -> applied; then (``kill``)
    SIGKILL of the last worker and the time until no running session is its."""
    from bench.common import summary, ts
    bucket = Bucket(server, endpoint)
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(f"{root}/logs")
        env = bucket.service_env()
        svc = Service(f"{root}/data", f"{root}/logs", env=env,
                      agents_args=["--dead-after", str(dead_after)])
        try:
            svc.start_app()
            svc.start_agents("--worker-id", "bench-w0")
            for i in range(1, workers):
                svc.start_worker("--worker-id", f"bench-w{i}")
            wait_for(lambda: count_where(bucket, "workers", "status = 'running'") >= workers, timeout=300,
                     interval=1, what=f"{workers} workers")
            store = Store(bucket.uri, storage_options=bucket.options)
            try:
                enqueue_creates(store, agents, "echo", {"interval_s": 0})
            finally:
                store.close()
            wait_for(lambda: count_where(bucket, "agent_state", "status = 'running'") >= agents, timeout=900,
                     interval=2, what=f"{agents} sessions running")
            target = svc.create("echo", config={"interval_s": 1})
            svc.wait_status(target["session_id"], "running", timeout=300)
            time.sleep(5)
            steps0, t0 = count_where(bucket, "agent_steps"), time.monotonic()
            applied = []
            for i in range(controls):
                r = svc.post(f"/api/agents/{target['agent_id']}/{'pause' if i % 2 == 0 else 'resume'}", json={})
                action = svc.action(r.json()["action_id"], timeout=300)
                applied.append((ts(action["processed_at"]) - ts(action["created_at"])).total_seconds() * 1000)
            time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
            steps1, t1 = count_where(bucket, "agent_steps"), time.monotonic()
            out = {"workers": workers, "agents": agents, "window_s": round(t1 - t0, 1),
                   "steps_per_s": round((steps1 - steps0) / (t1 - t0), 1), "control_applied_ms": summary(applied)}
            if kill and workers > 1:
                victim = f"bench-w{workers - 1}"
                owned = count_where(bucket, "agent_state", f"status = 'running' AND owner = '{victim}'")
                svc.workers[-1].kill()
                svc.workers[-1].wait(timeout=30)
                killed = time.monotonic()
                wait_for(lambda: count_where(bucket, "agent_state",
                                             f"status = 'running' AND owner = '{victim}'") == 0,
                         timeout=600, interval=0.5, what=f"the sessions of {victim} taken over")
                out["takeover"] = {"sessions_of_killed_worker": owned, "dead_after_s": dead_after,
                                   "seconds_to_all_taken_over": round(time.monotonic() - killed, 1)}
            return out
        finally:
            svc.stop()


def scaleout_part(server, endpoint: str, plans: list[tuple[int, int]], seconds: float, controls: int,
                  dead_after: float) -> list:
    out = []
    for workers, agents in plans:
        progress(f"scaleout: {workers} workers, {agents} agents, {seconds} s window, {controls} controls")
        try:
            out.append(scaleout_run(server, endpoint, workers, agents, seconds, controls, dead_after, kill=True))
        except AssertionError as exc:  # a wait ran out (too heavy for the machine): say so, go on
            out.append({"workers": workers, "agents": agents, "error": str(exc)})
        progress(json.dumps(out[-1]))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and windows (the smoke test)")
    parser.add_argument("--agents", default="1,100,1000", help="agent counts of the per-step part")
    parser.add_argument("--seconds", type=float, default=30.0, help="per-step window per run")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--idle-seconds", type=float, default=90.0, help="idle window per run")
    parser.add_argument("--paused", type=int, default=1000, help="paused sessions of the second idle run")
    parser.add_argument("--watch-interval", type=float, default=0.02,
                        help="the dispatcher's watch_s / agents.py --watch-interval (its default: 0.02)")
    parser.add_argument("--agents-arg", action="append", default=[],
                        help="one more argument for agents.py in the idle part (repeat)")
    parser.add_argument("--scaleout", default="1x100,2x100,4x100,1x1000,2x1000",
                        help="WORKERSxAGENTS plans of the scale-out part")
    parser.add_argument("--scaleout-seconds", type=float, default=20.0)
    parser.add_argument("--controls", type=int, default=10, help="pause/resume actions per scale-out plan")
    parser.add_argument("--dead-after", type=float, default=5.0, help="agents.py --dead-after in the scale-out part")
    parser.add_argument("--chore-calls", type=int, default=5, help="calls of each chore in the chores part")
    parser.add_argument("--skip", default="", help="parts to leave out: steps, idle, chores, scaleout")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    if args.quick:  # the smoke test's: SeaweedFS and one agent for seconds; the idle part's processes are left out
        args.agents, args.seconds, args.warmup = "1", 2.0, 0.5
        skip |= {"idle", "chores", "scaleout"}
    result = {"benchmark": "s3", "machine": machine(), "server": "SeaweedFS (weed server) on 127.0.0.1",
              "prices_per_1k": PRICE_PER_1K, "watch_interval": args.watch_interval}
    with tempfile.TemporaryDirectory() as root:
        server, endpoint = seaweedfs_s3(root)
        try:
            if "steps" not in skip:
                counts = [int(x) for x in args.agents.split(",")]
                result["steps"] = steps_part(server, endpoint, counts, args.seconds, args.warmup, args.watch_interval)
            if "idle" not in skip:
                agents_args = ["--watch-interval", str(args.watch_interval), *args.agents_arg]
                result["idle"] = idle_part(server, endpoint, [0, args.paused], args.idle_seconds, agents_args)
            if "chores" not in skip:
                result["chores"] = chores_part(server, endpoint, [0, args.paused], args.chore_calls)
            if "scaleout" not in skip:
                plans = [tuple(int(x) for x in plan.split("x")) for plan in args.scaleout.split(",")]
                result["scaleout"] = scaleout_part(server, endpoint, plans, args.scaleout_seconds, args.controls,
                                                   args.dead_after)
        finally:
            server.stop()
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
