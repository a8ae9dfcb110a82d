"""How the store is holding up, for ``GET /api/health`` and app.py's ``/metrics``.

Two sources: the tables' own shape (fragments, versions, rows, bytes), read
here, and what each agents.py worker says of its maintenance runs in its
heartbeat row (app.py runs no maintenance itself).  A table "falls behind"
when its fragments or versions pass the thresholds that maintenance keeps them
under (:mod:`store.maintenance`), or when a worker's last run of it was
abandoned.  Reading every table's shape costs a few milliseconds a table (and
seconds on a loaded machine), and ``/api/health`` is a liveness probe that must
answer at once: the probe returns the last report with its age, and a
background thread rebuilds it when it is older than ``ttl_s`` (only when asked
for: an unprobed app.py reads nothing).
"""
import logging
import threading
import time

from store.maintenance import WARN_FRAGMENTS, WARN_VERSIONS


log = logging.getLogger("api.storage_health")


class StorageHealth:
    def __init__(self, store, ttl_s: float = 5.0):
        self.store = store
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._report: dict | None = None
        self._at = 0.0
        self._thread: threading.Thread | None = None

    def report(self) -> dict | None:
        """The latest report with its age in seconds, or None until the first is built.
        A report older than ``ttl_s`` is rebuilt in the background, once at a
        time, only when asked for: on object storage a rebuild is a few hundred
        requests (every table's stats and versions), which a thread rebuilding
        every 5 s forever paid ~110,000 times an hour with nobody asking
        (bench/bench_s3.py)."""
        with self._lock:
            stale = self._report is None or time.monotonic() - self._at > self.ttl_s
            if stale and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._refresh, name="storage-health", daemon=True)
                self._thread.start()
            if self._report is None:
                return None
            return {**self._report, "age_s": round(time.monotonic() - self._at, 1)}

    def _refresh(self) -> None:
        try:
            report = self._build()
            with self._lock:
                self._report, self._at = report, time.monotonic()
        except Exception as exc:  # the store may be briefly unreachable; the next probe tries again
            log.warning("storage health report failed: %s", exc)

    def _build(self) -> dict:
        tables = self.store.table_shapes()
        maintenance = {w["worker_id"]: w.get("maintenance") or {} for w in self.store.workers.all()
                       if w.get("status") == "running"}
        warnings = []
        for name, shape in tables.items():
            if shape["fragments"] > WARN_FRAGMENTS:
                warnings.append(f"{name}: {shape['fragments']} fragments (maintenance keeps them under "
                                f"{WARN_FRAGMENTS})")
            if shape["versions"] > WARN_VERSIONS:
                warnings.append(f"{name}: {shape['versions']} versions (maintenance keeps them under "
                                f"{WARN_VERSIONS})")
        for worker_id, runs in maintenance.items():
            for name, run in runs.items():
                if run.get("last_error") and run.get("last_run_at") != run.get("last_ok_at"):
                    warnings.append(f"{name}: last maintenance by {worker_id} failed: {run['last_error'][:200]}")
        return {"status": "behind" if warnings else "ok", "warnings": warnings, "tables": tables,
                "maintenance": maintenance, "lance_cache_bytes": self.store.cache_bytes()}


class StorageCollector:
    """Prometheus gauges of the tables' shapes, from the same cached report."""

    def __init__(self, health: StorageHealth):
        self.health = health

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        report = self.health.report() or {"tables": {}, "lance_cache_bytes": self.health.store.cache_bytes()}
        families = {key: GaugeMetricFamily(f"agentsvc_table_{key}", f"{key} of each table", labels=["table"])
                    for key in ("fragments", "versions", "rows", "bytes")}
        for name, shape in report["tables"].items():
            for key, family in families.items():
                family.add_metric([name], shape[key])
        yield from families.values()
        yield GaugeMetricFamily("agentsvc_lance_cache_bytes", "bytes in LanceDB's caches of this process",
                                value=report["lance_cache_bytes"])
