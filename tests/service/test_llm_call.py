"""What monikers/llm_call.py promises, by failure injection against the fake
OpenAI-compatible server (tests/fake_openai.py): the real generated BAML client
makes real HTTP requests, so every request body asserted here is what a server
would get.

1. The request's shape: the reply's JSON Schema as ``response_format`` (the
   frame's ``tool_calls`` shaped by the session's tools), the structured modes,
   ``max_tokens``, ``seed``, streaming with usage; DecideNextMove's strict schema.
2. ``auto`` steps down per base URL on a 400 naming the field, and remembers;
   an explicit mode does not step down.
3. Every HTTP attempt is counted, failed ones with their tokens (estimated when
   the server gave none), in the step's usage, the session's totals and budgets.
4. Bounded: a timeout is retried once (the retry asked for fewer tokens when the
   first was generating), the step's deadline ends the call first, 5xx and 429
   retries stop.
5. A cancelled call aborts its HTTP request.
6. Live output: deltas at most ten a second, and end to end as ``step_delta``
   events of ``GET /api/stream`` before the step they belong to.
"""
import asyncio
import itertools
import json
import threading
import time
from typing import NamedTuple

import pytest
import requests

from monikers import baml_moniker, llm_call, output_schemas
from monikers.frame import DEFAULT_TOOL_CALLS, FrameIn, InboxItem, StepContext, StepError
from monikers.orchestrator import orchestrator_step
from runtime.base import usage as usage_math
from tests import fake_openai
from tests.fake_openai import FakeOpenAI, Reply, scripted
from tests.harness import Service, wait_for
from tests.baml_sessions import run_sessions as baml_run_sessions
from tests.step_stream import Reader

ADD = {"name": "demo.add", "description": "Add two integers.",
       "args_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]}}
FETCH = {"name": "http_fetch", "description": "HTTP GET a URL.",
         "args_schema": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}}
CLOCK = {"name": "clock.now", "description": "The time."}  # no args schema: any object


