"""What the model saw (issue 40, What must hold 5): a baml step's request as
sent and reply as received are kept for the session's last N steps, with the
prompt's token split, never for a private session, never with a secret."""
import asyncio
import json

import pytest

from domain.session_config import within_parent
from monikers import baml_moniker
from monikers.frame import FrameIn, StepContext
from tests.baml_sessions import run_sessions
from tests.fake_openai import FakeOpenAI, Reply, scripted

CANARY = "sk-canary-5e1f"  # in the agent's state: shown to the model, never kept
KEY_CANARY = "endpoint-key-canary-91"  # the endpoint's key: in a header, never kept


def frame(step, next_step, state, *, done=False, text=None) -> str:
    return json.dumps({"step": step, "next_step": next_step, "state": state, "text": text, "data": None,
                       "done": done})


@pytest.fixture
def server(llm_endpoints, monkeypatch):
    monkeypatch.setenv("MODEL_IO_TEST_KEY", KEY_CANARY)
    steps = [Reply(frame(str(n), str(n + 1), {"n": n, "api_key": CANARY}, text=f"step {n}"), prompt_tokens=120 + n,
                   completion_tokens=9) for n in range(4)]
    fake = FakeOpenAI(scripted(Reply("not a frame at all"), *steps,
                               then=Reply(frame("4", "5", {"n": 4}, text="end", done=True)))).start()
    fake.endpoint = llm_endpoints.serve(fake, api_key_env="MODEL_IO_TEST_KEY")
    yield fake
    fake.stop()


def llm(server) -> dict:
    return {"endpoint": server.endpoint, "model": "fake-model", "max_reasks": 1}


def test_the_last_steps_calls_are_kept_redacted_with_their_token_split(tmp_path, server):
    store, [snap] = run_sessions(tmp_path, ("count with the secret", {"llm": llm(server)}),
                                 service_options={"keep_model_io": 2})
    assert snap["status"] == "done" and snap["iteration"] == 4
    sid = snap["session_id"]
    kept = {i: store.model_io.of_step(sid, i) for i in range(5)}
    assert [i for i, calls in kept.items() if calls] == [3, 4]  # the last two steps only
    assert store.model_io.kept_range(sid) == (3, 4)
    [call] = kept[4]
    assert call["function"] == "RunMonikerStep" and call["model"] == "fake-model" and call["ask"] == 0
    messages = call["request"]["messages"]
    assert any("count with the secret" in json.dumps(m) for m in messages)  # the task, as sent
    assert call["request"]["model"] == "fake-model"
    assert json.loads(call["reply"])["text"] == "end"
    [third] = kept[3]  # the fake server's counts for that reply: 123 in, 9 out
    tokens = third["tokens"]
    assert (tokens["input_tokens"], tokens["output_tokens"], tokens["estimated"]) == (123, 9, False)
    assert tokens["parts"]["task"] > 0 and tokens["parts"]["state"] > 0
    everything = json.dumps(store.model_io.of_step(sid, 3) + kept[4], default=str)
    assert CANARY not in everything and KEY_CANARY not in everything
    assert "[redacted]" in everything  # the state's api_key was in the prompt, and went


def test_a_step_that_re_asked_keeps_each_ask(tmp_path, server):
    store, [snap] = run_sessions(tmp_path, ("t", {"llm": llm(server), "max_steps": 1}),
                                 service_options={"keep_model_io": 5})
    [first, second] = store.model_io.of_step(snap["session_id"], 0)
    assert (first["ask"], second["ask"]) == (0, 1)
    assert first["reply"] == "not a frame at all"
    assert any("rejected" in json.dumps(m) for m in second["request"]["messages"])  # the re-ask, as sent


def test_a_private_session_and_a_worker_that_keeps_none_keep_nothing(tmp_path, server):
    store, [private] = run_sessions(tmp_path / "a", ("t", {"llm": llm(server), "private": True, "max_steps": 2}),
                                    service_options={"keep_model_io": 5})
    assert store.model_io.count(private["session_id"]) == 0 and private["iteration"] == 1
    store, [plain] = run_sessions(tmp_path / "b", ("t", {"llm": llm(server), "max_steps": 2}))
    assert store.model_io.count() == 0 and plain["iteration"] == 1


def test_a_private_sessions_sub_agents_are_private():
    assert within_parent({"private": True}, {})["private"] is True
    assert "private" not in within_parent({}, {})


def test_the_moniker_reports_the_request_as_sent(server):
    ctx = StepContext(task="say hi", agent_id="a", session_id="s", iteration=0, config={"llm": llm(server)},
                      system_prompt="You are terse.")
    asyncio.run(baml_moniker.baml_step(FrameIn(step="0"), ctx))
    assert [c["ask"] for c in ctx.model_io] == [0, 1]
    last = ctx.model_io[-1]
    assert "You are terse." in json.dumps(last["request"]["messages"])
    assert last["tokens"]["parts"]["system"] > 0
