"""The same no-op N-step loop on this service and on two peers, in one run on one
machine: LangGraph with its SQLite checkpointer, and the naive design of the original specification.

    python -m bench.bench_peers [--quick] [--agents 10,100,1000] [--seconds 10]

For each agent count, each system runs that many concurrent agents whose step
does nothing, for ``--seconds``, and reports persisted steps/s and the time a
step waits for its write (p50/p99).  ``per_step_ms_single_agent`` is one
agent's wall time per step: the per-step overhead with nothing to overlap.

- ``agentsvc``: AgentService in-process on a Store (bench_step_throughput's
  measurement: group commit of step rows and snapshot upserts).
- ``langgraph``: a one-node StateGraph looping on itself, compiled with
  AsyncSqliteSaver (langgraph-checkpoint-sqlite) and ``durability="sync"`` so a
  step's checkpoint is written before the next step starts, as ours is.  One
  thread_id per agent.  Steps are node executions in the window.
- ``naive``: :class:`Naive` below, the original specification's design: one single-row lancedb
  ``add`` per step, and a poller that sleeps a fixed 1 s between queries for
  unprocessed control actions.  It also reports its control latency and what
  its tables look like afterwards (fragments, versions, query time).
"""
import argparse
import asyncio
import sys
import tempfile
import time
from datetime import datetime, timezone
from typing import TypedDict

from bench.bench_step_throughput import measure as measure_agentsvc
from bench.common import emit, machine, progress, summary, timed_ms

# ---- LangGraph --------------------------------------------------------------


class LoopState(TypedDict):
    n: int


async def measure_langgraph(n_agents: int, seconds: float) -> dict:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.graph import END, StateGraph

    done_at: list[float] = []  # perf_counter at each node execution

    def step(state: LoopState) -> dict:
        done_at.append(time.perf_counter())
        return {"n": state["n"] + 1}

    graph = StateGraph(LoopState)
    graph.add_node("step", step)
    graph.set_entry_point("step")
    graph.add_conditional_edges("step", lambda s: "step" if s["n"] < 10**9 else END)
    with tempfile.TemporaryDirectory() as root:
        async with AsyncSqliteSaver.from_conn_string(f"{root}/checkpoints.sqlite") as saver:
            app = graph.compile(checkpointer=saver)
            config = lambda i: {"configurable": {"thread_id": f"agent-{i}"}, "recursion_limit": 10**9}  # noqa: E731
            tasks = [asyncio.create_task(app.ainvoke({"n": 0}, config(i), durability="sync"))
                     for i in range(n_agents)]
            await asyncio.sleep(min(1.0, seconds / 4))  # warm-up
            start, before = time.perf_counter(), len(done_at)
            await asyncio.sleep(seconds)
            elapsed, steps = time.perf_counter() - start, len(done_at) - before
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return {"agents": n_agents, "steps_per_s": round(steps / elapsed, 1), "steps": steps}


# ---- the original specification's naive design ----------------------------------


class Naive:
    """One single-row ``add`` per step; control actions found by a fixed-sleep poll."""

    def __init__(self, path: str, poll_s: float = 1.0):
        import lancedb
        import pyarrow as pa
        self.db, self.poll_s = lancedb.connect(path), poll_s
        self.steps = self.db.create_table("agent_steps", schema=pa.schema(
            [("agent_id", pa.string()), ("iteration", pa.int64()), ("created_at", pa.timestamp("us")),
             ("state", pa.string())]))
        self.actions = self.db.create_table("actions", schema=pa.schema(
            [("id", pa.string()), ("created_at", pa.timestamp("us")), ("processed", pa.bool_())]))
        self.commit_ms: list[float] = []
        self.control_ms: list[float] = []
        self.failed_commits = 0

    async def agent(self, agent_id: str, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            n += 1  # the no-op step
            row = [{"agent_id": agent_id, "iteration": n, "created_at": datetime.now(), "state": f'{{"n":{n}}}'}]
            try:
                self.commit_ms.append(await asyncio.to_thread(timed_ms, self.steps.add, row))
            except RuntimeError as exc:  # a thousand writers: Lance gives up after 30 s of conflicts
                if "concurrent writers" not in str(exc):
                    raise
                self.failed_commits += 1  # the step is lost; the naive design tries the next one

    async def poller(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(self.poll_s)
            rows = await asyncio.to_thread(lambda: self.actions.search().where("processed = false").limit(50).to_list())
            for row in rows:
                await asyncio.to_thread(self.actions.update, where=f"id = '{row['id']}'", values={"processed": True})
                self.control_ms.append((datetime.now() - row["created_at"]).total_seconds() * 1000)

    async def controls(self, stop: asyncio.Event, every_s: float = 0.37) -> None:
        i = 0
        while not stop.is_set():
            await asyncio.sleep(every_s)
            i += 1
            await asyncio.to_thread(self.actions.add, [{"id": f"a{i}", "created_at": datetime.now(),
                                                        "processed": False}])


async def measure_naive(n_agents: int, seconds: float) -> dict:
    # Lance may still be writing a version file as the directory goes (a run under
    # load 13 failed in the cleanup, "Directory not empty: '_versions'", after measuring).
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as root:
        naive, stop = Naive(f"{root}/db"), asyncio.Event()
        tasks = [asyncio.create_task(naive.agent(f"agent-{i}", stop)) for i in range(n_agents)]
        tasks += [asyncio.create_task(naive.poller(stop)), asyncio.create_task(naive.controls(stop))]
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks)
        steps = naive.steps.count_rows()
        stats = naive.steps.stats()
        query_ms = timed_ms(lambda: naive.steps.search().where("agent_id = 'agent-0'").limit(100).to_list())
        return {"agents": n_agents, "steps_per_s": round(steps / seconds, 1), "steps": steps,
                "failed_commits": naive.failed_commits,
                "step_commit_wait": summary(naive.commit_ms), "control": summary(naive.control_ms),
                "after": {"fragments": stats["fragment_stats"]["num_fragments"],
                          "versions": len(naive.steps.list_versions()), "list_query_ms": round(query_ms, 1)}}


# ---- driver ---------------------------------------------------------------------


def ms_per_step(result: dict) -> float:
    """One agent's wall time per step, from a measurement's steps/s."""
    return round(1000 / max(result["steps_per_s"], 1e-9), 2)


async def per_step_single(fn, seconds: float) -> float:
    return ms_per_step(await fn(1, seconds))


def run(counts: list[int], seconds: float, single_s: float = 3.0) -> dict:
    result = {"benchmark": "peers", "machine": machine(), "seconds": seconds, "runs": []}
    for n in counts:
        progress(f"{n} agents: agentsvc")
        ours = measure_agentsvc(n, seconds, warmup_s=2.0)
        progress(f"{n} agents: langgraph")
        lg = asyncio.run(measure_langgraph(n, seconds))
        progress(f"{n} agents: naive")
        nv = asyncio.run(measure_naive(n, seconds))
        result["runs"].append({"agents": n, "agentsvc": ours, "langgraph": lg, "naive": nv})
    result["per_step_ms_single_agent"] = {
        "agentsvc": ms_per_step(measure_agentsvc(1, single_s, warmup_s=1.0)),
        "langgraph": asyncio.run(per_step_single(measure_langgraph, single_s)),
        "naive": asyncio.run(per_step_single(measure_naive, single_s))}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--agents", default="10,100,1000")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.seconds = "3", 1.0
    emit(run([int(x) for x in args.agents.split(",")], args.seconds, single_s=1.0 if args.quick else 3.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
