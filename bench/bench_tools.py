"""Tool-call overhead: what a no-op tool call adds to a step, and steps/s with
100 agents each calling one no-op tool per step.

    python -m bench.bench_tools [--quick] [--seconds 10] [--agents 100]

Runs AgentService in this process on a Store in a temporary directory (no HTTP),
with two bench-local monikers: ``noop`` (no tools) and ``noop_tool`` (each step
asks for one call of the bench-local tool ``noop``, which returns at once).
With ``interval_s: 0`` the time from one moniker call to the next of the same
session is the whole cost of a step: for ``noop`` the step row's commit; for
``noop_tool`` that plus the tool phase and the call's ended row (the bench's
tool is idempotent, so it has no ``running`` row to wait for, and its ended
row commits beside the next step's row; see runtime/session/tool_runner.py for which
rows a step waits for).

Figures, all in one run on one machine:
- ``single``: one session of each kind in turn; p50/p99 of the step cycle (ms)
  and the ratio tool/plain (the target is <= 1.5x a step without tools);
- ``many``: ``--agents`` sessions of each kind in turn; steps/s, and tool
  calls/s for the tool sessions.
"""
import argparse
import asyncio
import sys
import tempfile
import time

from pydantic import BaseModel

from bench.common import NOOP, emit, enqueue_creates, machine, progress, run_in_process, summary, wait_until
from monikers import default_registry
from monikers.frame import FrameIn, FrameOut, Moniker, StepContext
from tools.tool_registry import Tool, default_tool_registry

TARGET_RATIO = 1.5


class NoArgs(BaseModel):
    pass


async def noop_tool_run(args, ctx):
    return None


NOOP_TOOL = Tool("noop", "Benchmark: returns at once.", noop_tool_run, NoArgs, timeout_s=5, idempotent=True)


class Cycles:
    """Monikers that stamp the time of every call, per session."""

    def __init__(self):
        self.stamps: dict[str, list[float]] = {}

    def moniker(self, name: str, with_tool: bool) -> Moniker:
        async def step(frame: FrameIn, ctx: StepContext) -> FrameOut:
            self.stamps.setdefault(ctx.session_id, []).append(time.perf_counter())
            n = int(frame.state.get("n", 0)) + 1
            calls = [{"name": "noop", "args": {}}] if with_tool else []
            return FrameOut(step=frame.step, next_step=str(n), state={"n": n}, tool_calls=calls)
        return Moniker(name, step, "Benchmark: records when it is called.")

    def cycles_ms(self, sessions, since: float, until: float) -> list[float]:
        out = []
        for sid in sessions:
            times = [t for t in self.stamps.get(sid, []) if since <= t <= until]
            out += [(b - a) * 1000 for a, b in zip(times, times[1:])]
        return out

    def calls_in(self, sessions, since: float, until: float) -> int:
        return sum(1 for sid in sessions for t in self.stamps.get(sid, []) if since <= t <= until)


def measure(kind: str, n: int, seconds: float, warmup_s: float) -> dict:
    """Step cycles of n sessions of one kind (``plain`` or ``tool``) on a fresh store."""
    cycles = Cycles()
    monikers = default_registry()
    monikers.register(cycles.moniker("bench_plain", with_tool=False))
    monikers.register(cycles.moniker("bench_tool", with_tool=True))
    monikers.register(NOOP)
    tools = default_tool_registry()
    tools.register(NOOP_TOOL)
    moniker = "bench_tool" if kind == "tool" else "bench_plain"
    with tempfile.TemporaryDirectory() as root:
        from store import Store
        store = Store(f"{root}/db")
        made = enqueue_creates(store, n, moniker, {"interval_s": 0, "tools": ["noop"]})
        sessions = [m["session_id"] for m in made]

        async def scenario(service):
            await wait_until(lambda: len(service.sessions.running()) >= n, timeout=600, what=f"{n} sessions")
            await asyncio.sleep(warmup_s)
            since = time.perf_counter()
            await asyncio.sleep(seconds)
            until = time.perf_counter()
            ms = cycles.cycles_ms(sessions, since, until)
            steps = cycles.calls_in(sessions, since, until)
            return {"kind": kind, "agents": n, "seconds": round(until - since, 2), "steps": steps,
                    "steps_per_s": round(steps / (until - since), 1),
                    "tool_calls_per_s": round(steps / (until - since), 1) if kind == "tool" else 0,
                    "cycle": summary(ms)}
        try:
            return run_in_process(store, scenario, registry=monikers, tools=tools)
        finally:
            store.close()


def ratio(a, b):
    return round(a / b, 2) if a and b else None


def single(seconds: float, warmup_s: float) -> dict:
    """One session without tools, then one with a no-op tool call per step: their
    step cycles and the ratios tool/plain (bench_guard calls this alone)."""
    progress("one session without tools")
    plain = measure("plain", 1, seconds, warmup_s)
    progress("one session with a no-op tool call per step")
    tool = measure("tool", 1, seconds, warmup_s)
    return {"plain": plain, "tool": tool,
            "ratio_p50": ratio(tool["cycle"]["p50_ms"], plain["cycle"]["p50_ms"]),
            "ratio_p99": ratio(tool["cycle"]["p99_ms"], plain["cycle"]["p99_ms"])}


def run(agents: int, seconds: float, warmup_s: float) -> dict:
    result = {"benchmark": "tools", "machine": machine()}
    result["single"] = single(seconds, warmup_s)
    progress(f"{agents} sessions without tools")
    many_plain = measure("plain", agents, seconds, warmup_s)
    progress(f"{agents} sessions with a no-op tool call per step")
    many_tool = measure("tool", agents, seconds, warmup_s)
    result["many"] = {"plain": many_plain, "tool": many_tool,
                      "steps_per_s_ratio": ratio(many_tool["steps_per_s"], many_plain["steps_per_s"])}
    result["target"] = {"ratio_p50_max": TARGET_RATIO,
                        "met": bool(result["single"]["ratio_p50"]) and result["single"]["ratio_p50"] <= TARGET_RATIO}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10.0, help="measuring window per run")
    parser.add_argument("--warmup", type=float, default=2.0)
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.seconds, args.warmup = 5, 3.0, 0.5  # 1 s saw no whole tool cycle at load 20
    emit(run(args.agents, args.seconds, args.warmup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