@pytest.fixture(autouse=True)
def clean_llm_env(monkeypatch):
    """The developer's own LLM settings must not leak into these tests."""
    for name in ("AGENTSVC_LLM_BASE_URL", "AGENTSVC_LLM_MODEL", "AGENTSVC_LLM_API_KEY", "AGENTSVC_LLM_TEMPERATURE",
                 "AGENTSVC_LLM_TIMEOUT_S", "AGENTSVC_LLM_MAX_TOKENS", "AGENTSVC_LLM_STRUCTURED",
                 "AGENTSVC_LLM_STREAM"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def fresh_learned_modes():
    """The structured modes ``auto`` learned live for the process: each test starts without them."""
    llm_call._learned_modes.clear()
    yield
    llm_call._learned_modes.clear()


@pytest.fixture
def fake(llm_endpoints):
    """``fake(responder)`` starts a fake server, an endpoint of this process's (``server.endpoint``, its
    name); ``fake.release`` ends the waits of :func:`hanging` ones."""
    servers = []
    release = threading.Event()

    def start(responder):
        servers.append(FakeOpenAI(responder).start())
        servers[-1].endpoint = llm_endpoints.serve(servers[-1])
        return servers[-1]
    start.release = release
    yield start
    release.set()
    for server in servers:
        server.stop()


class Write(NamedTuple):
    base_url: str
    request: int
    at: float
    outcome: str


@pytest.fixture
def writes(monkeypatch):
    """Every streamed event the fake servers write, as ``Write(base_url, request, at, outcome)``: ``request``
    tells one request's events from another's (the fake answers one request per connection), ``at`` is a
    ``time.monotonic()``, ``outcome`` "ok" or the name of the error the write met (BrokenPipeError: the
    client hung up)."""
    log = []
    original = fake_openai._Handler._event
    numbers = itertools.count(1)

    def event(self, payload):
        if not hasattr(self, "request_number"):
            self.request_number = next(numbers)
        try:
            original(self, payload)
        except BaseException as exc:
            log.append(Write(self.server.fake.base_url, self.request_number, time.monotonic(), type(exc).__name__))
            raise
        log.append(Write(self.server.fake.base_url, self.request_number, time.monotonic(), "ok"))
    monkeypatch.setattr(fake_openai._Handler, "_event", event)
    return log


def hanging(release: threading.Event):
    """A server that never answers (until the test ends)."""
    def respond(_request):
        release.wait(120)
        return Reply(status=503, content="released")
    return respond


def frame(step="0", next_step="1", state=None, *, text=None, done=False) -> str:
    return json.dumps({"step": step, "next_step": next_step, "state": state or {}, "text": text, "done": done})


LONG = frame(state={"notes": "n" * 60}, text="a long reply " * 20, done=True)  # ~390 characters


def slow(content: str = LONG, *, chunk_chars: int = 2, chunk_delay_s: float = 0.05, **extra) -> Reply:
    """A streamed reply of ``len(content) / chunk_chars`` chunks, ``chunk_delay_s`` apart."""
    return Reply(content, chunk_chars=chunk_chars, chunk_delay_s=chunk_delay_s, **extra)


def context(server, *, tools=(), on_output=None, deadline=None, **llm) -> StepContext:
    return StepContext(task="test the call", agent_id="a1", session_id="s1", iteration=0, tools=list(tools),
                       on_output=on_output, deadline=deadline,
                       config={"llm": {"endpoint": server.endpoint, "model": "fake-model", **llm}})


def step(ctx: StepContext, frame_in: FrameIn | None = None):
    return asyncio.run(baml_moniker.baml_step(frame_in or FrameIn(step="0"), ctx))


def step_error(ctx: StepContext) -> str:
    with pytest.raises(StepError) as caught:
        step(ctx)
    return str(caught.value)


def attempts(ctx: StepContext) -> list[dict]:
    return [a for call in ctx.usage_calls for a in call["attempts"]]


def outcomes(ctx: StepContext) -> list[str]:
    return [a["outcome"] for a in attempts(ctx)]


def received(server) -> list[dict]:
    """The request bodies the server got."""
    return [r.body for r in server.requests]


# ---- sessions in this process ---------------------------------------------------------

def run_sessions(tmp_path, *sessions, statuses=("done", "error", "stopped"), timeout_s=60.0):
    """test_baml_moniker's in-process driver, with more time by default."""
    return baml_run_sessions(tmp_path, *sessions, statuses=statuses, timeout_s=timeout_s)


def steps_of(store, snapshot) -> list[dict]:
    return store.steps.search(session_id=snapshot["session_id"])


# ---- 1. what is sent ----------------------------------------------------------------


def test_by_default_the_frame_schema_is_sent_streamed_with_usage_and_a_token_cap(fake):
    server = fake(scripted(then=Reply(frame(done=True))))
    out = step(context(server))
    assert out.done is True
    [body] = received(server)
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "RunMonikerStep", "schema": output_schemas.frame_schema([]), "strict": False}}
    assert body["response_format"]["json_schema"]["schema"]["properties"]["tool_calls"]["maxItems"] == 0, \
        "without tools the model may call none"
    assert body["max_tokens"] == 512, "a step frame under json_schema: what the bounded frame needs"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert "seed" not in body


def test_the_schema_allows_exactly_the_sessions_tools_with_their_args(fake):
    server = fake(scripted(then=Reply(frame(done=True))))
    step(context(server, tools=[ADD, FETCH, CLOCK]))
    [body] = received(server)
    calls = body["response_format"]["json_schema"]["schema"]["properties"]["tool_calls"]
    assert calls["maxItems"] == DEFAULT_TOOL_CALLS
    allowed = calls["items"]["anyOf"]
    assert [c["properties"]["name"] for c in allowed] == [{"const": t["name"]} for t in (ADD, FETCH, CLOCK)]
    assert [c["properties"]["args"] for c in allowed] == [ADD["args_schema"], FETCH["args_schema"],
                                                          {"type": "object"}]
    assert all(c["required"] == ["name", "args"] and c["additionalProperties"] is False for c in allowed)


