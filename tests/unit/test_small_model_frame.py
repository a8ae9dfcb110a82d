"""Issue 39: a frame a small model can write, working memory, no tool loops,
done when done.  Driven with the scripted OpenAI-compatible server
(tests/fake_openai.py) and the ``scripted`` moniker, never a real model.
"""
import asyncio
import json

import pytest

from monikers import baml_moniker, memory, output_schemas
from monikers.frame import FrameIn, StepContext, StepError, ToolResult
from monikers.llm_settings import resolve_settings
from tests.baml_sessions import run_sessions
from tests.fake_openai import FakeOpenAI, Reply, scripted
from tools.builtin import WAIT

WAIT_TOOL = WAIT.describe()


@pytest.fixture(autouse=True)
def clean_llm_env(monkeypatch):
    for name in ("AGENTSVC_LLM_BASE_URL", "AGENTSVC_LLM_MODEL", "AGENTSVC_LLM_API_KEY", "AGENTSVC_LLM_MAX_TOKENS",
                 "AGENTSVC_LLM_MAX_TOOL_CALLS", "AGENTSVC_LLM_TEMPERATURE", "AGENTSVC_LLM_TIMEOUT_S"):
        monkeypatch.delenv(name, raising=False)


def frame(**fields) -> str:
    return json.dumps({"step": "0", "text": None, "tool_calls": [], "done": False, "next_step": "1", "state": {},
                       **fields})


def step(llm: dict, frame_in: FrameIn, tools=(), task="what is the capital of France?"):
    ctx = StepContext(task=task, agent_id="a1", session_id="s1", iteration=0, tools=list(tools), config={"llm": llm})
    return asyncio.run(baml_moniker.baml_step(frame_in, ctx))


# ---- part 1: the frame ---------------------------------------------------------

def test_the_schema_and_the_prompt_put_the_answer_and_calls_before_done(llm_endpoints):
    schema = output_schemas.frame_schema([WAIT_TOOL])
    order = list(schema["properties"])
    assert order.index("text") < order.index("done") and order.index("tool_calls") < order.index("done")
    assert order.index("done") < order.index("next_step")
    with FakeOpenAI(scripted(Reply(frame(text="Paris", done=True)))) as server:
        step(llm_endpoints.llm(server), FrameIn(step="0"), tools=[WAIT_TOOL])
        prompt = server.requests[0].prompt
        sent = server.requests[0].body["response_format"]["json_schema"]["schema"]
    assert list(sent["properties"]) == order
    block = prompt[prompt.rindex("Answer in JSON"):] if "Answer in JSON" in prompt else prompt[-1500:]
    where = [block.index(f'"{name}"') if f'"{name}"' in block else block.index(f"{name}:") for name in
             ("text", "tool_calls", "done", "next_step", "state")]
    assert where == sorted(where), "the format block lists the fields in the schema's order"


def test_state_is_a_few_short_named_keys_and_calls_per_step_are_bounded(llm_endpoints):
    schema = output_schemas.frame_schema([WAIT_TOOL])
    state = schema["properties"]["state"]
    assert state["additionalProperties"] is False and len(state["properties"]) <= 6
    for value in state["properties"].values():
        assert value.get("maxLength", 0) <= 200 or value["type"] in ("array", "integer")
        if value["type"] == "array":
            assert value["maxItems"] <= 10 and value["items"]["maxLength"] <= 100
    assert schema["properties"]["tool_calls"]["maxItems"] == 4  # the default llm.max_tool_calls
    assert output_schemas.frame_schema([WAIT_TOOL], 1)["properties"]["tool_calls"]["maxItems"] == 1
    calls = [{"name": "wait", "args": {"seconds": n}} for n in range(3)]
    llm = llm_endpoints.llm  # a reply with more calls than llm.max_tool_calls is asked again
    with FakeOpenAI(scripted(Reply(frame(tool_calls=calls)), Reply(frame(tool_calls=calls[:2])))) as server:
        out = step(llm(server, max_tool_calls=2), FrameIn(step="0"), tools=[WAIT_TOOL])
        assert len(server.requests) == 2 and "at most 2 per step" in server.requests[1].prompt
    assert [c.args for c in out.tool_calls] == [{"seconds": 0}, {"seconds": 1}]


