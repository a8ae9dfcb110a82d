"""OpenTelemetry spans built from the record (runtime/record/tracing.py): the
ids are derived so a session's spans join one trace across processes, a
sub-agent's session hangs under its parent's spawn_agent call, the times come
from the rows, the model attempts carry the GenAI attributes, and export is
off unless the operator sets an OTLP endpoint."""
import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime.base.fanout import Observers
from runtime.record import tracing

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def ns(at: datetime) -> int:
    return int(at.timestamp() * 1e9)


def make(exporter=None):
    exporter = exporter or InMemorySpanExporter()
    provider, ids, drops = tracing.provider(processor=SimpleSpanProcessor(exporter))
    return tracing.Tracing(provider, ids, drops, build_in_thread=False), exporter  # read at once


def by_name(exporter) -> dict:
    return {s.name: s for s in exporter.get_finished_spans()}


def attempt(n, outcome, tin, tout, ms, **extra):
    return {"n": n, "outcome": outcome, "input_tokens": tin, "output_tokens": tout, "duration_ms": ms,
            "estimated": False, "status": extra.get("status"), "error": extra.get("error"), "truncated": False}


def test_off_unless_an_endpoint_is_set():
    assert not tracing.enabled({})
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x/v1/traces"})
    assert not tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"})
    assert not tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"})


def test_a_step_its_model_attempts_and_its_session():
    traces, exporter = make()
    Observers(traces)  # a valid observer: every hook it has is declared
    snapshot = {"session_id": "S1", "agent_id": "A1", "moniker": "baml", "status": "running",
                "created_at": T0, "config": {}}
    step = {"session_id": "S1", "iteration": 0, "status": "ok", "latency_ms": 2000.0,
            "created_at": (T0 + timedelta(seconds=3)).isoformat(),
            "usage": {"input_tokens": 30, "output_tokens": 12, "calls": [
                {"model": "gpt-x", "structured": "json_schema", "rate_wait_ms": 100.0,
                 "attempts": [attempt(1, "5xx", 10, 0, 400.0, status=503, error="busy"),
                              attempt(2, "ok", 20, 12, 900.0)]}]}}
    asyncio.run(traces.step_persisted(snapshot, step))
    asyncio.run(traces.snapshot_saved(dict(snapshot, status="done", status_changed_at=T0 + timedelta(seconds=4),
                                           usage={"input_tokens": 30, "output_tokens": 12})))
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["step 0", "chat gpt-x", "chat gpt-x", "session S1"]
    step_span, failed, ok, session = spans
    trace = tracing.trace_id("S1")
    assert {s.context.trace_id for s in spans} == {trace}
    assert session.context.span_id == tracing.session_span_id("S1") and session.parent is None
    assert session.start_time == ns(T0) and session.end_time == ns(T0 + timedelta(seconds=4))
    assert step_span.parent.span_id == session.context.span_id
    assert step_span.context.span_id == tracing.step_span_id("S1", 0)
    assert step_span.end_time == ns(T0 + timedelta(seconds=3))
    assert step_span.start_time == ns(T0 + timedelta(seconds=1))
    assert step_span.attributes["agentsvc.iteration"] == 0 and step_span.attributes["agentsvc.status"] == "ok"
    for span in (failed, ok):
        assert span.parent.span_id == step_span.context.span_id
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.request.model"] == "gpt-x"
        assert span.attributes["agentsvc.structured_mode"] == "json_schema"
    assert failed.attributes["error.type"] == "5xx" and not failed.status.is_ok
    assert ok.attributes["gen_ai.usage.input_tokens"] == 20 and ok.attributes["gen_ai.usage.output_tokens"] == 12
    assert "error.type" not in ok.attributes
    # laid end to end after the rate-limit wait
    assert failed.start_time == step_span.start_time + 100_000_000
    assert ok.start_time == failed.end_time and ok.end_time == ok.start_time + 900_000_000
    # a snapshot saved again as finished sends no second session span
    asyncio.run(traces.snapshot_saved(dict(snapshot, status="done", status_changed_at=T0)))
    assert len(exporter.get_finished_spans()) == 4