@pytest.mark.parametrize("llm, expected", [
    ({"structured": "json_object"}, {"response_format": {"type": "json_object"}}),
    ({"structured": "off"}, {"response_format": None}),
    ({"max_tokens": 77}, {"max_tokens": 77}),
    ({"seed": 42}, {"seed": 42}),
    ({"stream": False}, {"stream": None, "stream_options": None}),
], ids=["json_object", "off", "max_tokens", "seed", "no_stream"])
def test_settings_shape_the_request(fake, llm, expected):
    server = fake(scripted(then=Reply(frame(done=True), prompt_tokens=12, completion_tokens=3)))
    ctx = context(server, **llm)
    assert step(ctx).done is True
    [body] = received(server)
    assert {key: body.get(key) for key in expected} == expected
    [call] = ctx.usage_calls
    assert (call["input_tokens"], call["output_tokens"]) == (12, 3), "the server's usage, streamed or not"
    assert call["structured"] == llm.get("structured", "json_schema")


def test_grammar_sends_the_frame_schema_as_a_compact_grammar_and_caps_the_frame_at_256(fake):
    """``grammar`` (for llama.cpp): the session's own frame schema, its tools
    included, as GBNF in the ``grammar`` field and no ``response_format``; the
    frame's default cap is 256 tokens, what a compact frame needs."""
    server = fake(scripted(then=Reply(frame(done=True))))
    ctx = context(server, structured="grammar", tools=[ADD, FETCH])
    assert step(ctx).done is True
    [body] = received(server)
    assert "response_format" not in body and body["max_tokens"] == 256
    grammar = body["grammar"]
    assert grammar.startswith("root ::= ") and "demo.add" in grammar and "http_fetch" in grammar
    assert "\\n" not in grammar, "no rule lets a newline stand between tokens"
    assert 'ws ::= " "?' in grammar.splitlines()
    [call] = ctx.usage_calls
    assert call["structured"] == "grammar"
    assert "demo.add" in grammar and '(ws "," ws reply-tool-calls-item-3){0,1}' in grammar, \
        "at most 2 calls a step under grammar unless llm.max_tool_calls says otherwise"


def test_grammar_for_a_reply_without_a_schema_asks_for_json(fake):
    """A grammar comes from a schema; a function with none is asked for JSON."""
    from monikers.llm_settings import LLMSettings
    settings = LLMSettings(endpoint="e", base_url="http://x", model="m", api_key="", temperature=0, timeout_s=1,
                           max_tokens=None, max_reasks=0, prices=None, structured="grammar")
    assert llm_call.structured_mode(settings, None) == "json_object"
    assert llm_call.structured_mode(settings, {"type": "object"}) == "grammar"


def test_the_orchestrators_decision_schema_is_sent_strict(fake):
    decision = {"action": "answer", "reply": "You are welcome.", "task": None, "agent_name": None}
    server = fake(scripted(then=Reply(json.dumps(decision))))
    ctx = StepContext(task="help the user", agent_id="a1", session_id="s1", iteration=0,
                      config={"llm": {"endpoint": server.endpoint, "model": "fake-orchestrator"},
                              "tools": ["spawn_agent", "message_agent"]})
    out = asyncio.run(orchestrator_step(FrameIn(step="listen", inbox=[InboxItem(kind="message", text="thanks!")]),
                                        ctx))
    assert out.text == "You are welcome."
    [body] = received(server)
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "DecideNextMove", "schema": output_schemas.DECISION, "strict": True}}
    [call] = ctx.usage_calls
    assert call["structured"] == "json_schema" and [a["outcome"] for a in call["attempts"]] == ["ok"]


# ---- 2. stepping down ----------------------------------------------------------------------


def test_auto_steps_down_on_a_400_naming_the_field_and_remembers_it_per_base_url(fake):
    refusing = fake(scripted(then=Reply(frame(done=True))))
    refusing.reject_fields = {"response_format"}
    other = fake(scripted(then=Reply(frame(done=True))))

    first = context(refusing)
    assert step(first).done is True
    assert [b.get("response_format", {}).get("type") for b in received(refusing)] == \
        ["json_schema", "json_object", None]
    [call] = first.usage_calls
    assert call["structured"] == "off" and call["http_calls"] == 3
    assert [(a["outcome"], a["status"]) for a in call["attempts"]] == [("error", 400), ("error", 400), ("ok", 200)]
    assert all(a["input_tokens"] == a["output_tokens"] == 0 for a in call["attempts"][:2]), "a refusal costs nothing"

    second = context(refusing)
    assert step(second).done is True
    assert len(refusing.requests) == 4 and "response_format" not in received(refusing)[3], \
        "the next call starts at the remembered mode"
    assert outcomes(second) == ["ok"] and second.usage_calls[0]["structured"] == "off"

    third = context(other)
    assert step(third).done is True
    assert received(other)[0]["response_format"]["type"] == "json_schema", "another server is not affected"
    assert llm_call._learned_modes == {refusing.base_url: "off"}