def test_waits_args_schema_is_exactly_one_of_seconds_or_until():
    schema = WAIT_TOOL["args_schema"]
    branches = schema["anyOf"]
    assert [b["required"] for b in branches] == [["seconds"], ["until"]]
    assert all(b["additionalProperties"] is False and b["type"] == "object" for b in branches)
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"seconds": 2}) and validator.is_valid({"until": "2026-01-01T00:00:00Z"})
    assert not validator.is_valid({}) and not validator.is_valid({"seconds": 2, "until": "2026-01-01T00:00:00Z"})


def test_max_tokens_defaults_per_mode_to_what_a_frame_needs(llm_endpoints):
    with FakeOpenAI(scripted(Reply(frame(text="Paris", done=True)))) as server:
        llm = llm_endpoints.llm(server)
        step(llm, FrameIn(step="0"))
        assert server.requests[0].body["max_tokens"] == 512  # json_schema: the grammar bounds a frame
    settings = resolve_settings({"llm": llm})
    assert settings.tokens_for("RunMonikerStep", "json_object") == 1024
    assert settings.tokens_for("SummarizeRecord", "json_schema") == 1024
    assert resolve_settings({"llm": {**llm, "max_tokens": 99}}).tokens_for("RunMonikerStep", "json_schema") == 99


def test_a_reply_cut_at_max_tokens_is_not_a_frame_it_is_asked_again_shorter(llm_endpoints):
    cut = frame(text="Paris", done=True)[:-1]  # BAML's lenient parser would close this and call it a frame
    with FakeOpenAI(scripted(Reply(cut, finish_reason="length"), Reply(frame(text="Paris.", done=True)))) as server:
        ctx_calls = []
        ctx = StepContext(task="capital of France?", agent_id="a1", session_id="s1", iteration=0,
                          config={"llm": llm_endpoints.llm(server)}, usage_calls=ctx_calls)
        out = asyncio.run(baml_moniker.baml_step(FrameIn(step="0"), ctx))
        assert len(server.requests) == 2 and "cut at the token limit" in server.requests[1].prompt
    assert out.text == "Paris." and out.done
    assert [a["outcome"] for a in ctx_calls[0]["attempts"]] == ["truncated"]
    assert ctx_calls[0]["attempts"][0]["truncated"] is True


def test_a_reply_cut_twice_fails_the_step_clearly(llm_endpoints):
    cut = frame(text="Paris", done=True)[:-1]
    with FakeOpenAI(scripted(Reply(cut, finish_reason="length"), Reply(cut, finish_reason="length"))) as server:
        with pytest.raises(StepError, match="cut at max_tokens") as caught:
            step(llm_endpoints.llm(server), FrameIn(step="0"))
        assert len(server.requests) == 2
    assert caught.value.raw_output == cut


# ---- part 2: memory ------------------------------------------------------------

def test_each_step_sees_its_recent_steps_and_results_marked_answered(llm_endpoints):
    call = {"name": "wait", "args": {"seconds": 0}}
    with FakeOpenAI(scripted(Reply(frame(text="waiting a moment", tool_calls=[call])),
                             Reply(frame(step="1", next_step="2", text="I waited.", done=True)))) as server:
        llm = llm_endpoints.llm(server)
        first = step(llm, FrameIn(step="0"), tools=[WAIT_TOOL], task="wait 0 s, then finish")
        results = [ToolResult(id="c1", name="wait", status="success", result={"woke_at": "2026-01-01T00:00:00"})]
        second = step(llm, FrameIn(step="1", state=first.state, tool_results=results), tools=[WAIT_TOOL],
                      task="wait 0 s, then finish")
        prompt = server.requests[1].prompt
    assert 'step 0: you said "waiting a moment" you called wait {"seconds": 0} -> success' in prompt
    assert "(answered)" in prompt and "These are answered: use them, do not call them again." in prompt
    assert second.done and memory.own(second.state) == {}
    assert memory.KEY not in json.loads(prompt.split("Your state: ", 1)[1].splitlines()[0])


