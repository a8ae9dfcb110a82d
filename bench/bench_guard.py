"""The guard of the write path: every target of issue 28, measured in one run,
with LangGraph measured beside it, and a verdict per target.

    python -m bench.bench_guard [--quick] [--seconds 10] [--skip adoption,history]
                                [--adoption-sessions 10000] [--tracing]

Re-run it whenever a change touches the write path and replace the "Current
figures" table at the top of BENCHMARKS.md with what it prints.  The machine
is shared: only ratios taken in one run mean much, so each agent count runs
this service and LangGraph back to back (bench_peers.py's measurements).

Figures (``--skip`` takes any of the part names in brackets):
- [peers] 1 agent: ms per persisted step, this service and LangGraph;
  100 and 1,000 agents: steps/s of each;
- [floor] LanceDB alone doing the same writes (bench_lance_floor.py): the
  floor beside the 1-agent figure and the group-commit figures;
- [tools] a step with a no-op tool call over a plain step, p50 (bench_tools.py);
- [adoption] a restart with N orphaned sessions: seconds until all are
  adopted and stepping (bench_adoption.py, when it exists);
- [history] disk over new information, state growing 1 KB a step
  (bench_history.py, when it exists);
- [tracing] only with ``--tracing`` (it starts Arize Phoenix from
  .venv-phoenix as the OTLP/HTTP receiver): 1,000 agents' steps/s with the
  tracing observer (and its export process) off and on, alternating three
  times so that the shared machine's noise falls on both alike; the cost is
  1 - mean(on) / mean(off), with Phoenix niced (a receiver elsewhere) and,
  beside it, at the workers' priority; the export process's own CPU per step
  is reported too.

A target whose figure was not taken (skipped, module absent, or measured at
another size than the target's, as ``--quick`` does) is "not measured".
Output: one JSON object (figures, ratios, ``verdict``) on stdout, a table on stderr.
"""
import argparse
import asyncio
import importlib
import inspect
import os
import subprocess
import sys

from bench.bench_peers import measure_agentsvc, measure_langgraph, ms_per_step
from bench.common import emit, machine, progress

PARTS = ("peers", "floor", "tools", "adoption", "history", "tracing")
# target -> (what it is, the bound as people read it)
TARGETS = {
    "one_agent_ms": ("1 agent, ms per persisted step", "≤ 3 ms"),
    "one_agent_vs_langgraph": ("1 agent, ms per step ÷ LangGraph's (same run)", "≤ 1×"),
    "agents_100_steps_per_s": ("100 agents, steps/s", "≥ 5,000"),
    "agents_1000_steps_per_s": ("1,000 agents, steps/s", "≥ 10,000"),
    "agents_1000_vs_langgraph": ("1,000 agents, × LangGraph", "≥ 20×"),
    "tool_step_ratio": ("a step with a no-op tool call, × a plain step (p50)", "≤ 1.5×"),
    "adoption_s": ("restart with 10,000 orphaned sessions, s to all stepping", "≤ 10 s"),
    "history_disk_ratio": ("history, +1 KB/step, 1,000 steps: disk ÷ new information", "≤ 3×"),
    "tracing_cost_percent": ("1,000 agents, steps/s lost with traces on (Phoenix receiving, niced), %", "≤ 5 %"),
}


def verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("pass" if ok else "fail")


def ratio(a, b):
    return round(a / b, 2) if a and b else None


# ---- the parts ------------------------------------------------------------------


def peers(counts: list[int], seconds: float, warmup_s: float) -> dict:
    """This service and LangGraph, back to back at each agent count."""
    out = {}
    for n in counts:
        progress(f"{n} agents: this service")
        ours = measure_agentsvc(n, seconds, warmup_s=warmup_s)
        progress(f"{n} agents: langgraph")
        theirs = asyncio.run(measure_langgraph(n, seconds))
        out[n] = {"agentsvc": ours, "langgraph": theirs,
                  "ratio": ratio(ours["steps_per_s"], theirs["steps_per_s"])}
        if n == 1:
            out[n]["ms_per_step"] = {"agentsvc": ms_per_step(ours), "langgraph": ms_per_step(theirs)}
    return out


def floor(quick: bool) -> dict:
    from bench import bench_lance_floor
    return bench_lance_floor.run(steps=20 if quick else 300, batches=2 if quick else 20, quick=quick)


