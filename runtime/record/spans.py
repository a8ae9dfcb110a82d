"""How the record becomes OpenTelemetry spans: derived ids, the SDK's provider
with a counting batch processor, and :class:`SpanEmitter`, which turns a step
row, a tool call row or a finished snapshot into whole spans with explicit
start and end times (runtime/record/tracing.py says why after the fact, and
the tree the spans make).

This module imports the SDK only inside its functions: the process that builds
spans (runtime/record/trace_export.py, or tests in-process) pays for it, not a
worker with tracing off.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from datetime import datetime, timezone

from domain import trace_context
from store.codec import parse_time

log = logging.getLogger("runtime.tracing")

ASK_USER = "ask_user"
MAX_QUEUE = 8192  # spans waiting for export; past this they are dropped and counted


def _digest(kind: str, key: str, size: int) -> int:
    value = int.from_bytes(hashlib.sha256(f"{kind}:{key}".encode()).digest()[:size], "big")
    return value or 1  # zero is the invalid id


def trace_id(root_session_id: str) -> int:
    return _digest("trace", root_session_id, 16)


def session_span_id(session_id: str) -> int:
    return _digest("session", session_id, 8)


def step_span_id(session_id: str, iteration: int) -> int:
    return _digest("step", f"{session_id}:{iteration}", 8)


def tool_span_id(tool_call_id: str) -> int:
    return _digest("tool", tool_call_id, 8)


def root_of(snapshot: dict) -> str:
    return snapshot.get("root_session_id") or snapshot["session_id"]


def _ns(value) -> int | None:
    value = parse_time(value)
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return int(value.timestamp() * 1e9)


def _clean(attrs: dict) -> dict:
    """Attributes without None (OpenTelemetry refuses it)."""
    return {k: v for k, v in attrs.items() if v is not None}


class _PresetIds:
    """The SDK's id generator, told the next ids: the span about to start takes
    them (spans are started on one thread at a time: SpanBuilder's, or the caller's when inline)."""

    def __init__(self):
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        self._random = RandomIdGenerator()
        self._local = threading.local()

    def preset(self, span_id: int, trace: int | None = None) -> None:
        self._local.span_id, self._local.trace_id = span_id, trace

    def generate_span_id(self) -> int:
        found, self._local.span_id = getattr(self._local, "span_id", None), None
        return found or self._random.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return False  # derived from the session tree (module docstring)

    def generate_trace_id(self) -> int:
        found, self._local.trace_id = getattr(self._local, "trace_id", None), None
        return found or self._random.generate_trace_id()


class SpanDrops:
    """Spans lost on the way out: a queue was full, or the receiver refused or
    could not be reached (its batch is lost: the step never waits for it).
    ``dropped`` is this process's count plus what the export process reported
    (runtime/record/trace_export.py), which only grows."""

    def __init__(self):
        self._here = 0
        self._reported = 0
        self._lock = threading.Lock()

    @property
    def dropped(self) -> int:
        return self._here + self._reported

    def add(self, n: int) -> None:
        with self._lock:
            self._here += n

    def report(self, total: int) -> None:
        """The export process's own total so far (the caller keeps it growing across its restarts)."""
        self._reported = max(self._reported, total)


def _counting_exporter(exporter, drops: SpanDrops):
    from opentelemetry.sdk.trace.export import SpanExportResult

    class Counting:
        def export(self, spans):
            try:
                result = exporter.export(spans)
            except Exception:
                log.warning("trace export failed", exc_info=True)
                result = SpanExportResult.FAILURE
            if result != SpanExportResult.SUCCESS:
                drops.add(len(spans))
            return result

        def shutdown(self):
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000):
            return exporter.force_flush(timeout_millis)

    return Counting()


