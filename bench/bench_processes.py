"""A worker per core: 1,000 no-op agents on one agents.py process, then on
``agents.py --processes N``, against one local data dir, in one run.

    python -m bench.bench_processes [--quick] [--agents 1000] [--processes 2] [--seconds 10]

Each run starts the real agents.py (``--events-url off``: no app.py) on a
fresh data dir with the bench's ``noop`` moniker (this module is named in
``AGENTSVC_PLUGINS``), waits until every worker polls, enqueues the creates
straight into the store's queue, waits until every session has stepped, lets
it warm up, and counts the step rows persisted in a fixed window
(``agent_steps``' row count before and after).  It also reports how the
sessions spread between the workers (``agent_state.owner``), each process's
CPU over the window (psutil: which core is the limit), and the lines of the
workers' logs that speak of commit conflicts or retries.

``ratio`` is steps/s on N processes over steps/s on one.  Target: ≥ 1.6 with
N = 2 on this 2-core machine (issue 41).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

from bench.common import NOOP

MONIKERS = (NOOP,)  # what agents.py loads from this module, named in AGENTSVC_PLUGINS (domain/plugin_registry.py)
TARGET_RATIO = 1.6
PLUGIN = "bench.bench_processes"
# What the workers' logs say of two writers on the same tables (store/writer.py, store/maintenance.py).
LOG_COUNTS = {"commit_conflict_retries": re.compile(r"commit conflict on \w+ \(\w+, attempt \d+"),
              "compaction_preempted": re.compile(r"Compaction commit failed"),
              "other_conflict_or_retry": re.compile(r"conflict|retry", re.IGNORECASE)}
COMMIT_METRICS = ("agentsvc_commits_total", "agentsvc_committed_writes_total", "agentsvc_commit_seconds_total")


def start_agents(data_dir: str, processes: int, log_path: str, metrics_port: int) -> subprocess.Popen:
    from tests.harness import ROOT
    plugins = ",".join(p for p in (os.environ.get("AGENTSVC_PLUGINS", ""), PLUGIN) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "AGENTSVC_PLUGINS": plugins}
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "agents.py"), "--data-dir", data_dir,
                             "--processes", str(processes), "--events-url", "off",
                             "--metrics-port", str(metrics_port)], cwd=ROOT, env=env,
                            stdout=open(log_path, "w"), stderr=subprocess.STDOUT)


def commit_figures(ports: list[int]) -> list[dict]:
    """Each worker's commit counters (its /metrics: runtime/worker/metrics.py)."""
    import requests
    out = []
    for port in ports:
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        out.append({name: float(line.split()[-1]) for line in text.splitlines() for name in COMMIT_METRICS
                    if line.startswith(name + " ")})
    return out


def log_counts(log: str) -> dict:
    counts = {}
    for line in log.splitlines():
        for name, pattern in LOG_COUNTS.items():
            if pattern.search(line):
                counts[name] = counts.get(name, 0) + 1
                break
    return counts