def tools(seconds: float, warmup_s: float) -> dict:
    from bench import bench_tools
    return bench_tools.single(seconds, warmup_s)


def traced(counts: list[int], seconds: float, warmup_s: float, quick: bool = False) -> dict | None:
    """Steps/s of the largest agent count with the tracing observer off and on,
    alternating, with Phoenix receiving the spans (None when Phoenix is not
    installed).  Two receivers take turns: one at the workers' CPU priority
    (its CPU for thousands of spans a second comes from the same two cores),
    one niced (``nice -n 19``: standing for a receiver on another machine, as
    deploy.md advises; the cost left is the service's own).  The verdict's
    figure is the second; both are printed.  ``quick``: one round, one receiver
    at the workers' priority (the smoke test's)."""
    import tempfile

    from bench import bench_trace_handoff
    from bench.bench_step_throughput import measure
    from tests.servers import Phoenix

    n = counts[-1]
    with tempfile.TemporaryDirectory() as root:
        try:
            # Quick (the smoke test, often on a loaded machine): one receiver at normal
            # priority; a niced Phoenix there took over 240 s to start (a whole run, load 17).
            receivers = {"same priority": Phoenix(root)} if quick else \
                {"niced": Phoenix(root, nice=19), "same priority": Phoenix(root)}
        except BaseException as exc:  # noqa: BLE001 - require() skips through pytest when it is absent
            if type(exc).__name__ != "Skipped":
                raise
            progress(f"tracing: {exc}; not measured")
            return None
        try:
            runs, rounds = [], 1 if quick else 3
            for i in range(rounds):
                for label in ["off", *receivers]:
                    progress(f"tracing round {i + 1}/{rounds}: {n} agents, traces {label}")
                    url = receivers[label].url if label != "off" else None
                    runs.append({"label": label, **measure(n, seconds, warmup_s, traces=url)})
        finally:
            for receiver in receivers.values():
                receiver.stop()

    progress("tracing: the worker's own CPU per step for the hand-off (bench_trace_handoff)")
    handoff = bench_trace_handoff.run(5_000 if quick else 50_000)

    def figures(label):
        return [r["steps_per_s"] for r in runs if r["label"] == label]

    def cost(label):
        off, on = figures("off"), figures(label)
        if not on:
            return None
        return round((1 - (sum(on) / len(on)) / (sum(off) / len(off))) * 100, 1) if sum(off) else None

    def traced_runs(label, key):
        return [r["traces"][key] for r in runs if r["label"] == label]
    primary = "same priority" if quick else "niced"  # the verdict's receiver
    return {"agents": n, "steps_per_s_off": figures("off"), "receiver": primary,
            "steps_per_s_on": figures(primary), "steps_per_s_on_receiver_same_priority": figures("same priority"),
            "cost_percent": cost(primary), "cost_percent_receiver_same_priority": cost("same priority"),
            "cpu_ms_per_step_off": [r["cpu_ms_per_step"] for r in runs if r["label"] == "off"],
            "cpu_ms_per_step_on": [r["cpu_ms_per_step"] for r in runs if r["label"] != "off"],
            "export_process_cpu_ms_per_step": traced_runs("niced", "export_process_cpu_ms_per_step")
            + traced_runs("same priority", "export_process_cpu_ms_per_step"),
            "worker_cpu_us_per_step": handoff["worker_cpu_us_per_step"],
            "spans_ended_in_window": traced_runs(primary, "spans_ended_in_window"),
            "spans_ended_by_close": traced_runs(primary, "spans_ended_by_close"),
            "spans_dropped_in_window": traced_runs(primary, "spans_dropped_in_window")}


def optional(module: str, **kwargs) -> dict | None:
    """``bench.<module>.run(...)`` with those of ``kwargs`` it takes, or None while
    that benchmark is not in the tree."""
    try:
        bench = importlib.import_module(f"bench.{module}")
    except ModuleNotFoundError as exc:
        if exc.name != f"bench.{module}":
            raise
        progress(f"bench/{module}.py is not in the tree: not measured")
        return None
    accepted = inspect.signature(bench.run).parameters
    return bench.run(**{k: v for k, v in kwargs.items() if k in accepted})


def find(result, keys: tuple[str, ...]):
    """The first number under one of ``keys`` anywhere in a nested result (the
    other helpers' benchmarks name their figures; this reads them by name)."""
    if isinstance(result, dict):
        for key in keys:
            if isinstance(result.get(key), (int, float)) and not isinstance(result.get(key), bool):
                return result[key]
        for value in result.values():
            found = find(value, keys)
            if found is not None:
                return found
    return None