def _counting_processor(exporter, drops: SpanDrops, max_queue_size: int):
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    class Counting(BatchSpanProcessor):
        def on_end(self, span) -> None:
            queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)
            if queue is not None and len(queue) >= max_queue_size:
                # Full: this span is dropped and counted.  Handing it on would push the
                # oldest out, and counting that one raced the export thread: a batch
                # taken meanwhile pushed nothing out, and was counted again when refused.
                # The queue only shrinks under a lone producer, so a span let through fits.
                drops.add(1)
                return
            super().on_end(span)

    batch = min(int(os.environ.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") or 512), max_queue_size)
    return Counting(_counting_exporter(exporter, drops), max_queue_size=max_queue_size, max_export_batch_size=batch)


def provider(exporter=None, processor=None, drops: SpanDrops | None = None, max_queue_size: int | None = None):
    """A TracerProvider with preset ids, exporting through ``processor``, else a
    counting batch processor over ``exporter`` (default: OTLP/HTTP from the
    ``OTEL_*`` variables).  Returns (provider, ids, drops)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    drops = drops or SpanDrops()
    ids = _PresetIds()
    resource = Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "agentsvc"})
    found = TracerProvider(resource=resource, id_generator=ids)
    if processor is None:
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        size = max_queue_size or int(os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE") or MAX_QUEUE)
        processor = _counting_processor(exporter, drops, size)
    found.add_span_processor(processor)
    return found, ids, drops


# What each span reads of its row: the rest (configs, state, tool arguments and
# results, any size) never crosses to the builder thread or process.
SESSION_FIELDS = ("session_id", "root_session_id", "parent_session_id", "subagent", "name", "agent_id", "moniker",
                  "status", "status_reason", "status_changed_at", "created_at", "iteration", "conversation_id",
                  "last_error", "usage")
STEP_FIELDS = ("session_id", "iteration", "created_at", "latency_ms", "status", "error")
TOOL_FIELDS = ("id", "session_id", "name", "iteration", "created_at", "started_at", "finished_at", "status",
               "call_id", "attempts", "decided_by", "error")


def session_fields(snapshot: dict) -> dict:
    found = {k: snapshot.get(k) for k in SESSION_FIELDS}
    usage = snapshot.get("usage") or {}
    found["usage"] = {"input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens")}
    if isinstance(found["subagent"], dict):
        found["subagent"] = {"spawned_by": found["subagent"].get("spawned_by")}
    return found


def step_fields(step: dict) -> dict:
    found = {k: step.get(k) for k in STEP_FIELDS}
    usage = step.get("usage") or {}
    found["usage"] = {"input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens"),
                      "calls": usage.get("calls")} if usage else None
    found["tool_calls"] = len(step.get("tool_calls") or [])
    return found


def tool_fields(row: dict) -> dict:
    found = {k: row.get(k) for k in TOOL_FIELDS}
    if row.get("name") == ASK_USER:
        args = row.get("args") if isinstance(row.get("args"), dict) else {}
        found["choices"] = len(args.get("choices") or [])
    return found


class SpanEmitter:
    """Builds and ends the spans of one row at a time, on the thread that calls it
    (its ids are preset per thread, so one emitter serves one builder thread)."""

    def __init__(self, tracer_provider, ids: _PresetIds):
        self.provider, self.ids = tracer_provider, ids
        self.tracer = tracer_provider.get_tracer("agentsvc")

    def _parent(self, trace: int, span_id: int):
        from opentelemetry import trace as otel
        from opentelemetry.trace import SpanContext, TraceFlags

        context = SpanContext(trace_id=trace, span_id=span_id, is_remote=True,
                              trace_flags=TraceFlags(TraceFlags.SAMPLED))
        return otel.set_span_in_context(otel.NonRecordingSpan(context))

    def _span(self, name: str, span_id: int, trace: int, parent_id: int | None, start: int, end: int,
              attrs: dict, error: str | None = None, kind=None, events=(), links=()):
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self.ids.preset(span_id, trace)
        context = self._parent(trace, parent_id) if parent_id is not None else None
        span = self.tracer.start_span(name, context=context, kind=kind or SpanKind.INTERNAL,
                                      attributes=_clean(attrs), start_time=start, links=links)
        for event_name, at, event_attrs in events:
            span.add_event(event_name, _clean(event_attrs), timestamp=at)
        if error:
            span.set_status(Status(StatusCode.ERROR, error[:500]))
        span.end(end_time=max(end, start))
        return span

    def emit_session(self, snapshot: dict) -> None:
        session_id = snapshot["session_id"]
        link = snapshot.get("subagent") if isinstance(snapshot.get("subagent"), dict) else {}
        parent = tool_span_id(session_id) if snapshot.get("parent_session_id") else None
        end = _ns(snapshot.get("status_changed_at")) or _ns(datetime.now(timezone.utc))
        start = _ns(snapshot.get("created_at")) or end
        usage = snapshot.get("usage") or {}
        name = snapshot.get("name") or session_id
        self._span(f"session {name}", session_span_id(session_id), trace_id(root_of(snapshot)), parent, start, end,
                   {"agentsvc.session_id": session_id, "agentsvc.agent_id": snapshot.get("agent_id"),
                    "agentsvc.moniker": snapshot.get("moniker"), "agentsvc.status": snapshot.get("status"),
                    "agentsvc.status_reason": snapshot.get("status_reason"),
                    "agentsvc.iteration": snapshot.get("iteration"),
                    "agentsvc.parent_session_id": snapshot.get("parent_session_id"),
                    "agentsvc.spawned_by": link.get("spawned_by"),
                    "gen_ai.conversation.id": snapshot.get("conversation_id"),
                    "gen_ai.usage.input_tokens": usage.get("input_tokens"),
                    "gen_ai.usage.output_tokens": usage.get("output_tokens")},
                   error=snapshot.get("last_error") if snapshot.get("status") == "error" else None)

    def emit_step(self, snapshot: dict, step: dict, model_io: list[dict] = (), causes: list[dict] = ()) -> None:
        session_id, iteration = step["session_id"], step["iteration"]
        trace = trace_id(root_of(snapshot))
        end = _ns(step.get("created_at")) or _ns(datetime.now(timezone.utc))
        start = end - int((step.get("latency_ms") or 0) * 1e6)
        usage = step.get("usage") or {}
        step_id = step_span_id(session_id, iteration)
        self._span(f"step {iteration}", step_id, trace, session_span_id(session_id), start, end,
                   {"agentsvc.session_id": session_id, "agentsvc.iteration": iteration,
                    "agentsvc.status": step.get("status"),
                    "agentsvc.tool_calls": _count(step.get("tool_calls")) or None,
                    "gen_ai.usage.input_tokens": usage.get("input_tokens"),
                    "gen_ai.usage.output_tokens": usage.get("output_tokens"),
                    "agentsvc.action_ids": tuple(c["id"] for c in causes) or None,
                    "agentsvc.action_types": tuple(c["type"] or "" for c in causes) or None},
                   error=step.get("error"), links=_request_links(causes))
        at = start
        for n, call in enumerate(usage.get("calls") or []):
            at += int((call.get("rate_wait_ms") or 0) * 1e6)
            attempts = call.get("attempts") or []
            for i, attempt in enumerate(attempts):
                took = int((attempt.get("duration_ms") or 0) * 1e6)
                content = _content(model_io[n]) if i == len(attempts) - 1 and n < len(model_io) else {}
                self.emit_attempt(trace, step_id, call, attempt, at, at + took, content)
                at += took

    def emit_attempt(self, trace: int, step_id: int, call: dict, attempt: dict, start: int, end: int,
                     content: dict | None = None) -> None:
        from opentelemetry.trace import SpanKind

        model = call.get("model") or "model"
        outcome = attempt.get("outcome") or "ok"
        failed = outcome != "ok"
        self.ids.preset(0)  # an attempt's id is random: nothing points at it
        self._span(f"chat {model}", 0, trace, step_id, start, end,
                   {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                    "gen_ai.usage.input_tokens": attempt.get("input_tokens"),
                    "gen_ai.usage.output_tokens": attempt.get("output_tokens"),
                    "gen_ai.response.finish_reasons": ("length",) if attempt.get("truncated") else None,
                    "error.type": (outcome if outcome != "error" or not attempt.get("status")
                                   else str(attempt["status"])) if failed else None,
                    "http.response.status_code": attempt.get("status"),
                    "agentsvc.attempt": attempt.get("n"), "agentsvc.outcome": outcome,
                    "agentsvc.tokens_estimated": bool(attempt.get("estimated")),
                    "agentsvc.structured_mode": call.get("structured"), **(content or {})},
                   error=attempt.get("error") or (outcome if failed else None), kind=SpanKind.CLIENT)

    def emit_tool_call(self, row: dict, root: str, waited: bool) -> None:
        """The call's span, and its wait's when it was seen waiting for approval (``waited``)."""
        session_id, call_id, name = row["session_id"], row["id"], row.get("name") or "tool"
        trace = trace_id(root)
        created = _ns(row.get("created_at"))
        ended = _ns(row.get("finished_at")) or _ns(datetime.now(timezone.utc))
        started = _ns(row.get("started_at"))
        created = created or started or ended
        status = row.get("status")
        events = [("run", started, {})] if started else []
        span_id = tool_span_id(call_id)
        self._span(f"execute_tool {name}", span_id, trace, step_span_id(session_id, row["iteration"]), created, ended,
                   {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": row.get("call_id"), "agentsvc.tool_call_id": call_id,
                    "agentsvc.session_id": session_id, "agentsvc.iteration": row.get("iteration"),
                    "agentsvc.status": status, "agentsvc.attempts": row.get("attempts"),
                    "agentsvc.decided_by": row.get("decided_by")},
                   error=row.get("error") if status in ("failed", "unknown") else None, events=events)
        # Seen waiting by this process (an update, or the rows a restarted process loaded), or denied by a person
        if waited or (status == "denied" and row.get("decided_by")):
            decided = started if status != "denied" and started else ended
            self.ids.preset(0)
            self._span("approval wait", 0, trace, span_id, created, decided,
                       {"agentsvc.tool_call_id": call_id, "gen_ai.tool.name": name,
                        "agentsvc.decision": "denied" if status == "denied" else "approved",
                        "agentsvc.decided_by": row.get("decided_by")})
        if name == ASK_USER:
            args = row.get("args") if isinstance(row.get("args"), dict) else {}
            self._span("question", 0, trace, span_id, created, ended,
                       {"agentsvc.tool_call_id": call_id, "agentsvc.status": status,
                        "agentsvc.answered": status == "success",
                        "agentsvc.question.choices": row.get("choices", len(args.get("choices") or [])) or None})


def _count(value) -> int:
    """A step's tool calls: their number (step_fields) or the list itself (a whole row)."""
    return value if isinstance(value, int) else len(value or [])


def _request_links(causes: list[dict]) -> list:
    """Links to the spans of the HTTP requests that queued these actions (those that sent a traceparent)."""
    from opentelemetry.trace import Link, SpanContext, TraceFlags

    links = []
    for cause in causes:
        parsed = trace_context.parse(cause.get("traceparent"))
        if parsed:
            trace, span, flags = parsed
            context = SpanContext(trace_id=trace, span_id=span, is_remote=True, trace_flags=TraceFlags(flags & 0xFF))
            links.append(Link(context, {"agentsvc.action_id": cause["id"], "agentsvc.action_type": cause["type"] or ""}))
    return links


def _content(kept: dict) -> dict:
    """The GenAI content attributes of one kept call (already redacted, runtime/record/model_io.py)."""
    request = kept.get("request") if isinstance(kept.get("request"), dict) else {}
    out = {}
    if request.get("messages"):
        out["gen_ai.input.messages"] = json.dumps(request["messages"], ensure_ascii=False, default=str)
    if isinstance(kept.get("reply"), str):
        out["gen_ai.output.messages"] = json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": kept["reply"]}]}], ensure_ascii=False)
    return out

