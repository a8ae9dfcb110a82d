"""OpenTelemetry traces of sessions, built from the record after the fact.

Off unless the operator sets the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); then :class:`Tracing` is an observer
(runtime/base/fanout.py) that turns what the record already holds into spans,
exported over OTLP/HTTP by the SDK's batching processor (the other ``OTEL_*``
variables, headers, service name, resource attributes, batch sizes, apply as
the SDK reads them).  With the variables unset, no SDK is even imported.

Why after the fact: a step row carries its time and latency, its usage the
model calls and each HTTP attempt (monikers/llm_call.py: outcome, tokens,
duration), a tool call row its created / started / finished times.  So every
span is made whole, with explicit start and end times, once the row is durable,
and nothing stays open across a crash or a restart.  Export never breaks a
step and is kept off its path: a hook only resolves what it needs from this
observer's memory and hands the row to :class:`SpanBuilder`, whose thread
builds the spans (the SDK's span objects cost ~40 µs each) and ends them into
the SDK's batch processor, itself a bounded queue that another thread encodes
and sends.  Work that finds either queue full, or a batch the receiver refuses,
is dropped and counted (:attr:`SpanDrops.dropped`, exported as
``agentsvc_trace_spans_dropped_total`` by runtime/worker/metrics.py).  Both
threads still share the interpreter lock with the event loop: BENCHMARKS.md
says what tracing costs a busy process.

Ids are derived, not random, so a session's spans join one trace whichever
process writes them, before or after a crash:

- trace id: of the session tree's root session (``root_session_id``, else the
  session's own id): a sub-agent's spans are in its parent's trace;
- a session's span id: of its session id; a step's: of (session, iteration);
  a tool call's: of the call's row id.  A sub-agent's session id is its
  ``spawn_agent`` call's row id (tools/spawn_agent.py), so the child's
  session span is the child of that call's span.

The tree: ``session <name>`` > ``step <n>`` > ``chat <model>`` (one per HTTP
attempt, GenAI semantic conventions) and ``execute_tool <name>`` (with an
``approval wait`` child when a person approved or denied it, a ``question``
child for ``ask_user``).  A step's spans are emitted when its row is durable
(its parent's span id known from the ids above); a session's own span when it
finishes (start: its creation), so a session that still waits shows its steps
under a parent span not yet received.  Attempts carry durations, not start
times: they are laid end to end from the step's start, after the call's wait
at the rate-limit gate.

The request behind a step: an action whose handler starts (the observer's
``action_started``) is remembered for its session, and the first step the
session persists after it carries its id (``agentsvc.action_ids``, with
``agentsvc.action_types``) and, when the HTTP request that queued it sent a
valid W3C ``traceparent`` (kept in the action's payload by api/sessions.py,
domain/trace_context.py), an OpenTelemetry Link to that request's span.  Only
actions that lead to a step are remembered (not ``pause`` or ``destroy``), and
in this process's memory: a step that a restarted process takes after the
action was applied elsewhere carries no link.

Prompts and completions go out only when the operator opts in with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, and only what the
record keeps of them: the redacted request and reply of the model_io table
(runtime/record/model_io.py; ``--keep-model-io`` above 0, never a private
session), read back after the step row, in the background, and set as
``gen_ai.input.messages`` / ``gen_ai.output.messages`` on each call's last
attempt.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import queue
import threading
from collections import OrderedDict
from datetime import datetime, timedelta, timezone

from domain import trace_context
from domain.statuses import SESSION_FINISHED
from runtime.base.aio import BackgroundWork
from store.codec import parse_time

log = logging.getLogger("runtime.tracing")

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
ENDED = ("success", "failed", "denied", "unknown", "replayed")
APPROVAL_WAIT = "waiting_approval"
ASK_USER = "ask_user"
MAX_QUEUE = 8192  # spans waiting for export; past this they are dropped and counted
STEPLESS_ACTIONS = ("pause", "destroy")  # actions no step follows: nothing to link
ACTIONS_PER_STEP = 32  # links a step carries at most (a bulk approval of many calls of one step)
KEPT = 50_000  # tool calls remembered as having waited for approval, and sessions whose span was sent


def enabled(environ=os.environ) -> bool:
    """The operator asked for traces: an OTLP endpoint is set and the SDK is not disabled."""
    if (environ.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return False
    if (environ.get("OTEL_TRACES_EXPORTER") or "otlp").strip().lower() == "none":
        return False
    return any((environ.get(name) or "").strip() for name in ENDPOINT_VARS)


def captures_content(environ=os.environ) -> bool:
    """The operator opted in to prompts and completions on the model spans."""
    return (environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT") or "").strip().lower() == "true"


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
    """Spans lost on the way out: the queue was full, or the receiver refused or
    could not be reached (its batch is lost: the step never waits for it)."""

    def __init__(self):
        self.dropped = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.dropped += n


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


class SpanBuilder:
    """A thread that builds spans off the event loop, from a bounded queue of
    (function, arguments); what finds the queue full is dropped and counted
    (as one span, though a step with model calls makes several)."""

    def __init__(self, drops: SpanDrops, size: int = MAX_QUEUE):
        self._queue: queue.Queue = queue.Queue(maxsize=size)
        self._drops = drops
        self._thread = threading.Thread(target=self._run, name="trace span builder", daemon=True)
        self._thread.start()

    def submit(self, build, *args) -> None:
        try:
            self._queue.put_nowait((build, args))
        except queue.Full:
            self._drops.add(1)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                build, args = item
                build(*args)
            except Exception:  # noqa: BLE001 - a span not built never reaches a step
                log.exception("trace spans not built")
            finally:
                self._queue.task_done()

    def close(self, timeout_s: float = 5.0) -> None:
        """Build what is queued, then stop (blocking: call it in a thread)."""
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            log.warning("trace span builder: queue still full after %.0f s; stopping without it", timeout_s)
            return
        self._thread.join(timeout_s)


class _Inline:
    """Spans built at once, on the caller's thread (tests that read them right away)."""

    @staticmethod
    def submit(build, *args) -> None:
        build(*args)

    def close(self, timeout_s: float = 5.0) -> None:
        pass


