"""Prometheus metrics of agents.py: steps, actions, commits and maintenance.

Step and action counts come in through the observer hooks; the store's commit
counters and the maintainer's work are read at scrape time by a collector, so
neither store/ nor the maintainer knows about Prometheus.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from store.codec import parse_time

if TYPE_CHECKING:
    from runtime.base.rate_limits import RateLimiter
    from runtime.worker.service import AgentService
    from store import Store


class RuntimeMetrics:
    def __init__(self, service: AgentService, store: Store):
        self.registry = CollectorRegistry()
        self.steps = Counter("agentsvc_steps_total", "persisted steps", ["status"], registry=self.registry)
        self.step_seconds = Histogram("agentsvc_step_seconds", "time in the moniker per step",
                                      registry=self.registry)
        self.actions = Counter("agentsvc_actions_total", "finished actions", ["type", "outcome"],
                               registry=self.registry)
        self.action_seconds = Histogram("agentsvc_action_seconds", "accepted -> finished, per action",
                                        buckets=(.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30),
                                        registry=self.registry)
        self.tool_calls = Counter("agentsvc_tool_calls_total", "tool calls entering each status", ["name", "status"],
                                  registry=self.registry)
        self.tool_seconds = Histogram("agentsvc_tool_call_seconds", "time a tool ran, per ended call",
                                      ["name", "status"], registry=self.registry,
                                      buckets=(.001, .005, .01, .05, .1, .5, 1, 5, 30, 120, 600))
        self._known_tools = getattr(service, "tools", None)
        self.registry.register(_StoreCollector(service, store))

    def watch_rate_limits(self, limiter) -> None:
        """Export the shared model rate limits (runtime/base/rate_limits.py) at scrape time."""
        self.registry.register(_RateLimitCollector(limiter))

    def watch_trace_drops(self, drops) -> None:
        """Export the spans that OpenTelemetry export dropped (runtime/record/tracing.py)."""
        self.registry.register(_TraceDropCollector(drops))

    async def step_persisted(self, snapshot: dict, step: dict) -> None:
        self.steps.labels(step["status"]).inc()
        if step.get("latency_ms") is not None:
            self.step_seconds.observe(step["latency_ms"] / 1000)

    async def tool_call_updated(self, row: dict) -> None:
        # Unknown names (a model's invention) share one label: no unbounded label set.
        name = row["name"] if self._known_tools is not None and row["name"] in self._known_tools else "(unknown)"
        self.tool_calls.labels(name, row["status"]).inc()
        if row.get("duration_ms") is not None and row["status"] in ("success", "failed"):
            self.tool_seconds.labels(name, row["status"]).observe(row["duration_ms"] / 1000)

    async def action_finished(self, action: dict, ok: bool, error: str | None) -> None:
        self.actions.labels(action.get("type") or "unknown", "done" if ok else "failed").inc()
        created = action.get("created_at")
        if isinstance(created, str):
            accepted = parse_time(created)
            self.action_seconds.observe((datetime.now(timezone.utc) - accepted).total_seconds())


class _TraceDropCollector:
    def __init__(self, drops):
        self.drops = drops

    def collect(self):
        yield CounterMetricFamily("agentsvc_trace_spans_dropped", "spans not exported: the bounded queue was full, "
                                  "or the receiver refused or could not be reached", value=self.drops.dropped)


class _StoreCollector:
    def __init__(self, service: AgentService, store: Store):
        self.service, self.store = service, store

    def collect(self):
        stats = self.store.writer.stats
        yield CounterMetricFamily("agentsvc_commits", "LanceDB commits made by this process", value=stats.commits)
        yield CounterMetricFamily("agentsvc_committed_writes", "writes those commits carried", value=stats.writes)
        yield CounterMetricFamily("agentsvc_commit_seconds", "time spent committing", value=stats.commit_seconds)
        sessions = GaugeMetricFamily("agentsvc_sessions", "live sessions by status", labels=["status"])
        counts: dict[str, int] = {}
        for agent in list(self.service.sessions.sessions.values()):
            counts[agent.status] = counts.get(agent.status, 0) + 1
        for status, n in counts.items():
            sessions.add_metric([status], n)
        yield sessions
        yield GaugeMetricFamily("agentsvc_lance_cache_bytes", "bytes in LanceDB's caches of this process",
                                value=self.store.cache_bytes())
        maintainer = self.service.maintainer
        if maintainer is not None:
            yield CounterMetricFamily("agentsvc_maintenance_runs", "table optimizations", value=maintainer.runs)
            yield CounterMetricFamily("agentsvc_maintenance_failures", "optimization tries that failed",
                                      value=maintainer.failures)
            yield CounterMetricFamily("agentsvc_maintenance_abandoned", "optimizations that failed every try",
                                      value=maintainer.abandoned)
            yield CounterMetricFamily("agentsvc_maintenance_seconds", "time spent optimizing",
                                      value=maintainer.seconds)
            yield from _table_families(maintainer.health())


def _table_families(health: dict):
    """Per table, as of its last maintenance run: its shape and how its runs went."""
    gauges = {key: GaugeMetricFamily(f"agentsvc_table_{key}", f"{key} of the table after its last maintenance",
                                     labels=["table"]) for key in ("fragments", "versions", "rows")}
    counters = {key: CounterMetricFamily(f"agentsvc_table_maintenance_{key}", f"maintenance {key} per table",
                                         labels=["table"]) for key in ("runs", "failures", "abandoned")}
    last_ok = GaugeMetricFamily("agentsvc_table_maintenance_last_ok_timestamp_seconds",
                                "when the table's last successful maintenance finished", labels=["table"])
    for name, table in health.items():
        for key, family in gauges.items():
            if key in table:
                family.add_metric([name], table[key])
        for key, family in counters.items():
            family.add_metric([name], table[key])
        if table.get("last_ok_at"):
            last_ok.add_metric([name], datetime.fromisoformat(table["last_ok_at"]).timestamp())
    yield from gauges.values()
    yield from counters.values()
    yield last_ok


class _RateLimitCollector:
    """Per rate-limited model (models without a limit share one label): requests let
    through, time they waited, 429s, ledger writes, and the share and slow-down in force."""

    COUNTERS = (("requests", "agentsvc_llm_requests", "model requests let through by the rate limiter"),
                ("waited_s", "agentsvc_llm_rate_wait_seconds", "time model requests waited for their model's limit"),
                ("throttled", "agentsvc_llm_throttled", "429 answers from the provider"),
                ("ledger_writes", "agentsvc_llm_rate_ledger_writes", "writes to the shared rate ledger"))
    GAUGES = (("share_requests", "agentsvc_llm_rate_share_requests", "requests per window this worker may use"),
              ("occupied_requests", "agentsvc_llm_rate_occupied_requests", "requests counting in the window now"),
              ("waiting", "agentsvc_llm_rate_waiting", "calls waiting for their model's limit"),
              ("throttle", "agentsvc_llm_rate_throttle", "slow-down factor after 429s (1 = none)"))

    def __init__(self, limiter: RateLimiter):
        self.limiter = limiter

    def collect(self):
        snapshot = self.limiter.snapshot()
        for key, name, doc in self.COUNTERS:
            family = CounterMetricFamily(name, doc, labels=["model"])
            for model, values in snapshot.items():
                family.add_metric([model], values.get(key, 0))
            yield family
        for key, name, doc in self.GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["model"])
            for model, values in snapshot.items():
                if key in values:
                    family.add_metric([model], values[key])
            yield family
