"""Tool calling in the ``baml`` moniker (StepFrame-v1), against the scripted
OpenAI-compatible server: the real generated BAML client makes real HTTP calls.

The moniker is stepped in-process here (a StepContext and a FrameIn carrying
tool_results); the end-to-end flow through the runner is in
test_baml_tools_service.py.
"""
import asyncio
import json

import pytest

from monikers import baml_moniker
from monikers.memory import own
from monikers.frame import FrameIn, InboxItem, StepContext, ToolResult
from tests.fake_openai import FakeOpenAI, Reply, scripted

ADD = {"name": "demo.add", "description": "Add two integers.",
       "args_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]},
       "timeout_s": 60, "idempotent": False, "needs_approval": False, "external": False}
FETCH = {"name": "http_fetch", "description": "HTTP GET a URL.",
         "args_schema": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}}


@pytest.fixture(autouse=True)
def clean_llm_env(monkeypatch):
    for name in ("AGENTSVC_LLM_BASE_URL", "AGENTSVC_LLM_MODEL", "AGENTSVC_LLM_API_KEY",
                 "AGENTSVC_LLM_TEMPERATURE", "AGENTSVC_LLM_TIMEOUT_S"):
        monkeypatch.delenv(name, raising=False)


def reply(**fields) -> Reply:
    frame = {"step": "0", "next_step": "1", "state": {}, "done": False, **fields}
    return Reply(json.dumps(frame))


def step(llm: dict, frame: FrameIn, tools=()):
    """One step on the endpoint ``llm`` names (``llm_endpoints.llm(server)``)."""
    ctx = StepContext(task="add things up", agent_id="a1", session_id="s1", iteration=0, tools=list(tools),
                      config={"llm": llm})
    return asyncio.run(baml_moniker.baml_step(frame, ctx))


def test_the_model_sees_the_allowed_tools_and_its_calls_become_frame_out_tool_calls(llm_endpoints):
    calls = [{"name": "demo.add", "args": {"a": 2, "b": 40}},
             {"name": "http_fetch", "args": {"url": "https://example.org/x", "n": 1.0, "deep": {"k": [1, None]}}}]
    with FakeOpenAI(scripted(reply(tool_calls=calls, done=True, text="adding"))) as server:
        out = step(llm_endpoints.llm(server), FrameIn(step="0"), tools=[ADD, FETCH])
        prompt = server.requests[0].prompt
    assert [c.model_dump() for c in out.tool_calls] == [{"id": None, **c} for c in calls]
    assert json.dumps(out.tool_calls[1].args, sort_keys=True) == json.dumps(calls[1]["args"], sort_keys=True)
    assert out.done is False, "a step with tool calls is never the last"
    assert out.text == "adding"
    assert "Only these" in prompt and "You have no tools" not in prompt
    assert '"name": "demo.add"' in prompt and "Add two integers." in prompt
    assert '"required": ["a", "b"]' in prompt  # the args schema, as JSON
    assert "tool_results:" not in prompt  # nothing to report on the first step


def test_tool_results_and_inbox_reach_the_next_prompt(llm_endpoints):
    results = [ToolResult(id="c1", name="demo.add", status="success", result={"result": 42}),
               ToolResult(id="c2", name="http_fetch", status="denied", error="host not allowed"),
               ToolResult(id="c3", name="demo.slow", status="unknown", error="outcome unknown, check before repeating")]
    inbox = [InboxItem(kind="guidance", text="hurry up"), InboxItem(kind="interrupted_step", text="step 3 was cut")]
    frame = FrameIn(step="1", state={"asked": "2+40"}, guidance="hurry up", tool_results=results, inbox=inbox)
    with FakeOpenAI(scripted(reply(step="1", next_step="2", done=True, data={"sum": 42}))) as server:
        out = step(llm_endpoints.llm(server), frame, tools=[ADD])
        prompt = server.requests[0].prompt
    assert out.done is True and out.data == {"sum": 42} and out.tool_calls == []
    line = next(line for line in prompt.splitlines() if line.strip().startswith("tool_results:"))
    shown = json.loads(line.split("tool_results:", 1)[1])
    assert shown == [r.model_dump(exclude_none=True) for r in results]  # in call order, with every status
    inbox_line = next(line for line in prompt.splitlines() if line.strip().startswith("inbox:"))
    assert json.loads(inbox_line.split("inbox:", 1)[1]) == [{"kind": "interrupted_step", "text": "step 3 was cut"}]
    assert prompt.count("hurry up") == 1  # guidance is shown once, not again from the inbox