def test_a_tool_call_that_waited_for_approval_and_a_child_session():
    traces, exporter = make()
    parent = {"session_id": "P", "agent_id": "A", "status": "running", "created_at": T0, "config": {}}
    asyncio.run(traces.step_persisted(parent, {"session_id": "P", "iteration": 2, "status": "ok",
                                               "latency_ms": 1.0, "created_at": T0}))
    row = {"id": "CALL1", "session_id": "P", "iteration": 2, "name": "spawn_agent", "call_id": "c-1",
           "status": "waiting_approval", "created_at": T0, "started_at": None, "finished_at": None,
           "attempts": 0, "decided_by": None}
    asyncio.run(traces.tool_call_updated(row))
    assert len(exporter.get_finished_spans()) == 1  # only the step: the call has not ended
    asyncio.run(traces.tool_call_updated(dict(row, status="success", decided_by="ACT",
                                              started_at=T0 + timedelta(seconds=5),
                                              finished_at=(T0 + timedelta(seconds=6)).isoformat())))
    # the child's session id is the spawn call's id (tools/spawn_agent.py)
    child = {"session_id": "CALL1", "agent_id": "B", "status": "done", "created_at": T0 + timedelta(seconds=6),
             "status_changed_at": T0 + timedelta(seconds=9), "parent_session_id": "P", "root_session_id": "P",
             "subagent": {"spawned_by": "CALL1"}, "name": "helper"}
    asyncio.run(traces.step_persisted(child, {"session_id": "CALL1", "iteration": 0, "status": "done",
                                              "latency_ms": 5.0, "created_at": T0 + timedelta(seconds=8)}))
    asyncio.run(traces.snapshot_saved(child))
    spans = by_name(exporter)
    call, wait = spans["execute_tool spawn_agent"], spans["approval wait"]
    assert call.parent.span_id == tracing.step_span_id("P", 2)
    assert call.context.span_id == tracing.tool_span_id("CALL1")
    assert call.attributes["gen_ai.tool.name"] == "spawn_agent"
    assert call.attributes["gen_ai.operation.name"] == "execute_tool"
    assert call.start_time == ns(T0) and call.end_time == ns(T0 + timedelta(seconds=6))
    assert [e.name for e in call.events] == ["run"]
    assert wait.parent.span_id == call.context.span_id
    assert wait.end_time == ns(T0 + timedelta(seconds=5)) and wait.attributes["agentsvc.decision"] == "approved"
    session = spans["session helper"]
    assert session.parent.span_id == call.context.span_id
    assert spans["step 0"].parent.span_id == session.context.span_id
    assert {s.context.trace_id for s in exporter.get_finished_spans()} == {tracing.trace_id("P")}


def test_ask_user_gets_a_question_span_and_a_denial_its_wait():
    traces, exporter = make()
    asyncio.run(traces.tool_call_updated({"id": "Q1", "session_id": "S", "iteration": 0, "name": "ask_user",
                                          "status": "success", "created_at": T0, "finished_at": T0,
                                          "args": {"question": "?", "choices": ["a", "b"]}}))
    asyncio.run(traces.tool_call_updated({"id": "D1", "session_id": "S", "iteration": 0, "name": "shell",
                                          "status": "denied", "decided_by": "ACT", "created_at": T0,
                                          "finished_at": T0 + timedelta(seconds=2)}))
    spans = by_name(exporter)
    assert spans["question"].parent.span_id == tracing.tool_span_id("Q1")
    assert spans["question"].attributes["agentsvc.answered"] is True
    assert spans["approval wait"].attributes["agentsvc.decision"] == "denied"
    assert spans["approval wait"].parent.span_id == tracing.tool_span_id("D1")


def test_the_same_ids_in_another_process():
    """A session resumed after a crash (a new provider) continues the same trace under the same session span."""
    first, a = make()
    second, b = make()
    snapshot = {"session_id": "S", "status": "running", "created_at": T0, "config": {}}
    asyncio.run(first.step_persisted(snapshot, {"session_id": "S", "iteration": 0, "status": "ok",
                                                "latency_ms": 1, "created_at": T0}))
    asyncio.run(second.step_persisted(snapshot, {"session_id": "S", "iteration": 1, "status": "ok",
                                                 "latency_ms": 1, "created_at": T0}))
    (one,), (two,) = a.get_finished_spans(), b.get_finished_spans()
    assert one.context.trace_id == two.context.trace_id
    assert one.parent.span_id == two.parent.span_id == tracing.session_span_id("S")