ADOPTION_KEYS = ("all_stepped_s", "all_stepping_s", "to_all_stepping_s", "stepping_s", "seconds_to_all_stepping",
                 "all_adopted_s")
HISTORY_KEYS = ("disk_over_new", "disk_over_new_information", "disk_ratio", "ratio")


# ---- verdicts -------------------------------------------------------------------


def figures_and_verdicts(parts: dict, adoption_sessions: int, quick: bool = False) -> tuple[dict, dict]:
    """The figure of each target as measured (None when not, or not at the
    target's size), and its verdict."""
    p = parts.get("peers") or {}
    one, hundred, thousand = p.get(1), p.get(100), p.get(1000)
    ms = (one or {}).get("ms_per_step", {})
    fig = {
        "one_agent_vs_langgraph": ratio(ms.get("agentsvc"), ms.get("langgraph")),
        "one_agent_ms": ms.get("agentsvc"),
        "agents_100_steps_per_s": hundred["agentsvc"]["steps_per_s"] if hundred else None,
        "agents_1000_steps_per_s": thousand["agentsvc"]["steps_per_s"] if thousand else None,
        "agents_1000_vs_langgraph": thousand["ratio"] if thousand else None,
        "tool_step_ratio": (parts.get("tools") or {}).get("ratio_p50"),
        "adoption_s": find(parts.get("adoption"), ADOPTION_KEYS) if adoption_sessions == 10_000 else None,
        "history_disk_ratio": None if quick else find(parts.get("history"), HISTORY_KEYS),
        "tracing_cost_percent": (parts.get("tracing") or {}).get("cost_percent")
        if (parts.get("tracing") or {}).get("agents") == 1000 else None,
    }
    bounds = {"one_agent_vs_langgraph": lambda v: v <= 1.0, "one_agent_ms": lambda v: v <= 3.0,
              "agents_100_steps_per_s": lambda v: v >= 5000, "agents_1000_steps_per_s": lambda v: v >= 10_000,
              "agents_1000_vs_langgraph": lambda v: v >= 20, "tool_step_ratio": lambda v: v <= 1.5,
              "adoption_s": lambda v: v <= 10, "history_disk_ratio": lambda v: v <= 3,
              "tracing_cost_percent": lambda v: v <= 5}
    return fig, {k: verdict(None if fig[k] is None else bounds[k](fig[k])) for k in TARGETS}


def langgraph_beside(parts: dict) -> dict:
    """LangGraph's figure in the same run, for the targets that have one."""
    p = parts.get("peers") or {}
    return {"one_agent_ms": (p.get(1) or {}).get("ms_per_step", {}).get("langgraph"),
            "agents_100_steps_per_s": (p.get(100) or {}).get("langgraph", {}).get("steps_per_s"),
            "agents_1000_steps_per_s": (p.get(1000) or {}).get("langgraph", {}).get("steps_per_s")}


def table(result: dict) -> str:
    """The verdicts as people read them (stderr)."""
    lines = [f"{'figure':<62} {'target':<24} {'measured':>10} {'LangGraph':>10}  verdict"]
    for key, (what, bound) in TARGETS.items():
        lines.append(f"{what:<62} {bound:<24} {_fmt(result['figures'][key]):>10} "
                     f"{_fmt(result['langgraph'].get(key)):>10}  {result['verdict'][key]}")
    fl = result["parts"].get("floor")
    if fl:
        f = fl["floor"]
        lines.append(f"LanceDB alone: {f['one_agent_ms_per_step_add_only']} ms a single-row append as the store "
                     f"appends (LanceDB's add: {f.get('one_agent_ms_per_step_lancedb_add')} ms), "
                     f"{f['one_agent_ms_per_step_with_snapshot_concurrent']} ms with the snapshot upsert beside it; "
                     f"{f['steps_per_s_100_rows_per_commit']} / {f['steps_per_s_1000_rows_per_commit']} steps/s "
                     f"at 100 / 1,000 rows a commit (steps and snapshots)")
    return "\n".join(lines)


def head_commit() -> str | None:
    """The commit measured (taken at the start: others may commit during a run);
    a tree that is not a git checkout (an exported commit) has none."""
    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           cwd=os.path.dirname(os.path.abspath(__file__)))
    return found.stdout.strip() or None