def test_without_tools_the_prompt_says_so_and_v0_replies_still_parse(llm_endpoints):
    v0_reply = Reply(json.dumps({"step": "0", "next_step": "1", "state": {"n": 1}, "done": False}))
    with FakeOpenAI(scripted(v0_reply)) as server:
        out = step(llm_endpoints.llm(server), FrameIn(step="0"))
        prompt = server.requests[0].prompt
    assert out.tool_calls == [] and own(out.state) == {"n": 1}
    assert "You have no tools" in prompt and "\"args_schema\":" not in prompt and "Only these" not in prompt


def test_malformed_tool_calls_are_asked_again_not_dropped_or_blanked(llm_endpoints):
    """BAML alone would drop a call without a name and turn unreadable args
    into {}: the moniker re-asks instead, telling the model what was wrong."""
    good = [{"name": "demo.add", "args": {"a": 1, "b": 2}}]
    script = scripted(reply(tool_calls=[{"args": {"a": 1}}, good[0]]),
                      reply(tool_calls=[{"name": "demo.add", "args": "a=1"}]),
                      reply(tool_calls=good))
    with FakeOpenAI(script) as server:
        out = step(llm_endpoints.llm(server, max_reasks=2), FrameIn(step="0"), tools=[ADD])
        prompts = [r.prompt for r in server.requests]
    assert [c.model_dump(exclude_none=True) for c in out.tool_calls] == good
    assert len(prompts) == 3
    assert "tool_calls[0] must be an object with a non-empty string name" in prompts[1]
    assert "tool_calls[0].args is a string that is not JSON" in prompts[2]


def test_lenient_but_faithful_call_shapes(llm_endpoints):
    """Args given as JSON text (OpenAI style) are decoded; a call with no args
    gets {}; a reply in prose or a code fence still yields its calls."""
    frame = {"step": "0", "next_step": "1", "state": {}, "done": False,
             "tool_calls": [{"name": "demo.add", "args": '{"a": 5, "b": 6}'}, {"name": "clock.now"}]}
    fenced = Reply("Let me add those.\n```json\n" + json.dumps(frame) + "\n```\n")
    with FakeOpenAI(scripted(fenced)) as server:
        out = step(llm_endpoints.llm(server), FrameIn(step="0"), tools=[ADD])
    assert [c.model_dump(exclude_none=True) for c in out.tool_calls] == [
        {"name": "demo.add", "args": {"a": 5, "b": 6}}, {"name": "clock.now", "args": {}}]


def test_too_many_calls_in_one_step_are_asked_again(llm_endpoints):
    many = [{"name": "demo.add", "args": {"a": i, "b": i}} for i in range(40)]
    with FakeOpenAI(scripted(reply(tool_calls=many), reply(tool_calls=many[:2]))) as server:
        out = step(llm_endpoints.llm(server, max_reasks=1), FrameIn(step="0"), tools=[ADD])
        assert len(server.requests) == 2
        assert "tool_calls" in server.requests[1].prompt.split("rejected:", 1)[1]
    assert len(out.tool_calls) == 2


def test_a_reply_cut_by_the_token_cap_keeps_only_the_calls_it_wrote_whole(llm_endpoints):
    """A reply cut inside its tool_calls is not JSON; BAML's lenient parse read the
    call it was cut in as a call to "spawn" (SmolLM2 under the real-model tier,
    cut at max_tokens inside "spawn_agent").  Only the calls written whole are
    taken; the one cut short was never asked for."""
    whole = {"name": "demo.add", "args": {"a": 1, "b": 2}}
    head = '{"step": "0", "next_step": "1", "done": false, "tool_calls": [' + json.dumps(whole)
    for cut, expected in ((head + ', {"name": "demo.a', [whole]),  # cut in the second call's name
                          (head + ', {"name": "demo.add", "args": {"a": 3, "b"', [whole]),  # in its args
                          ('{"step": "0", "next_step": "1", "done": false, "tool_calls": [{"name": "spaw', []),
                          (head + '], "text": "adding", "state": {"n": ', [whole])):  # after the list
        with FakeOpenAI(scripted(Reply(cut))) as server:
            out = step(llm_endpoints.llm(server), FrameIn(step="0"), tools=[ADD])
        assert [c.model_dump(exclude_none=True) for c in out.tool_calls] == expected, cut