def test_auto_stops_at_the_first_mode_the_server_takes(fake):
    """A server that takes JSON mode but not a schema (its 400 names json_schema)."""
    def respond(request):
        if (request.body.get("response_format") or {}).get("type") == "json_schema":
            return Reply(status=400, content="response_format json_schema is not supported")
        return Reply(frame(done=True))
    server = fake(respond)
    first, second = context(server), context(server)
    step(first)
    step(second)
    assert [b["response_format"]["type"] for b in received(server)] == ["json_schema", "json_object", "json_object"]
    assert [c["structured"] for c in first.usage_calls + second.usage_calls] == ["json_object", "json_object"]
    assert outcomes(first) == ["error", "ok"] and outcomes(second) == ["ok"]


def test_an_explicit_json_schema_is_not_stepped_down(fake):
    server = fake(scripted(then=Reply(frame(done=True))))
    server.reject_fields = {"response_format"}
    ctx = context(server, structured="json_schema")
    error = step_error(ctx)
    assert "HTTP 400" in error and "attempt 1: error 400" in error
    assert len(server.requests) == 1
    assert [(a["outcome"], a["status"]) for a in attempts(ctx)] == [("error", 400)]
    assert llm_call._learned_modes == {}


# ---- 3. every attempt counted -------------------------------------------------------------


def test_a_5xx_then_success_counts_both_attempts(fake):
    server = fake(scripted(Reply(status=503, content="busy"),
                           then=Reply(frame(done=True), prompt_tokens=11, completion_tokens=7)))
    ctx = context(server)
    assert step(ctx).done is True
    [call] = ctx.usage_calls
    assert call["http_calls"] == 2 and [(a["outcome"], a["status"]) for a in call["attempts"]] == \
        [("5xx", 503), ("ok", 200)]
    assert (call["input_tokens"], call["output_tokens"]) == (11, 7)
    usage = usage_math.summarize(ctx.usage_calls)
    assert (usage["attempts"], usage["failed_attempts"], usage["failed_tokens"]) == (2, 1, 0)


def test_a_429_then_success_counts_the_refused_attempt_as_no_tokens(fake):
    server = fake(scripted(Reply(status=429, content="slow down", headers={"Retry-After": "0"}),
                           then=Reply(frame(done=True), prompt_tokens=11, completion_tokens=7)))
    ctx = context(server)
    assert step(ctx).done is True
    refused, ok = attempts(ctx)
    assert (refused["outcome"], refused["status"], refused["input_tokens"], refused["output_tokens"]) == \
        ("429", 429, 0, 0)
    assert (ok["outcome"], ok["input_tokens"], ok["output_tokens"], ok["estimated"]) == ("ok", 11, 7, False)
    assert ctx.usage_calls[0]["http_calls"] == 2 and len(server.requests) == 2