def test_the_transcript_is_bounded_in_characters():
    mem = memory.split({})[1]
    for n in range(40):
        mem = memory.after_step(mem, str(n), "x" * 500, [{"name": "wait", "args": {"seconds": n}}], False)
    text = memory.transcript(mem)
    assert len(text) <= memory.CHARS and text.count("\n") < memory.STEPS
    assert "step 39:" in text  # the newest is kept


def test_guidance_stays_in_the_prompt_until_a_step_acted_on_it(llm_endpoints):
    replies = [Reply(frame(step=str(n), next_step=str(n + 1), text=f"cat joke {n}")) for n in range(2)]
    replies.append(Reply(frame(step="2", next_step="3", text="a dog joke", done=True)))
    with FakeOpenAI(scripted(*replies)) as server:
        llm, state = llm_endpoints.llm(server), {}
        for n in range(3):
            out = step(llm, FrameIn(step=str(n), state=state, guidance="tell a dog joke, then finish" if n == 0
                                    else None), task="tell cat jokes")
            state = out.state
        prompts = [r.prompt for r in server.requests]
    assert all("tell a dog joke, then finish" in p for p in prompts), "shown until a step finished or called"
    assert state[memory.KEY]["guidance"] is None  # the step that said done acted on it


# ---- part 3: no loops ----------------------------------------------------------

def _counting_tools():
    """The built-in tools, and ``add``, which counts its runs."""
    from tests.plugins import ADD
    from tools.builtin import BUILTINS
    from tools.tool import Tool
    from tools.tool_registry import ToolRegistry
    runs = []

    async def add(args, ctx):
        runs.append(args.numbers)
        return await ADD.run(args, ctx)

    registry = ToolRegistry()
    for tool in (*BUILTINS, Tool("add", ADD.description, add, ADD.args_model, timeout_s=5, idempotent=True)):
        registry.register(tool)
    return registry, runs


def test_a_call_identical_to_an_answered_one_is_not_run_again(tmp_path):
    add = lambda *numbers: {"name": "add", "args": {"numbers": list(numbers)}}  # noqa: E731
    wait = {"name": "wait", "args": {"seconds": 0}}
    frames = [{"text": "adding", "tool_calls": [add(1, 2), wait]},
              {"text": "adding again", "tool_calls": [add(1.0, 2), wait]},  # 1.0 is 1; wait is not reusable
              {"text": "something else", "tool_calls": [add(1, 3)]},
              {"text": "done", "done": True}]
    tools, runs = _counting_tools()
    config = {"tools": ["add", "wait"], "frames": frames}
    store, [reusing, plain] = run_sessions(tmp_path, ("reuse", {**config, "reuse_tool_results": True}),
                                           ("scripted default", config), moniker="scripted", tools=tools)
    assert reusing["status"] == plain["status"] == "done", (reusing["last_error"], plain["last_error"])
    assert sorted(map(tuple, runs)) == sorted([(1, 2), (1, 3)] + [(1, 2), (1.0, 2), (1, 3)])  # the script's ran all

    rows = sorted(store.tool_calls.search(session_id=reusing["session_id"], limit=100),
                  key=lambda r: (r["iteration"], r["seq"]))
    assert [(r["name"], r["status"]) for r in rows] == [("add", "success"), ("wait", "success")] * 2 + [
        ("add", "success")]
    first, first_wait, repeat, second_wait, other = rows
    assert isinstance(repeat["result"], dict) and "reused_from" in repeat["result"], rows
    assert repeat["result"]["reused_from"] == first["id"] and repeat["result"]["result"] == first["result"]
    assert "not run again" in repeat["result"]["note"] and repeat["started_at"] is None
    assert second_wait["started_at"] is not None and "reused_from" not in second_wait["result"]
    assert "reused_from" not in (other["result"] or {}) and other["started_at"] is not None
    steps = sorted(store.steps.search(session_id=reusing["session_id"]), key=lambda s: s["iteration"])
    assert steps[2]["inputs"]["tool_results"][0]["result"]["reused_from"] == first["id"]
    assert not [r for r in store.tool_calls.search(session_id=plain["session_id"], limit=100)
                if "reused_from" in (r["result"] or {})]


