"""How the store is holding up, for ``GET /api/health`` and app.py's ``/metrics``.

Two sources: the tables' own shape (fragments, versions, rows, bytes), read
here, and what each agents.py worker says of its maintenance runs in its
heartbeat row (app.py runs no maintenance itself).  A table "falls behind"
when its fragments or versions pass the thresholds that maintenance keeps them
under (:mod:`store.maintenance`), or when a worker's last run of it was
abandoned.  Reading every table's shape costs a few milliseconds a table, so
the report is kept for ``ttl_s``.
"""
import threading
import time

from store.maintenance import WARN_FRAGMENTS, WARN_VERSIONS


class StorageHealth:
    def __init__(self, store, ttl_s: float = 5.0):
        self.store = store
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._report: dict | None = None
        self._at = 0.0

    def report(self) -> dict:
        with self._lock:
            if self._report is None or time.monotonic() - self._at > self.ttl_s:
                self._report = self._build()
                self._at = time.monotonic()
            return self._report

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

        report = self.health.report()
        families = {key: GaugeMetricFamily(f"agentsvc_table_{key}", f"{key} of each table", labels=["table"])
                    for key in ("fragments", "versions", "rows", "bytes")}
        for name, shape in report["tables"].items():
            for key, family in families.items():
                family.add_metric([name], shape[key])
        yield from families.values()
        yield GaugeMetricFamily("agentsvc_lance_cache_bytes", "bytes in LanceDB's caches of this process",
                                value=report["lance_cache_bytes"])
