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
step and is kept off its process: a hook only resolves what it needs from this
observer's memory, keeps the few fields the spans read (runtime/record/spans.py)
and appends them to a bounded buffer; the worker's export process
(runtime/record/trace_export.py) builds the spans (the SDK's span objects cost
~40 µs each), batches, encodes and sends them, at a lower CPU priority than
the worker.  Work that finds a buffer or the SDK's queue full, or a batch the
receiver refuses, is dropped and counted (:attr:`SpanDrops.dropped`, exported
as ``agentsvc_trace_spans_dropped_total`` by runtime/worker/metrics.py).
BENCHMARKS.md says what tracing costs a busy worker.  Tests build the spans in
this process instead (:class:`SpanBuilder`, or inline), with any provider.

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
import logging
import os
import queue
import threading
from collections import OrderedDict

from domain import trace_context
from domain.statuses import SESSION_FINISHED
from runtime.base.aio import BackgroundWork
from runtime.record.spans import (  # noqa: F401 - the ids and the provider are this module's API too
    MAX_QUEUE, SpanDrops, SpanEmitter, provider, root_of, session_fields, session_span_id, step_fields,
    step_span_id, tool_fields, tool_span_id, trace_id)

log = logging.getLogger("runtime.tracing")

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
ENDED = ("success", "failed", "denied", "unknown", "replayed")
APPROVAL_WAIT = "waiting_approval"
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


class SpanBuilder:
    """A thread of this process that builds spans with ``emitter``, from a bounded
    queue of (kind, arguments); what finds the queue full is dropped and counted
    (as one span, though a step with model calls makes several)."""

    def __init__(self, emitter: SpanEmitter, drops: SpanDrops, size: int = MAX_QUEUE):
        self.emitter = emitter
        self._queue: queue.Queue = queue.Queue(maxsize=size)
        self._drops = drops
        self._thread = threading.Thread(target=self._run, name="trace span builder", daemon=True)
        self._thread.start()

    def submit(self, kind: str, *args) -> None:
        try:
            self._queue.put_nowait((kind, args))
        except queue.Full:
            self._drops.add(1)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                kind, args = item
                getattr(self.emitter, f"emit_{kind}")(*args)
            except Exception:  # noqa: BLE001 - a span not built never reaches a step
                log.exception("trace spans not built")
            finally:
                self._queue.task_done()

    def close(self, timeout_s: float = 5.0) -> None:
        """Build what is queued, then send it and stop (blocking: call it in a thread)."""
        try:
            self._queue.put(None, timeout=timeout_s)
            self._thread.join(timeout_s)
        except queue.Full:
            log.warning("trace span builder: queue still full after %.0f s; stopping without it", timeout_s)
        self.emitter.provider.shutdown()


class InlineBuilder:
    """Spans built at once, on the caller's thread (tests that read them right away)."""

    def __init__(self, emitter: SpanEmitter):
        self.emitter = emitter

    def submit(self, kind: str, *args) -> None:
        getattr(self.emitter, f"emit_{kind}")(*args)

    def close(self, timeout_s: float = 5.0) -> None:
        self.emitter.provider.shutdown()


class Tracing:
    """The observer: spans from step rows, tool call rows and finished snapshots,
    handed to a builder (``builder``: the export process; else built in this
    process with ``tracer_provider``, on a thread or inline)."""

    def __init__(self, tracer_provider=None, ids=None, drops: SpanDrops | None = None,
                 *, store=None, capture_content: bool = False, build_in_thread: bool = True, builder=None):
        self.drops = drops or SpanDrops()
        if builder is None:
            if tracer_provider is None:
                tracer_provider, ids, self.drops = provider(drops=self.drops)
            emitter = SpanEmitter(tracer_provider, ids)
            builder = SpanBuilder(emitter, self.drops) if build_in_thread else InlineBuilder(emitter)
        self._builder = builder
        self.store = store if capture_content else None  # the model_io table is read only for content
        self._background = BackgroundWork("traces: reading a step's model I/O", concurrency=1)
        self._roots: OrderedDict[str, str] = OrderedDict()  # session -> its tree's root session
        self._approvals: OrderedDict[str, None] = OrderedDict()  # tool calls seen waiting for approval
        self._sent: OrderedDict[str, None] = OrderedDict()  # sessions whose span was sent
        self._causes: OrderedDict[str, dict] = OrderedDict()  # session -> {action id: action} its next step follows

    # ---- observer hooks -------------------------------------------------

    async def step_persisted(self, snapshot: dict, step: dict) -> None:
        session_id = snapshot["session_id"]
        self._remember(self._roots, session_id, root_of(snapshot))
        causes = list(self._causes.pop(step["session_id"], {}).values()) if self._causes else []
        if self.store is not None and (step.get("usage") or {}).get("calls"):
            self._background.spawn(self._with_content(snapshot, step, causes), name=f"trace {step['session_id']}")
        else:
            self._builder.submit("step", _tree_of(snapshot), step_fields(step), (), causes)

    async def _with_content(self, snapshot: dict, step: dict, causes: list[dict]) -> None:
        try:
            kept = await asyncio.to_thread(self.store.model_io.of_step, step["session_id"], step["iteration"])
        except Exception as exc:  # noqa: BLE001 - the spans go out without content
            log.warning("model I/O of step %s not read for its spans: %s", step["iteration"], exc)
            kept = []
        self._builder.submit("step", _tree_of(snapshot), step_fields(step), kept, causes)

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
            self._builder.submit("tool_call", tool_fields(row), self._roots.get(session_id) or session_id, waited)

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
                self._builder.submit("session", session_fields(snapshot))

    async def close(self, builder_timeout_s: float | None = None) -> None:
        """Build and send what is queued (bounded by the SDK's export timeout), then
        stop; in a thread: the export is blocking HTTP.  ``builder_timeout_s``: how
        long the builder may take (its own default when None; a benchmark that
        counts what was built waits longer than a stopping worker should)."""
        await self._background.close(grace_s=5.0)
        if builder_timeout_s is None:
            await asyncio.to_thread(self._builder.close)
        else:
            await asyncio.to_thread(self._builder.close, builder_timeout_s)

    @staticmethod
    def _remember(kept: OrderedDict, key: str, value) -> None:
        kept[key] = value
        kept.move_to_end(key)
        while len(kept) > KEPT:
            kept.popitem(last=False)


def _tree_of(snapshot: dict) -> dict:
    """What a step's spans need of its snapshot (the builder reads it later; the snapshot moves on)."""
    return {"session_id": snapshot["session_id"], "root_session_id": snapshot.get("root_session_id")}


def start(store=None) -> Tracing | None:
    """The tracing observer, with its export process, when the operator asked for it (module docstring)."""
    if not enabled():
        return None
    from runtime.record.trace_export import ExportProcess

    drops = SpanDrops()
    found = Tracing(drops=drops, store=store, capture_content=captures_content(), builder=ExportProcess(drops))
    log.info("OpenTelemetry traces on: OTLP/HTTP to %s, spans built and sent by export process %s",
             next(os.environ[v] for v in ENDPOINT_VARS if (os.environ.get(v) or "").strip()), found._builder.pid)
    return found