def test_identical_calls_in_one_reply_are_one_call(llm_endpoints):
    """SmolLM2 asked for the same call four times in one step and all four ran;
    ``2`` and ``2.0`` are the same argument; different args stay apart, in order."""
    calls = [{"name": "wait", "args": {"seconds": 2}}, {"name": "wait", "args": {"seconds": 1}},
             {"name": "wait", "args": {"seconds": 2.0}}, {"name": "wait", "args": {"seconds": 2}}]
    with FakeOpenAI(scripted(then=Reply(frame(text="waiting", tool_calls=calls)))) as server:
        out = step(llm_endpoints.llm(server), FrameIn(step="0"), tools=[WAIT_TOOL])
    assert [(c.name, c.args) for c in out.tool_calls] == [("wait", {"seconds": 2}), ("wait", {"seconds": 1})]


def test_a_done_step_whose_calls_were_all_answered_keeps_its_done(tmp_path, llm_endpoints):
    call = {"name": "wait", "args": {"seconds": 0}}
    with FakeOpenAI(scripted(Reply(frame(text="waiting", tool_calls=[call])),
                             Reply(frame(step="1", next_step="2", text="I waited.", tool_calls=[call], done=True)),
                             Reply(frame(step="2", next_step="3", text="never asked", done=True)))) as server:
        config = {"tools": ["wait"], "llm": llm_endpoints.llm(server), "max_steps": 5}
        store, [snap] = run_sessions(tmp_path, ("wait 0 s, then finish", config))
        asked = len(server.requests)
    assert snap["status"] == "done" and snap["status_reason"] == "done", snap["last_error"]
    steps = sorted(store.steps.search(session_id=snap["session_id"]), key=lambda s: s["iteration"])
    assert [s["status"] for s in steps] == ["ok", "done"] and asked == 2
    assert steps[1]["text"] == "I waited." and not steps[1]["tool_calls"]


def test_done_with_a_new_call_runs_the_call_and_steps_again(tmp_path, llm_endpoints):
    call = {"name": "wait", "args": {"seconds": 0}}
    with FakeOpenAI(scripted(Reply(frame(text="waiting, then done", tool_calls=[call], done=True)),
                             Reply(frame(step="1", next_step="2", text="I waited.", done=True)))) as server:
        config = {"tools": ["wait"], "llm": llm_endpoints.llm(server), "max_steps": 5}
        store, [snap] = run_sessions(tmp_path, ("wait 0 s, then finish", config))
    assert snap["status"] == "done", snap["last_error"]
    steps = sorted(store.steps.search(session_id=snap["session_id"]), key=lambda s: s["iteration"])
    assert [s["status"] for s in steps] == ["ok", "done"]  # the calls ran; the next step may finish
    assert steps[1]["inputs"]["tool_results"][0]["status"] == "success"


def test_a_baml_session_saying_the_same_thing_three_times_stops_by_default(tmp_path, llm_endpoints):
    same = [Reply(frame(step=str(n), next_step=str(n + 1), text="The capital of France is Paris.")) for n in range(6)]
    with FakeOpenAI(scripted(*same)) as server:
        config = {"llm": llm_endpoints.llm(server), "max_steps": 6}
        store, [snap] = run_sessions(tmp_path, ("capital of France?", config))
    assert snap["status"] == "stopped" and snap["status_reason"] == "repetition", snap
    assert len(store.steps.search(session_id=snap["session_id"])) == 3