def markdown(result: dict) -> str:
    """The rows of BENCHMARKS.md's "Current figures" table, to paste over the old ones."""
    made = result["machine"]
    when = f"{made['date'][:10]}, {result['commit'] or '?'}, load {made['loadavg_1m_at_start']}"
    rows = [f"| {what} | {bound} | {_fmt(result['figures'][key])} ({when}) | "
            f"{_fmt(result['langgraph'].get(key))} | {result['verdict'][key]} |"
            for key, (what, bound) in TARGETS.items()]
    floor = (result["parts"].get("floor") or {}).get("floor")
    if floor:
        rows.insert(2, f"| LanceDB alone, same writes: 1 agent, ms per step (append; append ‖ snapshot upsert; "
                       f"LanceDB's add) | floor | "
                       f"{_fmt(floor['one_agent_ms_per_step_add_only'])}; "
                       f"{_fmt(floor['one_agent_ms_per_step_with_snapshot_concurrent'])}; "
                       f"{_fmt(floor.get('one_agent_ms_per_step_lancedb_add'))} ({when}) | — | — |")
        rows.insert(6, f"| LanceDB alone: steps/s at 100 / 1,000 rows a commit (add ‖ snapshot upsert) | floor | "
                       f"{_fmt(floor['steps_per_s_100_rows_per_commit'])} / "
                       f"{_fmt(floor['steps_per_s_1000_rows_per_commit'])} ({when}) | — | — |")
    return "\n".join(rows)


def _fmt(value) -> str:
    return "—" if value is None else f"{value:g}"


# ---- driver ---------------------------------------------------------------------


def run(seconds: float = 10.0, warmup_s: float = 2.0, counts=(1, 100, 1000), skip=("tracing",),
        adoption_sessions: int = 10_000, quick: bool = False) -> dict:
    result = {"benchmark": "guard", "machine": machine(), "commit": head_commit(), "seconds": seconds,
              "skipped": sorted(skip)}
    parts = {}
    if "peers" not in skip:
        parts["peers"] = peers(list(counts), seconds, warmup_s)
    if "floor" not in skip:
        progress("LanceDB's floor (bench_lance_floor)")
        parts["floor"] = floor(quick)
    if "tools" not in skip:
        parts["tools"] = tools(max(seconds, 3.0), warmup_s)  # 1 s may hold no whole tool cycle
    if "adoption" not in skip:
        progress(f"restart with {adoption_sessions} orphaned sessions (bench_adoption)")
        parts["adoption"] = optional("bench_adoption", sessions=adoption_sessions)
    if "history" not in skip:
        progress("history with growing state (bench_history)")
        parts["history"] = optional("bench_history", **({"quick": True} if quick else {}))
    if "tracing" not in skip:
        progress("tracing off and on, alternating, Phoenix receiving")
        parts["tracing"] = traced(list(counts), seconds, warmup_s, quick=quick)
    result["figures"], result["verdict"] = figures_and_verdicts(parts, adoption_sessions, quick)
    result["langgraph"] = langgraph_beside(parts)
    result["targets"] = {k: bound for k, (_, bound) in TARGETS.items()}
    result["parts"] = {k: ({str(n): v for n, v in part.items()} if k == "peers" else part)
                       for k, part in parts.items()}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--seconds", type=float, default=10.0, help="measuring window of each run")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--skip", default="", help=f"comma-separated parts to leave out: {','.join(PARTS)}")
    parser.add_argument("--adoption-sessions", type=int, default=10_000)
    parser.add_argument("--tracing", action="store_true",
                        help="also measure tracing's cost (starts Arize Phoenix from .venv-phoenix)")
    args = parser.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s} | (set() if args.tracing else {"tracing"})
    if skip - set(PARTS):
        parser.error(f"unknown parts {sorted(skip - set(PARTS))}; known: {','.join(PARTS)}")
    counts = (1, 100, 1000)
    if args.quick:  # figures at other sizes than the targets': their verdicts say "not measured"
        args.seconds, args.warmup, args.adoption_sessions, counts = 1.0, 0.5, min(args.adoption_sessions, 50), (1, 5)
    result = run(args.seconds, args.warmup, counts, skip, args.adoption_sessions, quick=args.quick)
    print(table(result), file=sys.stderr)
    print(markdown(result), file=sys.stderr, flush=True)
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
