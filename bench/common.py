"""Helpers shared by the benchmarks: statistics, output, machine facts, and the
two ways of running the service (real subprocesses, or AgentService in-process).

``Bucket`` is a fresh bucket on the suite's SeaweedFS (tests/servers.py:
seaweedfs_s3) with the settings the service needs to run on it.

Every benchmark prints exactly one JSON object on stdout so its figures can be
diffed and checked by tests/service/test_bench_smoke.py; progress goes to stderr.
"""
import asyncio
import json
import os
import platform
import re
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from monikers import default_registry
from monikers.frame import FrameIn, FrameOut, Moniker, StepContext


# ---- statistics and output --------------------------------------------------

def pct(values, q: float) -> float | None:
    """The q-th percentile (0..100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summary(values_ms) -> dict:
    """n, p50, p99, max of a list of milliseconds, rounded for reading."""
    values_ms = list(values_ms)
    r = lambda v: None if v is None else round(v, 2)  # noqa: E731
    return {"n": len(values_ms), "p50_ms": r(pct(values_ms, 50)), "p99_ms": r(pct(values_ms, 99)),
            "max_ms": r(max(values_ms) if values_ms else None),
            "mean_ms": r(statistics.fmean(values_ms) if values_ms else None)}


def timed_ms(fn, *args, **kwargs) -> float:
    started = time.perf_counter()
    fn(*args, **kwargs)
    return (time.perf_counter() - started) * 1000


def machine() -> dict:
    """Where and when the figures were taken (the machine is shared and noisy)."""
    load = os.getloadavg()
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "cpus": os.cpu_count(),
            "python": platform.python_version(), "platform": platform.platform(),
            "loadavg_1m_at_start": round(load[0], 2)}


def emit(result: dict) -> None:
    print(json.dumps(result, sort_keys=False))
    sys.stdout.flush()


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def minus(after: dict, before: dict) -> dict:
    """Two readings of counters by name, subtracted (a name missing counts 0)."""
    return {k: after.get(k, 0) - before.get(k, 0) for k in sorted(set(after) | set(before))}


def scaled(counts: dict, factor: float, digits: int = 3) -> dict:
    return {k: round(v * factor, digits) for k, v in counts.items()}


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass  # removed by cleanup while we walked
    return total


# ---- a bucket on SeaweedFS ----------------------------------------------------

S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


class Bucket:
    """A fresh bucket on the server: its LanceDB URI, storage options, the
    environment agents.py and app.py need to use it, the requests SeaweedFS has
    counted for it, and the bytes its objects hold.  Shared by bench_s3 and
    bench_soak's ``--object-storage``."""

    def __init__(self, server, endpoint: str):
        from tests.servers import s3_client

        self.server, self.endpoint = server, endpoint
        self.name = f"bench-{uuid.uuid4().hex[:12]}"
        s3_client(endpoint).create_bucket(Bucket=self.name)
        self.uri = f"s3://{self.name}/agents"
        self.options = {"aws_endpoint": endpoint, "aws_region": "us-east-1", "aws_access_key_id": "testing",
                        "aws_secret_access_key": "testing", "allow_http": "true"}

    def service_env(self) -> dict:
        """agents.py's and app.py's environment for this bucket (tests.harness.Service's env)."""
        return {**S3_ENV, "AGENTSVC_DB_URI": self.uri, "AGENTSVC_STORAGE_OPTIONS": json.dumps(self.options)}

    def requests(self) -> dict[str, int]:
        return self.server.requests(self.name)

    def object_bytes(self) -> int:
        """The sizes of every object in the bucket, summed (LIST requests of its
        own: count them outside a window that counts the service's)."""
        from tests.servers import s3_client

        pages = s3_client(self.endpoint).get_paginator("list_objects_v2").paginate(Bucket=self.name)
        return sum(obj["Size"] for page in pages for obj in page.get("Contents", []))


# ---- a no-op moniker and an in-process service ------------------------------

async def noop_step(frame: FrameIn, ctx: StepContext) -> FrameOut:
    """The cheapest valid step: what is left is the service's own overhead."""
    n = int(frame.state.get("n", 0)) + 1
    return FrameOut(step=frame.step, next_step=str(n), state={"n": n})


NOOP = Moniker("noop", noop_step, "Benchmark: does nothing, never done.")


def registry_with_noop():
    registry = default_registry()
    registry.register(NOOP)
    return registry