class Tracing:
    """The observer: spans from step rows, tool call rows and finished snapshots."""

    def __init__(self, tracer_provider=None, ids: _PresetIds | None = None, drops: SpanDrops | None = None,
                 *, store=None, capture_content: bool = False, build_in_thread: bool = True):
        if tracer_provider is None:
            tracer_provider, ids, drops = provider()
        self.provider, self.ids, self.drops = tracer_provider, ids, drops or SpanDrops()
        self._builder = SpanBuilder(self.drops) if build_in_thread else _Inline()
        self.store = store if capture_content else None  # the model_io table is read only for content
        self._background = BackgroundWork("traces: reading a step's model I/O", concurrency=1)
        self.tracer = tracer_provider.get_tracer("agentsvc")
        self._roots: OrderedDict[str, str] = OrderedDict()  # session -> its tree's root session
        self._approvals: OrderedDict[str, None] = OrderedDict()  # tool calls seen waiting for approval
        self._sent: OrderedDict[str, None] = OrderedDict()  # sessions whose span was sent
        self._causes: OrderedDict[str, dict] = OrderedDict()  # session -> {action id: action} its next step follows

    # ---- observer hooks -------------------------------------------------

    async def step_persisted(self, snapshot: dict, step: dict) -> None:
        self._remember(self._roots, snapshot["session_id"], root_of(snapshot))
        causes = list(self._causes.pop(step["session_id"], {}).values()) if self._causes else []
        if self.store is not None and (step.get("usage") or {}).get("calls"):
            self._background.spawn(self._with_content(snapshot, step, causes), name=f"trace {step['session_id']}")
        else:
            self._builder.submit(self.emit_step, _tree_of(snapshot), dict(step), (), causes)

    async def _with_content(self, snapshot: dict, step: dict, causes: list[dict]) -> None:
        try:
            kept = await asyncio.to_thread(self.store.model_io.of_step, step["session_id"], step["iteration"])
        except Exception as exc:  # noqa: BLE001 - the spans go out without content
            log.warning("model I/O of step %s not read for its spans: %s", step["iteration"], exc)
            kept = []
        self._builder.submit(self.emit_step, _tree_of(snapshot), dict(step), kept, causes)

    async def action_started(self, action: dict) -> None:
        """Remember the action for the next step of its session (module docstring)."""
        session_id = action.get("session_id")
        if not session_id or action.get("type") in STEPLESS_ACTIONS:
            return
        waiting = self._causes.get(session_id) or {}
        if len(waiting) < ACTIONS_PER_STEP:
            waiting[action["id"]] = {"id": action["id"], "type": action.get("type"),
                                     "traceparent": (action.get("payload") or {}).get(trace_context.PAYLOAD_KEY)}
        self._remember(self._causes, session_id, waiting)

    async def tool_call_updated(self, row: dict) -> None:
        if row.get("status") == APPROVAL_WAIT:
            self._remember(self._approvals, row["id"], None)
        elif row.get("status") in ENDED:
            # what the row's spans need from this observer's memory, read here, on the loop
            session_id, call_id = row["session_id"], row["id"]
            waited = call_id in self._approvals
            self._approvals.pop(call_id, None)
            self._builder.submit(self.emit_tool_call, dict(row), self._roots.get(session_id) or session_id, waited)

    async def tool_phase_loaded(self, agent, rows: list[dict]) -> None:
        """A step's calls as planned or recovered: after a restart, the new process
        learns here which calls wait for approval (it never saw them start to)."""
        for row in rows:
            if row.get("status") == APPROVAL_WAIT:
                self._remember(self._approvals, row["id"], None)

    async def snapshot_saved(self, snapshot: dict) -> None:
        self._remember(self._roots, snapshot["session_id"], root_of(snapshot))
        if snapshot.get("status") in SESSION_FINISHED:
            key = f"{snapshot['session_id']}:{snapshot.get('iteration')}:{snapshot.get('status')}"
            if key not in self._sent:
                self._remember(self._sent, key, None)
                self._builder.submit(self.emit_session, dict(snapshot))  # a copy: the thread reads it later

    async def close(self) -> None:
        """Send what is queued (bounded by the SDK's export timeout), then stop;
        in a thread: the export is blocking HTTP."""
        await self._background.close(grace_s=5.0)
        await asyncio.to_thread(self._builder.close)
        await asyncio.to_thread(self.provider.shutdown)

    # ---- spans ------------------------------------------------------------

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
                    "agentsvc.tool_calls": len(step.get("tool_calls") or []) or None,
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
                        "agentsvc.question.choices": len(args.get("choices") or []) or None})

    @staticmethod
    def _remember(kept: OrderedDict, key: str, value) -> None:
        kept[key] = value
        kept.move_to_end(key)
        while len(kept) > KEPT:
            kept.popitem(last=False)


def _tree_of(snapshot: dict) -> dict:
    """What a step's spans need of its snapshot (the thread reads it later; the snapshot moves on)."""
    return {"session_id": snapshot["session_id"], "root_session_id": snapshot.get("root_session_id")}


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


def start(store=None) -> Tracing | None:
    """The tracing observer, when the operator asked for it (module docstring)."""
    if not enabled():
        return None
    found = Tracing(store=store, capture_content=captures_content())
    log.info("OpenTelemetry traces on: OTLP/HTTP to %s",
             next(os.environ[v] for v in ENDPOINT_VARS if (os.environ.get(v) or "").strip()))
    return found