def test_a_timeout_mid_stream_costs_its_prompt_and_what_was_written(fake, writes):
    server = fake(scripted(slow(), then=Reply(frame(done=True), prompt_tokens=11, completion_tokens=7)))
    ctx = context(server, timeout_s=1.0)
    assert step(ctx).done is True
    cut, ok = attempts(ctx)
    assert cut["outcome"] == "timeout" and cut["estimated"] is True and cut["status"] is None
    first_request = next(w.request for w in writes if w.base_url == server.base_url)
    written = len([w for w in writes if w.request == first_request and w.outcome == "ok"])
    assert 5 <= written < len(LONG) // 2, "the first reply was cut mid-stream"
    assert 0 < cut["output_tokens"] and abs(cut["output_tokens"] - written) <= max(3, written // 5), \
        f"{cut['output_tokens']} tokens counted for {written} chunks received"
    assert cut["input_tokens"] > 0
    assert (ok["outcome"], ok["input_tokens"], ok["output_tokens"], ok["estimated"]) == ("ok", 11, 7, False)
    [call] = ctx.usage_calls
    assert call["input_tokens"] == cut["input_tokens"] + 11 and call["output_tokens"] == cut["output_tokens"] + 7
    usage = usage_math.summarize(ctx.usage_calls)
    assert (usage["attempts"], usage["failed_attempts"], usage["failed_tokens"]) == \
        (2, 1, cut["input_tokens"] + cut["output_tokens"])


def test_an_estimated_attempt_costs_its_prompt_not_a_guess_at_a_reply(fake):
    """A timed-out attempt's estimated input is the prompt's size: the callers
    pass ``estimate_tokens(..., reply_tokens=0)`` for exactly that.  The fake
    counts the same prompt as ``len(prompt) // 4 + 1`` tokens."""
    server = fake(scripted(Reply(frame(done=True), delay_s=3.0), then=Reply(frame(done=True))))
    ctx = context(server, timeout_s=0.5)
    assert step(ctx).done is True
    cut, ok = attempts(ctx)
    assert cut["outcome"] == "timeout" and cut["estimated"] is True and cut["output_tokens"] == 0
    prompt = len(server.requests[0].prompt) // 4 + 1
    assert ok["input_tokens"] == prompt
    assert prompt / 3 <= cut["input_tokens"] <= prompt * 1.25, \
        f"estimated {cut['input_tokens']} input tokens for a prompt of about {prompt}"


def test_a_sessions_steps_and_totals_sum_every_attempt(tmp_path, fake):
    server = fake(scripted(
        Reply(status=503, content="busy"),
        Reply(frame("0", "1", {"n": 1}, text="one"), prompt_tokens=11, completion_tokens=7),
        slow(chunk_delay_s=0.1),
        Reply(frame("1", "2", {"n": 2}, text="two", done=True), prompt_tokens=13, completion_tokens=5)))
    store, [snap] = run_sessions(tmp_path, ("count", {"llm": {"endpoint": server.endpoint, "model": "fake-model",
                                                              "timeout_s": 1.5}}))
    assert snap["status"] == "done", snap["last_error"]
    first, second = (s["usage"] for s in steps_of(store, snap))
    assert [a["outcome"] for c in first["calls"] for a in c["attempts"]] == ["5xx", "ok"]
    assert (first["attempts"], first["failed_attempts"], first["failed_tokens"]) == (2, 1, 0)
    assert (first["input_tokens"], first["output_tokens"]) == (11, 7)
    [cut, ok] = second["calls"][0]["attempts"]
    assert (cut["outcome"], ok["outcome"]) == ("timeout", "ok") and cut["output_tokens"] > 0
    assert (second["attempts"], second["failed_attempts"], second["failed_tokens"]) == \
        (2, 1, cut["input_tokens"] + cut["output_tokens"])
    assert (second["input_tokens"], second["output_tokens"]) == (cut["input_tokens"] + 13, cut["output_tokens"] + 5)
    totals = snap["usage"]
    assert (totals["attempts"], totals["failed_attempts"], totals["failed_tokens"]) == \
        (4, 2, second["failed_tokens"])
    assert (totals["input_tokens"], totals["output_tokens"], totals["calls"]) == \
        (first["input_tokens"] + second["input_tokens"], first["output_tokens"] + second["output_tokens"], 2)


def test_a_token_budget_counts_failed_attempts(tmp_path, fake):
    """The step's successful attempt alone (18 tokens) is far under the budget;
    with its timed-out attempt it is over, and the session pauses."""
    server = fake(scripted(slow(), Reply(frame("0", "1", {"n": 1}), prompt_tokens=11, completion_tokens=7),
                           then=Reply(frame("1", "2", {"n": 2}, done=True), prompt_tokens=11, completion_tokens=7)))
    store, [snap] = run_sessions(tmp_path, ("count", {
        "budget_tokens": 200, "llm": {"endpoint": server.endpoint, "model": "fake-model", "timeout_s": 1.0}}),
        statuses=("paused", "done", "error", "stopped"))
    [only] = steps_of(store, snap)
    assert only["usage"]["failed_attempts"] == 1 and only["usage"]["failed_tokens"] > 0
    assert (snap["status"], snap["status_reason"]) == ("paused", "budget"), (snap["status"], snap["last_error"])
    assert snap["last_error"].startswith("budget: tokens:")
    assert snap["usage"]["input_tokens"] + snap["usage"]["output_tokens"] == 18 + only["usage"]["failed_tokens"]
    assert len(server.requests) == 2


# ---- 4. bounded ------------------------------------------------------------------------------


def test_a_timeout_is_retried_once_with_fewer_tokens_when_it_was_generating(fake):
    server = fake(scripted(then=slow(chunk_delay_s=0.04)))
    ctx = context(server, timeout_s=1.0)
    error = step_error(ctx)
    assert len(server.requests) == 2, "a timed-out request is tried at most once more"
    assert "timed out" in error and "attempt 1: timeout" in error and "attempt 2: timeout" in error
    first, retry = received(server)
    assert first["max_tokens"] == 512 and retry["max_tokens"] < first["max_tokens"], \
        "the retry asks for what the measured rate writes in time"
    assert outcomes(ctx) == ["timeout", "timeout"]
    assert all(a["output_tokens"] >= 8 and a["estimated"] for a in attempts(ctx))


def test_a_timeout_before_any_token_is_retried_once_unchanged(fake):
    server = fake(scripted(then=Reply(frame(done=True), delay_s=2.0)))
    ctx = context(server, timeout_s=0.5)
    error = step_error(ctx)
    assert "timed out" in error and len(server.requests) == 2
    assert [b["max_tokens"] for b in received(server)] == [512, 512], "the server was busy, not the reply long"
    assert outcomes(ctx) == ["timeout", "timeout"]


def test_the_steps_deadline_ends_the_call_with_our_error_well_before_the_request_timeout(tmp_path, fake):
    server = fake(hanging(fake.release))
    started = time.monotonic()
    store, [snap] = run_sessions(tmp_path, ("hang", {
        "step_timeout_s": 3, "llm": {"endpoint": server.endpoint, "model": "fake-model", "timeout_s": 60}}))
    elapsed = time.monotonic() - started
    assert snap["status"] == "error"
    assert elapsed < 30, f"the step took {elapsed:.1f}s: not bounded by its 3 s deadline"
    [row] = steps_of(store, snap)
    assert row["status"] == "error" and row["latency_ms"] < 3000, "ended before the runner cancelled it"
    assert not row["error"].startswith("step timed out"), f"the runner had to cancel it: {row['error']}"
    assert "deadline" in row["error"] and "attempt 1: timeout" in row["error"], row["error"]
    assert [a["outcome"] for c in row["usage"]["calls"] for a in c["attempts"]] == ["timeout"]
    assert row["usage"]["attempts"] == 1 and row["usage"]["failed_attempts"] == 1
    assert len(server.requests) == 1


def test_a_wait_for_retry_after_does_not_carry_an_attempt_past_the_deadline(fake):
    """A 429 with ``Retry-After: 2`` holds the next attempt at the gate for 2 s;
    that attempt's request timeout must be what is left of the deadline *after*
    the wait, or the step outlives its deadline and is cancelled from outside."""
    replies = [Reply(status=429, content="later", headers={"Retry-After": "2"})]

    def respond(_request):
        if replies:
            return replies.pop(0)
        fake.release.wait(120)  # then hangs
        return Reply(status=503, content="released")
    server = fake(respond)
    started = time.monotonic()
    ctx = context(server, deadline=started + 3.5, timeout_s=60, model="fake-retry-after")  # its own gate entry
    error = step_error(ctx)
    ended = time.monotonic() - started
    assert outcomes(ctx)[0] == "429" and ctx.usage_calls[0]["rate_wait_ms"] >= 1500
    assert ended <= 3.5, f"the call ended {ended:.1f}s after it started, past its 3.5 s deadline: {error}"


def test_5xx_retries_stop(fake):
    # a success after many failures: retries without end would end in it, not hang
    server = fake(scripted(*[Reply(status=500, content="boom")] * 30, then=Reply(frame(done=True))))
    ctx = context(server)
    error = step_error(ctx)
    assert "HTTP 500" in error
    assert len(server.requests) == llm_call.RETRIES + 1
    assert outcomes(ctx) == ["5xx"] * (llm_call.RETRIES + 1)


def test_429_retries_stop(fake):
    server = fake(scripted(*[Reply(status=429, content="slow down", headers={"Retry-After": "0"})] * 30,
                           then=Reply(frame(done=True))))
    ctx = context(server)
    error = step_error(ctx)
    assert "HTTP 429" in error
    assert len(server.requests) == llm_call.RATE_LIMITED_RETRIES + 1
    assert outcomes(ctx) == ["429"] * (llm_call.RATE_LIMITED_RETRIES + 1)


# ---- 5. cancellation -----------------------------------------------------------------------


def test_a_cancelled_call_aborts_its_request(fake, writes):
    server = fake(scripted(then=slow(LONG * 2, chunk_chars=2, chunk_delay_s=0.05)))  # ~20 s of stream
    deltas = []

    async def main():
        ctx = context(server, on_output=deltas.append)
        task = asyncio.create_task(baml_moniker.baml_step(FrameIn(step="0"), ctx))
        deadline = time.monotonic() + 30
        while len([w for w in writes if w.outcome == "ok"]) < 5:  # it is streaming
            assert time.monotonic() < deadline and not task.done(), "the stream never started"
            await asyncio.sleep(0.02)
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=10)
        took = time.monotonic() - cancelled_at
        # the loop still runs (a request left going would go on): the server sees the hang-up
        while not [w for w in writes if w.outcome != "ok"]:
            assert time.monotonic() - cancelled_at < 5, "the server kept streaming after the cancel"
            await asyncio.sleep(0.02)
        return ctx, cancelled_at, took

    ctx, cancelled_at, took = asyncio.run(main())
    assert took < 5, f"the cancelled call took {took:.1f}s to return"
    [call] = ctx.usage_calls
    [attempt] = call["attempts"]
    assert attempt["outcome"] == "cancelled" and attempt["estimated"] is True and attempt["output_tokens"] > 0
    hung_up = [w for w in writes if w.outcome != "ok"]
    assert hung_up[0].outcome in ("BrokenPipeError", "ConnectionResetError")
    sent = len([w for w in writes if w.outcome == "ok"])
    assert sent < len(LONG * 2) // 4, f"{sent} chunks were sent: the request was not aborted"