class CommitTimer:
    """Wraps a Persistence's step and snapshot writes to time how long each waits
    for its group commit, without editing runtime/ (instance attributes shadow
    the methods that sessions and handlers look up on the shared object)."""

    def __init__(self, persist):
        self.step_ms: list[float] = []
        self.snapshot_ms: list[float] = []
        self.steps_done = 0
        self._wrap(persist, "append_step", self.step_ms, count=True)
        self._wrap(persist, "save_snapshot", self.snapshot_ms)

    def _wrap(self, persist, name, sink, count=False):
        original = getattr(persist, name)

        async def timed(row):
            started = time.perf_counter()
            out = await original(row)
            sink.append((time.perf_counter() - started) * 1000)
            if count:
                self.steps_done += 1
            return out
        setattr(persist, name, timed)

    def reset(self) -> None:
        self.step_ms.clear()
        self.snapshot_ms.clear()
        self.steps_done = 0


def time_calls(obj, names, sinks: dict) -> None:
    """Shadow ``obj``'s async methods ``names`` with timed versions appending
    milliseconds to ``sinks[name]`` (a bench-side probe; runtime/ stays as is)."""
    for name in names:
        original = getattr(obj, name)
        sink = sinks.setdefault(name, [])

        async def timed(*args, _original=original, _sink=sink, **kwargs):
            started = time.perf_counter()
            try:
                return await _original(*args, **kwargs)
            finally:
                _sink.append((time.perf_counter() - started) * 1000)
        setattr(obj, name, timed)


def enqueue_creates(store, n: int, moniker: str, config: dict, threads: int = 32) -> list[dict]:
    """Create n sessions through the store's action queue.  Many threads enqueue
    at once so the writer's group commit batches them (one commit per enqueue
    would take ~5 ms each)."""
    from ulid import ULID

    def one(i):
        return store.actions.enqueue("create", agent_id=str(ULID()), session_id=str(ULID()),
                                     payload={"moniker": moniker, "task": f"bench {i}", "config": config})
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(n)))


async def wait_until(predicate, timeout: float, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
    return value


def run_in_process(store, scenario, registry=None, **options):
    """Run ``await scenario(service)`` while an AgentService polls ``store``,
    with maintenance as agents.py runs it (tests.harness.run_in_process)."""
    from tests.harness import run_in_process as run_service

    options.setdefault("maintainer", new_maintainer(store))
    return run_service(store, scenario, monikers=registry or registry_with_noop(), **options)


# ---- the agents.py log ----------------------------------------------------------

_APPLIED = re.compile(r"action (\S+) (\w+) (done|failed) in ([\d.]+) ms")


def handler_ms_from_logs(log_dir: str) -> dict[str, float]:
    """action id -> handler + finish time in ms, from the dispatcher's log line
    ``action <id> <type> done in <ms> ms`` in agents.py's logs."""
    out = {}
    for name in os.listdir(log_dir):
        if name.startswith("agents.py"):
            with open(os.path.join(log_dir, name), errors="replace") as f:
                for line in f:
                    m = _APPLIED.search(line)
                    if m:
                        out[m.group(1)] = float(m.group(4))
    return out


def maintenance_module():
    """store.maintenance if the lead's background maintenance has landed, else None."""
    try:
        import store.maintenance as maintenance
        return maintenance
    except ImportError:
        return None


def table_health(store) -> dict:
    """Per table: rows, fragments, versions, indices: what grows when storage is
    not maintained (each commit adds a version and a fragment until compaction and cleanup run)."""
    from store.query import retrying

    out = {}
    for name, table in store.tables.items():
        try:  # a concurrent cleanup can remove a file under us: read the newest version again
            stats = retrying(table, table.stats)
            out[name] = {"rows": stats["num_rows"], "fragments": stats["fragment_stats"]["num_fragments"],
                         "versions": len(retrying(table, table.list_versions)), "indices": stats["num_indices"],
                         "bytes": stats["total_bytes"]}
        except Exception as exc:  # still failing: note it, keep measuring
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    return out


def run_maintenance(store) -> dict:
    """One full pass of the store's own maintenance (indexes, then compaction and
    cleanup of every table) if store/maintenance.py exists; the bench never
    invents its own."""
    maintenance = maintenance_module()
    if maintenance is None or not hasattr(maintenance, "Maintainer"):
        return {"ran": False, "why": "store/maintenance.py (Maintainer) not in the tree"}
    started = time.perf_counter()
    if hasattr(maintenance, "ensure_indexes"):
        maintenance.ensure_indexes(store.tables)
    maintainer = maintenance.Maintainer(store)
    results = [maintainer.optimize(name) for name in store.tables]
    return {"ran": True, "seconds": round(time.perf_counter() - started, 2),
            "ok": all(r.get("ok") for r in results)}


def new_maintainer(store):
    """A Maintainer as agents.py builds one, or None before it landed."""
    maintenance = maintenance_module()
    return maintenance.Maintainer(store) if maintenance and hasattr(maintenance, "Maintainer") else None
