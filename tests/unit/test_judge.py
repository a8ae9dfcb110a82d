"""The LLM judge (evals/judge.py) against the scripted OpenAI-compatible server:
the real generated BAML client renders ``JudgeFinalAnswers`` and parses the reply.

What these prove: a verdict is read into a score (value, passed, detail with
the reason and the judge's usage); the judge sees the task and both final
answers; a reply that never parses, a score outside 0..1 and an unreachable
model each end as a score with value None and the error in its detail,
never an exception; the run's ``judge`` settings are validated.
"""
import asyncio
import json

import pytest

from evals import judge as judge_mod
from tests.fake_openai import FakeOpenAI, Reply, scripted


@pytest.fixture(autouse=True)
def clean_llm_env(monkeypatch):
    for name in ("AGENTSVC_LLM_BASE_URL", "AGENTSVC_LLM_MODEL", "AGENTSVC_LLM_API_KEY",
                 "AGENTSVC_LLM_TEMPERATURE", "AGENTSVC_LLM_TIMEOUT_S", "AGENTSVC_LLM_STRUCTURED"):
        monkeypatch.delenv(name, raising=False)


def verdict(score, better="candidate", reason="the candidate names the city") -> Reply:
    return Reply(json.dumps({"reason": reason, "better": better, "score": score}))


def record(task="Name the capital of France.", text=None, data=None, steps=()) -> dict:
    result = None if text is None and data is None else {"text": text, "data": data}
    return {"snapshot": {"task": task, "result": result}, "steps": list(steps), "tool_calls": []}


@pytest.fixture(autouse=True)
def endpoints(llm_endpoints):
    """The operator's endpoints file: each test adds its fake server as an endpoint."""
    return llm_endpoints


def llm_judge(endpoints, server, source, replay, **spec):
    context = {"judge": {"llm": endpoints.llm(server, model="judge-model", max_reasks=1), **spec}}
    return asyncio.run(judge_mod.llm_judge(source, replay, context))


def test_a_verdict_becomes_a_score_and_the_judge_sees_task_and_both_answers(endpoints):
    source = record(text="It is Paris.")
    replay = record(text="Paris", data={"country": "France"})
    with FakeOpenAI(scripted(verdict(0.9))) as server:
        score = llm_judge(endpoints, server, source, replay, criteria="Only the city counts.")
        sent = server.requests
    assert score["value"] == 0.9 and score["passed"] is True
    detail = score["detail"]
    assert detail["better"] == "candidate" and detail["reason"] == "the candidate names the city"
    assert detail["model"] == "judge-model" and "error" not in detail
    assert detail["usage"]["http_calls"] == 1 and detail["usage"]["input_tokens"] > 0
    json.dumps(detail)  # stored as a JSON string
    assert len(sent) == 1 and sent[0].model == "judge-model"
    prompt = sent[0].prompt
    assert "Name the capital of France." in prompt and "It is Paris." in prompt
    assert '{"country": "France"}' in prompt and "Only the city counts." in prompt
    assert prompt.index("It is Paris.") < prompt.index("data: {\"country\"")  # reference, then candidate
    assert sent[0].body["response_format"]["json_schema"]["schema"] == judge_mod.VERDICT_SCHEMA


def test_a_low_score_fails_the_threshold_and_a_tie_is_read(endpoints):
    with FakeOpenAI(scripted(verdict(0.4, better="tie", reason="both vague"))) as server:
        score = llm_judge(endpoints, server, record(text="a"), record(text="b"), pass_threshold=0.5)
    assert score["value"] == 0.4 and score["passed"] is False and score["detail"]["better"] == "tie"


def test_an_unparseable_reply_is_reasked_then_ends_as_a_null_score_with_the_error(endpoints):
    prose = Reply("I think the candidate is pretty good overall!")
    with FakeOpenAI(scripted(prose, prose)) as server:
        score = llm_judge(endpoints, server, record(text="a"), record(text="b"))
        sent = server.requests
    assert score["value"] is None and score["passed"] is None
    assert score["detail"]["error"].startswith("unparseable judge reply after 2 ask(s)")
    assert "pretty good" in score["detail"]["raw"]
    assert score["detail"]["usage"]["http_calls"] == 2
    assert len(sent) == 2 and "Your previous reply was rejected" in sent[1].prompt


def test_a_score_outside_0_to_1_is_reasked_and_the_second_answer_counts(endpoints):
    with FakeOpenAI(scripted(verdict(8), verdict(0.8))) as server:
        score = llm_judge(endpoints, server, record(text="a"), record(text="b"))
        sent = server.requests
    assert score["value"] == 0.8 and score["passed"] is True
    assert "score 8 is outside 0..1" in sent[1].prompt


def test_an_unreachable_judge_is_a_null_score_not_an_exception(endpoints):
    server = FakeOpenAI(scripted())  # never started: its port refuses connections after stop
    server.start()
    server.stop()
    score = asyncio.run(judge_mod.judge("t", "a", "b", endpoints.llm(server, name="gone", model="m", max_reasks=0)))
    assert score["value"] is None and score["passed"] is None
    assert score["detail"]["error"].startswith("cannot reach the LLM endpoint 'gone'")


def test_a_server_error_ends_as_a_null_score(endpoints):
    with FakeOpenAI(scripted(then=Reply(status=400, content="model not loaded"))) as server:
        score = asyncio.run(judge_mod.judge("t", "a", "b", endpoints.llm(server, model="m")))
    assert score["value"] is None and "HTTP 400" in score["detail"]["error"]


def test_invalid_judge_settings_are_a_null_score():
    score = asyncio.run(judge_mod.llm_judge(record(text="a"), record(text="b"), {"judge": {"llm": {"temperature": 9}}}))
    assert score["value"] is None and score["detail"]["error"].startswith("invalid judge settings: llm.temperature")
    for key, value in (("api_key", "sk-x"), ("api_key_env", "HOME"), ("base_url", "http://127.0.0.1:1/v1")):
        score = asyncio.run(judge_mod.llm_judge(record(text="a"), record(text="b"), {"judge": {"llm": {key: value}}}))
        assert score["value"] is None and f"llm.{key} is not accepted" in score["detail"]["error"]
    score = asyncio.run(judge_mod.llm_judge(record(text="a"), record(text="b"), {"judge": {"llm": {"endpoint": "x"}}}))
    assert score["value"] is None and "no endpoint 'x'" in score["detail"]["error"]


def test_the_final_answer_of_a_record():
    assert judge_mod.final_answer(record(text="  done  ")) == "done"
    assert judge_mod.final_answer(record(text=None, data={"n": 1})) == 'data: {"n": 1}'
    steps = [{"status": "ok", "text": "first"}, {"status": "ok", "text": "last", "data": '{"k": 2}'},
             {"status": "error", "text": None}]
    assert judge_mod.final_answer(record(steps=steps)) == 'last\ndata: {"k": 2}'
    assert judge_mod.final_answer(record()) == judge_mod.NO_ANSWER
    as_text = {"snapshot": {"result": json.dumps({"text": "stored as JSON text", "data": None})}, "steps": []}
    assert judge_mod.final_answer(as_text) == "stored as JSON text"