# ---- 6. live output ---------------------------------------------------------------------------


def test_live_output_comes_at_most_ten_times_a_second_and_ends_with_the_whole_reply(fake):
    content = frame(state={"k": "v" * 40}, text="hello world " * 8, done=True)
    server = fake(scripted(then=Reply(content, chunk_chars=len(content) // 40 + 1, chunk_delay_s=0.05)))
    deltas = []
    ctx = context(server, on_output=deltas.append)
    started = time.monotonic()
    out = step(ctx)
    elapsed = time.monotonic() - started
    assert out.done is True and out.text == "hello world " * 8
    assert len(deltas) >= 2
    assert len(deltas) <= 10 * elapsed + 3, f"{len(deltas)} deltas in {elapsed:.2f}s"
    assert [d["final"] for d in deltas] == [False] * (len(deltas) - 1) + [True]
    assert deltas[-1]["text"] == content
    texts = [d["text"] for d in deltas]
    assert all(content.startswith(t) for t in texts) and texts == sorted(texts, key=len), "a growing prefix"
    tokens = [d["tokens"] for d in deltas]
    assert tokens == sorted(tokens) and tokens[0] < tokens[-1]
    assert all({"function": "RunMonikerStep", "ask": 0, "mode": "json_schema", "attempt": 1}.items() <= d.items()
               for d in deltas)
    assert attempts(ctx)[0]["output_tokens"] > 0


def test_no_live_output_without_streaming(fake):
    server = fake(scripted(then=Reply(frame(done=True))))
    deltas = []
    assert step(context(server, on_output=deltas.append, stream=False)).done is True
    assert deltas == []


def test_streamed_steps_reach_the_stream_as_step_deltas_before_their_step(tmp_path_factory, fake):
    content = frame(state={"k": "v" * 40}, text="streamed slowly", done=True)
    go = threading.Event()  # the streamed reply starts once the client follows the session

    reader = None

    def deltas_seen() -> int:
        return sum(e.event == "step_delta" for e in reader.all()) if reader else 0

    def hold_the_second_half(i: int) -> None:
        # Deltas are live-only and dropped once their step is out: on a loaded machine
        # (load 12) the whole reply was read before any delta reached the stream, and
        # the step superseded them all.  The reply's second half waits for two of them.
        if i == 20:
            wait_for(lambda: deltas_seen() >= 2, timeout=120, what="two deltas on the stream")

    def respond(request):
        if request.body.get("stream"):
            go.wait(60)
            return Reply(content, chunk_chars=len(content) // 40 + 1, chunk_delay_s=0.1,  # 40 chunks, 4 s
                         before_chunk=hold_the_second_half)
        return Reply(content)
    server = fake(respond)
    root = tmp_path_factory.mktemp("llm_call_live")
    (root / "logs").mkdir()
    svc = Service(str(root / "data"), str(root / "logs"), env={"AGENTSVC_STREAM_KEEPALIVE_S": "0.5"}).start()
    try:
        llm = svc.endpoints.llm(server)  # the service's own endpoints file (the in-process one is this test's)
        streamed = svc.create("baml", task="stream it", config={"interval_s": 0, "llm": llm})
        reader = Reader(svc, f"session:{streamed['session_id']}")
        wait_for(lambda: any(e.event == "ready" for e in reader.all()), timeout=90, what="the stream to be ready")
        go.set()
        # longer than the hold above may keep the reply's second half (120 s)
        wait_for(lambda: any(e.event == "agent_step" for e in reader.all()), timeout=240, what="the step")
        plain = svc.create("baml", task="stream it", config={"interval_s": 0, "llm": {**llm, "stream": False}})
        svc.wait_status(plain["session_id"], "done", "error", timeout=60)
        svc.wait_status(streamed["session_id"], "done", "error", timeout=60)
        events = reader.all()
        [streamed_step] = svc.steps(streamed["session_id"])
        [plain_step] = svc.steps(plain["session_id"])
    finally:
        go.set()
        if reader is not None:
            reader.close()
        svc.stop()

    names = [e.event for e in events]
    at_step = names.index("agent_step")
    deltas = [e for e in events if e.event == "step_delta"]
    assert len(deltas) >= 2, names
    assert "step_delta" not in names[at_step:], "every delta comes before its step"
    assert all(e.id is None for e in deltas), "a step_delta never carries a cursor"
    data = [e.data["data"] for e in deltas]
    assert all(d["session_id"] == streamed["session_id"] and d["iteration"] == 0 for d in data)
    texts = [d["text"] for d in data]
    assert all(content.startswith(t) for t in texts) and texts == sorted(texts, key=len), "a growing prefix"
    assert events[at_step].data["data"]["iteration"] == 0
    # streaming changes nothing of the record
    for key in ("status", "text", "state", "data", "step_token", "next_step_token", "error"):
        assert streamed_step[key] == plain_step[key], key
    assert streamed_step["status"] == "done" and streamed_step["text"] == "streamed slowly"
    assert [len(s["usage"]["calls"][0]["attempts"]) for s in (streamed_step, plain_step)] == [1, 1]


def test_a_tool_schema_reaches_the_grammar_without_its_long_bounds():
    """llama.cpp spells a maxLength out character by character: spawn_agent's
    20,000-character task slowed sampling to a few tokens a second."""
    from monikers import output_schemas
    from tools.spawn_agent import SpawnArgs

    args = SpawnArgs.model_json_schema()
    assert args["properties"]["task"]["maxLength"] == 20_000
    sent = output_schemas.frame_schema([{"name": "spawn_agent", "args_schema": args}])
    [call] = sent["properties"]["tool_calls"]["items"]["anyOf"]
    assert "maxLength" not in call["properties"]["args"]["properties"]["task"]
    assert call["properties"]["args"]["properties"]["task"]["minLength"] == 1
    assert call["properties"]["args"]["required"] == ["task"]
    small = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 100}}}
    assert output_schemas.loosened(small) == small