def free_port_run(n: int) -> int:
    """A port p with p .. p+n-1 free (worker i serves --metrics-port + i)."""
    import socket
    from tests.harness import free_port
    while True:
        base = free_port()
        try:
            for i in range(1, n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue


def owners(store) -> dict[str, int]:
    from store import query
    counts: dict[str, int] = {}
    for row in query.rows(store.states.table, "agent_state", None, columns=["owner"]):
        counts[row["owner"]] = counts.get(row["owner"], 0) + 1
    return counts


def worker_processes(proc: subprocess.Popen):
    """The processes that run sessions: the supervisor's children, or agents.py itself."""
    import psutil
    top = psutil.Process(proc.pid)
    return top.children() or [top]


def measure(processes: int, agents: int, seconds: float, warmup_s: float, keep_logs: str | None = None) -> dict:
    from bench.common import enqueue_creates, progress
    from store import Store
    from tests.harness import wait_for

    with tempfile.TemporaryDirectory() as root:
        data, log_path = f"{root}/data", f"{root}/agents.log"
        base_port = free_port_run(processes)
        ports = [base_port + i for i in range(processes)]
        proc = start_agents(data, processes, log_path, base_port)
        store = None
        try:
            def started():  # each worker logs it once it polls the queue (runtime/worker/service.py)
                with open(log_path) as f:
                    return f.read().count("polling for actions") >= processes or proc.poll() is not None
            wait_for(started, timeout=240, interval=0.2, what=f"{processes} workers polling")
            if proc.poll() is not None:
                raise RuntimeError(f"agents.py exited with {proc.returncode}:\n{open(log_path).read()[-3000:]}")
            store = Store(f"{data}/lancedb")
            # ... and once their heartbeats say so, which is what each worker's share of the creates is
            # computed from (before that, the first worker alone would take them all)
            wait_for(lambda: sum(bool(w.get("polling")) for w in store.workers.all()) >= processes, timeout=60,
                     interval=0.2, what=f"{processes} heartbeats saying they poll")
            progress(f"{processes} process(es): {agents} creates")
            started = time.perf_counter()
            enqueue_creates(store, agents, "noop", {"interval_s": 0})
            wait_for(lambda: sum(owners(store).values()) >= agents and store.steps.count() >= agents,
                     timeout=600, interval=0.5, what=f"{agents} sessions stepping")
            sessions_started_s = time.perf_counter() - started
            time.sleep(warmup_s)
            workers = worker_processes(proc)
            cpu0, commits0 = [w.cpu_times() for w in workers], commit_figures(ports)
            steps0, t0 = store.steps.count(), time.perf_counter()
            time.sleep(seconds)
            steps1, elapsed = store.steps.count(), time.perf_counter() - t0
            cpu1, commits1 = [w.cpu_times() for w in workers], commit_figures(ports)
            spread = owners(store)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                proc.kill()
            if store is not None:
                store.close()
        with open(log_path) as f:
            log = f.read()
        if keep_logs:
            os.makedirs(keep_logs, exist_ok=True)
            with open(os.path.join(keep_logs, f"agents-{processes}.log"), "w") as f:
                f.write(log)
    cores = [round(((b.user + b.system) - (a.user + a.system)) / elapsed, 2) for a, b in zip(cpu0, cpu1)]
    commits = [{"commits_per_s": round((b[COMMIT_METRICS[0]] - a[COMMIT_METRICS[0]]) / elapsed, 1),
                "writes_per_commit": round((b[COMMIT_METRICS[1]] - a[COMMIT_METRICS[1]])
                                           / max(b[COMMIT_METRICS[0]] - a[COMMIT_METRICS[0]], 1), 1),
                "commit_busy_fraction": round((b[COMMIT_METRICS[2]] - a[COMMIT_METRICS[2]]) / elapsed, 2)}
               for a, b in zip(commits0, commits1)]
    return {"processes": processes, "agents": agents, "steps": steps1 - steps0, "seconds": round(elapsed, 2),
            "steps_per_s": round((steps1 - steps0) / elapsed, 1), "sessions_started_s": round(sessions_started_s, 2),
            "sessions_per_worker": dict(sorted(spread.items())), "cpu_cores_per_process": cores,
            "cpu_ms_per_step": round(sum(cores) * 1000 / max((steps1 - steps0) / elapsed, 0.1), 3),
            "commits_per_process": commits, "log_counts_whole_run": log_counts(log)}


def run(agents: int, processes: int, seconds: float, warmup_s: float, keep_logs: str | None = None) -> dict:
    from bench.common import machine, progress
    one = measure(1, agents, seconds, warmup_s, keep_logs)
    progress(f"1 process: {one['steps_per_s']} steps/s")
    many = measure(processes, agents, seconds, warmup_s, keep_logs)
    progress(f"{processes} processes: {many['steps_per_s']} steps/s")
    ratio = round(many["steps_per_s"] / max(one["steps_per_s"], 0.1), 2)
    return {"benchmark": "processes", "machine": machine(), "runs": [one, many], "ratio": ratio,
            "target": {"ratio": TARGET_RATIO, "processes": processes, "agents": agents,
                       "met": ratio >= TARGET_RATIO}}


def main(argv=None) -> int:
    from bench.common import emit
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=2, help="worker processes of the second run")
    parser.add_argument("--seconds", type=float, default=10.0, help="the counting window")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--keep-logs", metavar="DIR", help="keep the agents.py log of each run in DIR")
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.seconds, args.warmup = 4, 1.0, 0.5
    emit(run(args.agents, args.processes, args.seconds, args.warmup, args.keep_logs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
