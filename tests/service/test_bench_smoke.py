"""Every benchmark runs in its --quick mode and prints the JSON keys BENCHMARKS.md
documents, so the benchmarks cannot rot unnoticed.  Each runs as its own
process, exactly as its documented one command, two at a time."""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

# The first test's setup runs every benchmark (the module fixture): a dozen
# subprocesses, two at a time, each allowed 240 s, do not fit the suite's 300 s.
pytestmark = pytest.mark.timeout(900)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EXPECTED = {
    "bench_dispatch_latency": ["machine", "idle", "busy", "busy_steps_per_s", "in_process", "target"],
    "bench_step_throughput": ["machine", "runs", "target"],
    "bench_query_latency": ["machine", "runs", "target"],
    "bench_soak": ["machine", "series", "verdict"],
    "bench_idle": ["machine", "idle_cpu_percent", "idle_agents", "target"],
    "bench_peers": ["machine", "runs", "per_step_ms_single_agent"],
    "bench_tools": ["machine", "single", "many", "target"],
    "bench_memory": ["machine", "cache_mb", "samples"],
    "bench_search": ["machine", "latency", "refresh", "cpu", "target"],
    "bench_ask_user": ["machine", "sessions", "answer_to_next_step", "ratio_p50_ask_user_over_human"],
    "bench_lance_floor": ["machine", "lone", "with_snapshot", "batched", "encode", "floor"],
    "bench_guard": ["machine", "figures", "verdict", "langgraph", "targets", "parts"],
    "bench_adoption": ["machine", "run", "target"],
    "bench_history": ["machine", "steps", "disk_over_new", "delta", "whole", "target"],
    "bench_processes": ["machine", "runs", "ratio", "target"],
    "bench_s3": ["machine", "steps", "prices_per_1k"],
}


def _quick(name: str) -> tuple[int, str, str]:
    proc = subprocess.Popen([sys.executable, "-m", f"bench.{name}", "--quick"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    return proc.returncode, stdout, stderr


@pytest.fixture(scope="module")
def quick_runs():
    """name -> (returncode, stdout, stderr) of ``python -m bench.<name> --quick``.
    Two at a time: more would have a dozen service processes starting at once
    on a 2-core machine, and their start-up would time out."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(EXPECTED, pool.map(_quick, EXPECTED)))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_benchmark_quick_mode_prints_its_figures(name, quick_runs):
    code, stdout, stderr = quick_runs[name]
    assert code == 0, stderr[-3000:]
    result = json.loads(stdout.strip().splitlines()[-1])
    missing = [key for key in EXPECTED[name] if key not in result]
    assert not missing, f"{name} lacks {missing}: {result}"
    if "runs" in result:
        assert result["runs"] and all(run for run in result["runs"])
    if name == "bench_step_throughput":
        assert result["runs"][0]["steps_per_s"] > 0 and result["runs"][0]["step_commit_wait"]["n"] > 0
    if name == "bench_dispatch_latency":
        assert result["busy"]["dispatch"]["n"] > 0, "no handler times found in agents.py's log"
    if name == "bench_soak":
        assert result["series"] and "within_1_5x" in result["verdict"]
    if name == "bench_tools":
        # Figures, not speed: on a loaded machine a quick window may hold no whole tool cycle.
        assert "ratio_p50" in result["single"] and result["single"]["tool"]["steps"] > 0
        assert result["many"]["tool"]["tool_calls_per_s"] > 0
    if name == "bench_search":
        assert result["latency"]["search_http"]["n"] > 0 and result["refresh"]["refreshed"] == ["agent_steps"]
        assert result["cpu"]["with_fts"]["steps"] == result["cpu"]["without_fts"]["steps"] > 0
    if name == "bench_processes":  # both runs stepped, the second on two workers
        assert all(run["steps"] > 0 for run in result["runs"]) and len(result["runs"][1]["cpu_cores_per_process"]) == 2
    if name == "bench_lance_floor":
        assert result["lone"]["store"]["per_step"]["n"] > 0 and result["floor"]["steps_per_s_1000_rows_per_commit"] > 0
    if name == "bench_guard":
        assert set(result["verdict"].values()) <= {"pass", "fail", "not measured"}
        assert result["figures"]["one_agent_ms"] > 0 and result["langgraph"]["one_agent_ms"] > 0
    if name == "bench_peers":
        run = result["runs"][0]
        assert all(run[k]["steps_per_s"] > 0 for k in ("agentsvc", "langgraph", "naive"))


def test_the_guards_tracing_part_measures_both_ways_with_phoenix_receiving():
    """``bench_guard --tracing`` (its documented command, quick and alone): runs
    with traces off and on (one round when quick), and the "on" run's export
    process ended spans that Phoenix (started by the bench) was sent.  Skipped where Phoenix is not
    installed (scripts/test_deps/phoenix.sh), like the Phoenix tests."""
    if not os.access(os.path.join(ROOT, ".venv-phoenix", "bin", "phoenix"), os.X_OK):
        pytest.skip("Phoenix is not installed (scripts/test_deps/phoenix.sh)")
    proc = subprocess.run([sys.executable, "-m", "bench.bench_guard", "--quick", "--tracing",
                           "--skip", "peers,floor,tools,adoption,history"], cwd=ROOT, text=True,
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    part = json.loads(proc.stdout.strip().splitlines()[-1])["parts"]["tracing"]
    assert len(part["steps_per_s_off"]) == len(part["steps_per_s_on"]) == 1
    assert all(n > 0 for n in part["steps_per_s_off"] + part["steps_per_s_on"])
    # The export process runs at the lowest priority: on a loaded machine it may end
    # none inside a one-second window, but it builds what it was handed by the close.
    assert all(n > 0 for n in part["spans_ended_by_close"]), (part, proc.stderr[-3000:])
    assert isinstance(part["cost_percent"], float) and part["worker_cpu_us_per_step"] > 0
