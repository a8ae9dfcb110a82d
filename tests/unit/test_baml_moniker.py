"""The ``baml`` moniker against a scripted OpenAI-compatible server.

The real generated BAML client makes real HTTP calls to tests/fake_openai.py;
session tests run the real runtime (AgentService + Store + the action queue)
in-process, so what they assert is what a user would see in the database.
"""
import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.baml_sessions import run_sessions
from tests.fake_openai import FakeOpenAI, Reply, by_model, scripted
from monikers import baml_moniker, default_registry
from monikers.memory import own
from monikers.frame import FrameIn, StepContext, StepError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_llm_env(monkeypatch):
    """The developer's own LLM settings must not leak into these tests."""
    for name in ("AGENTSVC_LLM_BASE_URL", "AGENTSVC_LLM_MODEL", "AGENTSVC_LLM_API_KEY",
                 "AGENTSVC_LLM_TEMPERATURE", "AGENTSVC_LLM_TIMEOUT_S"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake(llm_endpoints):
    """Starts fake servers, each an endpoint of the operator's (``server.endpoint``, its name)."""
    servers = []

    def start(responder, **endpoint):
        servers.append(FakeOpenAI(responder).start())
        servers[-1].endpoint = llm_endpoints.serve(servers[-1], **endpoint)
        return servers[-1]
    yield start
    for server in servers:
        server.stop()


def frame(step, next_step, state, *, done=False, text=None, data=None) -> str:
    return json.dumps({"step": step, "next_step": next_step, "state": state, "text": text,
                       "data": data, "done": done})


def exact(value) -> str:
    """A comparison key that tells 1 from 1.0 from True (``==`` does not)."""
    return json.dumps(value, sort_keys=True)


def llm(server, **extra) -> dict:
    return {"endpoint": server.endpoint, "model": "fake-model", **extra}


def steps_of(store, snapshot):
    return store.steps.search(session_id=snapshot["session_id"])


# ---- sessions driven to done -------------------------------------------------


def test_multi_step_agent_runs_to_done_with_usage_and_cost(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-test-123")
    server = fake(scripted(
        Reply(frame("0", "1", {"n": 1}, text="one"), prompt_tokens=100, completion_tokens=10),
        Reply("Sure! Here is my step:\n" + frame("1", "2", {"n": 2}, text="two") + "\nHope that helps.",
              prompt_tokens=200, completion_tokens=20),
        Reply("```json\n" + frame("2", "3", {"n": 3}, text="three", data={"total": 3}, done=True) + "\n```",
              prompt_tokens=300, completion_tokens=30),
    ), api_key_env="FAKE_LLM_KEY")
    config = {"llm": llm(server, prices={"input_per_1k": 1.0, "output_per_1k": 2.0})}
    store, [snap] = run_sessions(tmp_path, ("count to three", config))

    assert snap["status"] == "done", snap["last_error"]
    steps = steps_of(store, snap)
    assert [s["iteration"] for s in steps] == [0, 1, 2]
    assert [s["status"] for s in steps] == ["ok", "ok", "done"]
    assert [s["text"] for s in steps] == ["one", "two", "three"]
    assert [own(s["state"]) for s in steps] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert steps[2]["data"] == {"total": 3} and own(snap["state"]) == {"n": 3}

    # each step carries exactly what the server reported, and the snapshot their sums
    assert [(s["usage"]["input_tokens"], s["usage"]["output_tokens"]) for s in steps] == [(100, 10), (200, 20), (300, 30)]
    assert [s["usage"]["calls"][0]["model"] for s in steps] == ["fake-model"] * 3
    assert [s["usage"]["cost"] for s in steps] == pytest.approx([0.12, 0.24, 0.36])
    totals = snap["usage"]
    assert (totals["input_tokens"], totals["output_tokens"], totals["calls"]) == (600, 60, 3)
    assert totals["cost"] == pytest.approx(0.72)
    assert totals["duration_ms"] == pytest.approx(sum(s["usage"]["duration_ms"] for s in steps))

    # the state went back to the model, and the key came from the operator's variable for that endpoint only
    assert len(server.requests) == 3
    assert 'state: {"n": 1}' in server.requests[1].prompt and "count to three" in server.requests[1].prompt
    assert all(r.headers.get("authorization") == "Bearer sk-test-123" for r in server.requests)
    assert "sk-test-123" not in json.dumps(snap, default=str)


def test_nested_state_round_trips_exactly(tmp_path, fake):
    state = {"count": 1, "ratio": 1.0, "half": 0.5, "neg": -7, "flag": True, "off": False, "nothing": None,
             "digits": "1", "word": "true", "unicode": "héllo ✓", "empty_map": {}, "empty_list": [],
             "nested": {"list": [1, 2.5, None, False, {"deep": [[], {"x": 0.0}]}], "map": {"a": {"b": {"c": 3}}}}}
    server = fake(scripted(
        Reply(frame("0", "1", state)),
        Reply(frame("1", "2", state, data=state, done=True)),
    ))
    store, [snap] = run_sessions(tmp_path, ("keep the state", {"llm": llm(server)}))

    assert snap["status"] == "done", snap["last_error"]
    steps = steps_of(store, snap)
    assert [exact(own(s["state"])) for s in steps] == [exact(state)] * 2
    assert exact(steps[1]["data"]) == exact(state)
    assert exact(own(snap["state"])) == exact(state)
    # the prompt carries the state as stable, sorted JSON text
    assert "state: " + json.dumps(state, sort_keys=True, ensure_ascii=False) in server.requests[1].prompt


def test_two_sessions_use_their_own_models(tmp_path, fake):
    server = fake(by_model({
        "model-a": scripted(then=Reply(frame("0", "1", {"who": "a"}, text="from a", done=True), prompt_tokens=5)),
        "model-b": scripted(then=Reply(frame("0", "1", {"who": "b"}, text="from b", done=True), prompt_tokens=7)),
    }))
    store, snaps = run_sessions(tmp_path, ("task a", {"llm": {"endpoint": server.endpoint, "model": "model-a"}}),
                                ("task b", {"llm": {"endpoint": server.endpoint, "model": "model-b"}}))

    assert [s["status"] for s in snaps] == ["done", "done"], [s["last_error"] for s in snaps]
    assert sorted(r.model for r in server.requests) == ["model-a", "model-b"]
    for snap, who, tokens in zip(snaps, "ab", (5, 7)):
        [step] = steps_of(store, snap)
        assert step["text"] == f"from {who}"
        assert step["usage"]["calls"][0]["model"] == f"model-{who}"
        assert snap["usage"]["input_tokens"] == tokens
        [request] = [r for r in server.requests if r.model == f"model-{who}"]
        assert f"task {who}" in request.prompt


# ---- failures ---------------------------------------------------------------


def test_rate_limit_then_success_is_retried(fake):
    server = fake(scripted(Reply(status=429, content="slow down"),
                           Reply(frame("0", "1", {"ok": True}, done=True), prompt_tokens=9, completion_tokens=4)))
    ctx = StepContext(task="t", agent_id="a", session_id="s", iteration=0, config={"llm": llm(server)})
    out = asyncio.run(baml_moniker.baml_step(FrameIn(step="0"), ctx))

    assert out.done and own(out.state) == {"ok": True}
    assert len(server.requests) == 2
    [call] = ctx.usage_calls
    assert (call["input_tokens"], call["output_tokens"], call["http_calls"]) == (9, 4, 2)


def test_server_error_forever_ends_session_in_error(tmp_path, fake):
    server = fake(scripted(then=Reply(status=500, content="boom")))
    store, [snap] = run_sessions(tmp_path, ("t", {"llm": llm(server)}))

    assert snap["status"] == "error"
    assert "HTTP 500" in snap["last_error"]
    assert len(server.requests) == 5  # the first try and the policy's 4 retries
    [step] = steps_of(store, snap)
    assert step["status"] == "error" and "HTTP 500" in step["error"]


def test_a_servers_error_body_reaches_the_record_only_as_a_short_excerpt(tmp_path, fake):
    """What a model server says in an error reaches last_error, the step and its
    attempts cut to ~200 characters, and none of its headers."""
    body = "start of the error " + "x" * 3000 + " CANARY-AT-THE-END"
    server = fake(scripted(then=Reply(status=400, content=body, headers={"X-Secret-Header": "hdr-canary-77"})))
    store, [snap] = run_sessions(tmp_path, ("t", {"llm": llm(server)}))

    assert snap["status"] == "error" and "start of the error" in snap["last_error"]
    [step] = steps_of(store, snap)
    record = json.dumps([snap, step], default=str)
    assert "CANARY-AT-THE-END" not in record and "hdr-canary-77" not in record
    said = snap["last_error"].split("\n")[1]  # the line after the sentence: what the server said
    assert said.startswith("start of the error") and len(said) <= 200
    assert all(len(a["error"] or "") <= 220 for c in step["usage"]["calls"] for a in c["attempts"])


def test_slow_reply_past_timeout_ends_session_in_error(tmp_path, fake):
    server = fake(scripted(then=Reply(frame("0", "1", {}), delay_s=1.5)))
    store, [snap] = run_sessions(tmp_path, ("t", {"llm": llm(server, timeout_s=0.2)}))

    assert snap["status"] == "error"
    assert "timed out after 0.2s" in snap["last_error"]
    [step] = steps_of(store, snap)
    assert step["status"] == "error" and step["state"] == {}


def test_garbage_is_reasked_then_kept_as_raw(tmp_path, fake, capfd):
    server = fake(scripted(Reply("I'd rather write a poem."), Reply("Roses are red, JSON is hard."),
                           then=Reply(frame("0", "1", {}, done=True))))
    store, [snap] = run_sessions(tmp_path, ("secret-task-text", {"llm": llm(server, max_reasks=1)}))

    assert snap["status"] == "error"
    assert "unparseable LLM output after 2 ask(s)" in snap["last_error"]
    assert len(server.requests) == 2
    assert "previous reply was rejected" in server.requests[1].prompt
    [step] = steps_of(store, snap)
    assert step["status"] == "error"
    assert step["data"] == {"raw": "Roses are red, JSON is hard."}
    assert len(step["usage"]["calls"]) == 2 and snap["usage"]["calls"] == 2
    assert "secret-task-text" not in capfd.readouterr().err  # BAML's prompt logging is off by default


def test_reask_can_recover(fake):
    server = fake(scripted(Reply("no idea"), Reply(frame("0", "1", {"n": 1}))))
    ctx = StepContext(task="t", agent_id="a", session_id="s", iteration=0, config={"llm": llm(server)})
    out = asyncio.run(baml_moniker.baml_step(FrameIn(step="0"), ctx))

    assert own(out.state) == {"n": 1} and len(server.requests) == 2
    assert [c["attempt"] for c in ctx.usage_calls] == [0, 1]


@pytest.mark.parametrize("key", ["base_url", "api_key", "api_key_env"])
def test_a_stored_config_that_names_a_url_or_key_is_not_followed(tmp_path, fake, monkeypatch, key):
    """Defence in depth: a create that never went through the API (or a config
    stored before endpoints existed) names a URL, a key or a key variable; the
    worker refuses it before any request, and the step says what to use."""
    monkeypatch.setenv("AGENTSVC_CANARY_KEY", "canary-secret-1234")
    attacker = fake(scripted(then=Reply(frame("0", "1", {}, done=True))))
    value = {"base_url": attacker.base_url, "api_key": "sk-leak", "api_key_env": "AGENTSVC_CANARY_KEY"}[key]
    store, [snap] = run_sessions(tmp_path, ("t", {"llm": {"model": "fake-model", key: value}}))

    assert snap["status"] == "error" and f"llm.{key} is not accepted" in snap["last_error"]
    assert "llm.endpoint" in snap["last_error"]
    assert attacker.requests == []


def test_an_endpoint_or_model_the_operator_did_not_name_is_a_step_error(tmp_path, fake, llm_endpoints):
    server = fake(scripted(then=Reply(frame("0", "1", {}, done=True))), models=["only-this"])
    store, snaps = run_sessions(tmp_path, ("t", {"llm": {"endpoint": "nowhere"}}),
                                ("t", {"llm": {"endpoint": server.endpoint, "model": "another"}}))

    assert [s["status"] for s in snaps] == ["error", "error"]
    assert "no endpoint 'nowhere'" in snaps[0]["last_error"]
    assert "does not serve model 'another'" in snaps[1]["last_error"]
    assert server.requests == []


@pytest.mark.parametrize("bad", [
    {"temperature": "hot"}, {"timeout_s": 0}, {"base_url": "http://127.0.0.1:1/v1"}, {"api_key_env": "HOME"},
    {"endpoint": "no such endpoint"}, {"max_reasks": -1}, {"prices": {"input_per_1k": -1}}, {"colour": "blue"},
    "not an object",
])
def test_bad_llm_config_is_a_step_error(bad):
    with pytest.raises(StepError, match="invalid llm config"):
        baml_moniker.resolve_settings({"llm": bad}, environ={})


def test_settings_precedence_config_over_env_over_defaults(llm_endpoints):
    env = {"AGENTSVC_LLM_MODEL": "env-model", "AGENTSVC_LLM_TEMPERATURE": "0.7", "AGENTSVC_LLM_API_KEY": "k1",
           "OTHER_KEY": "k2"}
    default = baml_moniker.resolve_settings({}, environ={})
    assert (default.endpoint, default.base_url, default.model) == ("default", "http://127.0.0.1:11434/v1", "llama3.2")
    from_env = baml_moniker.resolve_settings({}, environ=env)
    assert (from_env.model, from_env.temperature, from_env.api_key) == ("env-model", 0.7, "k1")
    from_config = baml_moniker.resolve_settings({"llm": {"model": "cfg-model", "temperature": 0.0}}, environ=env)
    assert (from_config.model, from_config.temperature, from_config.api_key) == ("cfg-model", 0.0, "k1")
    # another endpoint: its URL, its default model and its key variable are the operator's
    llm_endpoints.add("team-b", "http://127.0.0.1:9/v1", models=["b-small", "b-large"], api_key_env="OTHER_KEY",
                      structured="json_object")
    team_b = baml_moniker.resolve_settings({"llm": {"endpoint": "team-b"}}, environ=env)
    assert (team_b.base_url, team_b.model, team_b.api_key, team_b.structured) == \
        ("http://127.0.0.1:9/v1", "b-small", "k2", "json_object")
    llm_endpoints.add("team-c", "http://127.0.0.1:9/v1", models=["c"], api_key_env="MISSING_KEY")
    with pytest.raises(StepError, match="MISSING_KEY that holds this endpoint's key is not set"):
        baml_moniker.resolve_settings({"llm": {"endpoint": "team-c"}}, environ=env)


# ---- loading and the generated client -------------------------------------------


def test_prompt_logging_is_off_unless_asked_for():
    quiet = {}
    baml_moniker.quiet_baml_logs(quiet)
    assert quiet == {"BAML_LOG": "error"}
    loud = {"AGENTSVC_LOG_PROMPTS": "1"}
    baml_moniker.quiet_baml_logs(loud)
    assert "BAML_LOG" not in loud
    chosen = {"BAML_LOG": "debug"}
    baml_moniker.quiet_baml_logs(chosen)
    assert chosen == {"BAML_LOG": "debug"}


def test_broken_baml_install_leaves_the_other_monikers(monkeypatch, caplog):
    def broken():
        raise ImportError("no baml_client")
    monkeypatch.setattr(baml_moniker, "baml_api", broken)
    registry = default_registry()
    assert "baml" not in registry and "joke" in registry
    assert "baml moniker unavailable" in caplog.text


def test_baml_moniker_is_registered():
    assert "baml" in default_registry()


def test_generated_client_is_fresh(tmp_path):
    """Fails when baml_client/ was not regenerated after a change to baml_src/
    (fix: python scripts/baml_generate.py)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import baml_generate
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    fresh = baml_generate.generate_into(tmp_path)
    assert baml_generate.differences(fresh, ROOT / "baml_client") == []
    # and the comparison does notice a change
    (fresh / "types.py").write_text((fresh / "types.py").read_text() + "\n# edited\n")
    assert baml_generate.differences(fresh, ROOT / "baml_client") == ["types.py"]