class Refusing(InMemorySpanExporter):
    def export(self, spans):
        return SpanExportResult.FAILURE


def test_drops_are_counted_when_the_queue_is_full_or_the_receiver_refuses():
    provider, ids, drops = tracing.provider(exporter=Refusing(), max_queue_size=4)
    traces = tracing.Tracing(provider, ids, drops)
    snapshot = {"session_id": "S", "status": "running", "created_at": T0, "config": {}}
    for i in range(50):
        asyncio.run(traces.step_persisted(snapshot, {"session_id": "S", "iteration": i, "status": "ok",
                                                     "latency_ms": 1, "created_at": T0}))
    asyncio.run(traces.close())  # what was queued is built, tried, refused, and counted
    assert drops.dropped == 50


class Kept:
    """The model_io table of a store (store/model_io.py), as the observer reads it."""

    def __init__(self, rows):
        self.rows = rows

    def of_step(self, session_id, iteration):
        return self.rows


class FakeStore:
    def __init__(self, rows):
        self.model_io = Kept(rows)


def test_prompts_and_completions_only_when_the_operator_opts_in():
    assert not tracing.captures_content({}) and tracing.captures_content(
        {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    kept = [{"request": {"messages": [{"role": "user", "content": "Plan a trip"}]}, "reply": '{"text": "ok"}'}]
    step = {"session_id": "S", "iteration": 0, "status": "ok", "latency_ms": 10, "created_at": T0,
            "usage": {"calls": [{"model": "m", "attempts": [attempt(1, "timeout", 5, 0, 1.0),
                                                            attempt(2, "ok", 5, 3, 2.0)]}]}}
    snapshot = {"session_id": "S", "status": "running", "created_at": T0}
    for capture in (False, True):
        exporter = InMemorySpanExporter()
        provider, ids, drops = tracing.provider(processor=SimpleSpanProcessor(exporter))
        traces = tracing.Tracing(provider, ids, drops, store=FakeStore(kept), capture_content=capture,
                                 build_in_thread=capture)  # both ways: the thread's spans are there after close()

        async def run():
            await traces.step_persisted(snapshot, step)
            await traces.close()
        asyncio.run(run())
        chats = [s for s in exporter.get_finished_spans() if s.name == "chat m"]
        assert len(chats) == 2
        if not capture:
            assert not any("gen_ai.input.messages" in s.attributes for s in chats)
            continue
        first, last = chats
        assert "gen_ai.input.messages" not in first.attributes  # the kept request is the last attempt's
        assert "Plan a trip" in last.attributes["gen_ai.input.messages"]
        assert '\\"text\\": \\"ok\\"' in last.attributes["gen_ai.output.messages"]


def test_an_approval_wait_a_restarted_process_learns_from_the_loaded_rows_and_a_result_is_no_approval():
    traces, exporter = make()
    row = {"id": "C", "session_id": "S", "iteration": 1, "name": "add", "status": "waiting_approval",
           "created_at": T0, "started_at": None, "finished_at": None, "decided_by": None}
    asyncio.run(traces.tool_phase_loaded(object(), [row]))  # a new process recovering the step
    asyncio.run(traces.tool_call_updated(dict(row, status="success", decided_by="ACT", started_at=T0,
                                              finished_at=T0)))
    # a spawn_agent that waited for its child ran first, then got the child's result: no approval
    asyncio.run(traces.tool_call_updated({"id": "K", "session_id": "S", "iteration": 1, "name": "spawn_agent",
                                          "status": "success", "decided_by": "child:K:1", "created_at": T0,
                                          "started_at": T0, "finished_at": T0}))
    waits = [s for s in exporter.get_finished_spans() if s.name == "approval wait"]
    assert [w.parent.span_id for w in waits] == [tracing.tool_span_id("C")]


REQUEST = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_step_after_an_action_links_to_the_request_that_queued_it():
    traces, exporter = make()
    snapshot = {"session_id": "S1", "agent_id": "A1", "status": "running", "created_at": T0}
    step = lambda n: {"session_id": "S1", "iteration": n, "status": "ok", "latency_ms": 5.0,  # noqa: E731
                      "created_at": (T0 + timedelta(seconds=n + 1)).isoformat()}
    asyncio.run(traces.action_started({"id": "ACT1", "type": "create", "session_id": "S1",
                                       "payload": {"moniker": "scripted", "traceparent": REQUEST}}))
    asyncio.run(traces.action_started({"id": "ACT0", "type": "pause", "session_id": "S1",
                                       "payload": {"traceparent": REQUEST}}))  # no step follows a pause
    asyncio.run(traces.step_persisted(snapshot, step(0)))
    asyncio.run(traces.action_started({"id": "ACT2", "type": "resume", "session_id": "S1", "payload": {}}))
    asyncio.run(traces.action_started({"id": "ACT3", "type": "tool_approve", "session_id": "S1",
                                       "payload": {"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01"}}))
    asyncio.run(traces.step_persisted(snapshot, step(1)))
    asyncio.run(traces.step_persisted(snapshot, step(2)))
    first, second, third = exporter.get_finished_spans()
    assert first.attributes["agentsvc.action_ids"] == ("ACT1",)
    assert first.attributes["agentsvc.action_types"] == ("create",)
    [link] = first.links
    assert link.context.trace_id == 0x4bf92f3577b34da6a3ce929d0e0e4736 and link.context.span_id == 0x00f067aa0ba902b7
    assert link.context.is_remote and link.context.trace_flags.sampled
    assert link.attributes["agentsvc.action_id"] == "ACT1"
    assert first.context.trace_id == tracing.trace_id("S1")  # linked, not re-parented: the session keeps its trace
    assert second.attributes["agentsvc.action_ids"] == ("ACT2", "ACT3")
    assert not second.links  # no traceparent, and an invalid one (a zero trace id)
    assert "agentsvc.action_ids" not in third.attributes and not third.links


def test_an_action_of_another_session_links_nothing_here():
    traces, exporter = make()
    asyncio.run(traces.action_started({"id": "ACT1", "type": "create", "session_id": "S2",
                                       "payload": {"traceparent": REQUEST}}))
    asyncio.run(traces.step_persisted({"session_id": "S1", "created_at": T0},
                                      {"session_id": "S1", "iteration": 0, "created_at": T0.isoformat()}))
    [span] = exporter.get_finished_spans()
    assert not span.links and "agentsvc.action_ids" not in span.attributes


def test_spans_are_built_on_a_thread_of_their_own_off_the_event_loop():
    """The hooks only hand the rows over; the builder thread makes the spans, and
    what finds its queue full is dropped and counted."""
    import threading

    exporter = InMemorySpanExporter()
    provider, ids, drops = tracing.provider(processor=SimpleSpanProcessor(exporter))
    traces = tracing.Tracing(provider, ids, drops)
    built_on = []
    emitter = traces._builder.emitter
    original = emitter.emit_step
    emitter.emit_step = lambda *args: (built_on.append(threading.current_thread().name), original(*args))
    snapshot = {"session_id": "S", "status": "running", "created_at": T0}

    async def run():
        for i in range(3):
            await traces.step_persisted(snapshot, {"session_id": "S", "iteration": i, "created_at": T0})
        await traces.close()
    asyncio.run(run())
    assert [s.name for s in exporter.get_finished_spans()] == ["step 0", "step 1", "step 2"]
    assert set(built_on) == {"trace span builder"}

    blocked = threading.Event()

    built_with = provider

    class Held:
        provider = built_with
        emit_held = blocked.wait

        def emit_step(self, *args):
            pass

    builder = tracing.SpanBuilder(Held(), drops, size=2)
    builder.submit("held")  # the thread holds this one
    before = drops.dropped
    for _ in range(5):
        builder.submit("step")
    assert drops.dropped - before >= 3  # at most 2 wait in the queue
    blocked.set()
    builder.close()
