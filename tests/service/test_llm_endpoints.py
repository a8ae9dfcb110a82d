"""Model endpoints are the operator's (issue 36, part 1), probed from outside the
real processes.

An "attacker" HTTP server on 127.0.0.1 records everything that reaches it.
agents.py runs with a canary secret in its environment, as it would hold the
API token or the events token.  Every route that takes a config (a create,
from a moniker or a profile, an orchestrator's sub_config, a fork, a replay, an
eval run's overrides and its judge) and a sub-agent spawned by a running
session are asked to send model calls to the attacker with the canary as the
key: each is refused (a 400 naming the operator's setting, or a failed spawn),
and nothing ever reaches the attacker.  The positive control: an endpoint the
operator adds to the endpoints file while the service runs serves a session,
and receives the operator's key.
"""
import json
import os
import secrets
import textwrap

import pytest

from tests.fake_openai import FakeOpenAI, Reply, scripted
from tests.harness import Service, wait_for
from tests.recorder import Recorder

CANARY = "canary-" + secrets.token_hex(8)  # a worker secret, as AGENTSVC_API_TOKEN would be
OPERATOR_KEY = "operator-key-" + secrets.token_hex(8)


@pytest.fixture(scope="module")
def attacker():
    """The attacker's host: records every request that reaches it (and answers 500)."""
    with Recorder(status=500) as server:
        yield server


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    """The service, with a canary secret and the operator's key in agents.py's environment, and a
    profile that lets a create override its llm."""
    root = tmp_path_factory.mktemp("endpoints")
    (root / "logs").mkdir()
    profiles = root / "profiles"
    profiles.mkdir()
    (profiles / "tunable.yaml").write_text(textwrap.dedent("""\
        name: tunable
        moniker: baml
        llm: {temperature: 0.1}
        overridable: [interval_s, llm]
        """))
    service = Service(str(root / "data"), str(root / "logs"), app_args=["--profiles-dir", str(profiles)],
                      agents_args=["--profiles-dir", str(profiles)],
                      env={"AGENTSVC_CANARY_SECRET": CANARY, "AGENTSVC_OPERATOR_KEY": OPERATOR_KEY})
    service.start()
    yield service
    service.stop()


def recorded(svc, **config) -> str:
    """A finished scripted session: something to fork, replay and evaluate."""
    made = svc.create("scripted", "record", config={"interval_s": 0, "frames": [{"text": "one"},
                                                                                {"text": "two", "done": True}],
                                                     **config})
    svc.wait_status(made["session_id"], "done", timeout=60)
    return made["session_id"]


def attacks(attacker) -> list[dict]:
    """The llm objects a caller could once use to send a worker secret to a host of its choosing."""
    return [{"base_url": attacker.base_url, "api_key_env": "AGENTSVC_CANARY_SECRET", "model": "m"},
            {"base_url": attacker.base_url, "model": "m"},
            {"api_key_env": "AGENTSVC_CANARY_SECRET"},
            {"api_key": CANARY}]


def refused(r, llm: dict) -> None:
    """A 400 whose message names a refused key and the setting to use instead."""
    assert r.status_code == 400, (llm, r.status_code, r.text)
    message = r.json()["error"]["message"]
    assert any(f"llm.{key} is not accepted" in message for key in ("base_url", "api_key_env", "api_key")), message
    assert "llm.endpoint" in message, message


def test_every_route_that_takes_a_config_refuses_urls_and_keys_and_nothing_reaches_the_attacker(svc, attacker):
    source = recorded(svc)
    evalset = svc.post("/api/evalsets", json={"name": "probe", "session_ids": [source]}).json()["id"]
    for llm in attacks(attacker):
        refused(svc.post("/api/agents", json={"moniker": "baml", "task": "t", "config": {"llm": llm}}), llm)
        refused(svc.post("/api/agents", json={"moniker": "scripted", "task": "t",
                                              "config": {"frames": [{"text": "x"}], "llm": llm}}), llm)
        refused(svc.post("/api/agents", json={"profile": "tunable", "task": "t", "config": {"llm": llm}}), llm)
        refused(svc.post("/api/agents", json={"moniker": "orchestrator", "task": "t", "config": {
            "sub_moniker": "baml", "sub_config": {"llm": llm}}}), llm)
        refused(svc.post(f"/api/sessions/{source}/fork", json={"from_iteration": 0, "config": {"llm": llm}}), llm)
        refused(svc.post(f"/api/sessions/{source}/replay", json={"config": {"llm": llm}}), llm)
        refused(svc.post(f"/api/sessions/{source}/replay", json={"moniker": "baml", "config": {"llm": llm}}), llm)
        refused(svc.post(f"/api/evalsets/{evalset}/runs", json={"scorers": ["final_equal"],
                                                                 "config": {"llm": llm}}), llm)
        refused(svc.post(f"/api/evalsets/{evalset}/runs", json={"scorers": ["llm_judge"], "judge": {"llm": llm}}),
                llm)
    # an endpoint or a model the operator did not name is refused the same way
    r = svc.post("/api/agents", json={"moniker": "baml", "task": "t", "config": {"llm": {"endpoint": "elsewhere"}}})
    assert r.status_code == 400 and "no endpoint 'elsewhere'" in r.json()["error"]["message"]
    assert svc.get("/api/agents", limit=1000).json()["total"] == 1  # only the recorded session was created

    # a running session's sub-agent: the spawn is refused in the worker, before any child exists
    child = {"task": "leak", "moniker": "scripted", "config": {"frames": [{"text": "x", "done": True}],
                                                               "llm": attacks(attacker)[0]}}
    parent = svc.create("scripted", "spawn", config={"interval_s": 0, "tools": ["spawn_agent"], "frames": [
        {"text": "spawning", "tool_calls": [{"name": "spawn_agent", "args": child}]}, {"text": "ok", "done": True}]})
    svc.wait_status(parent["session_id"], "done", timeout=60)
    [call] = svc.get("/api/tool-calls", session_id=parent["session_id"]).json()["tool_calls"]
    assert call["status"] == "failed" and "llm.base_url is not accepted" in call["error"], call
    assert svc.get(f"/api/sessions/{parent['session_id']}/children").json()["children"] == []

    # whatever runs behind (turns, summaries) has had its chance: the attacker heard nothing, the canary went nowhere
    wait_for(lambda: svc.get(f"/api/sessions/{parent['session_id']}/turns").json()["turns"][-1]["summary"],
             timeout=30, what="the parent's turn summary")
    assert attacker.log == []
    assert CANARY not in "\n".join(attacker.log)


def test_a_session_on_an_endpoint_the_operator_adds_while_running_gets_the_operators_key(svc):
    with FakeOpenAI(scripted(then=Reply(json.dumps({"step": "0", "next_step": "1", "state": {}, "text": "hello",
                                                    "done": True})))) as server:
        name = svc.endpoints.serve(server, name="operator-llm", models=["small", "large"],
                                   api_key_env="AGENTSVC_OPERATOR_KEY")
        listed = wait_for(lambda: next((e for e in svc.get("/api/endpoints").json()["endpoints"]
                                        if e["name"] == name), None), what="app.py to read the endpoints file again")
        assert listed == {"name": name, "models": ["small", "large"], "default_model": "small", "structured": "auto"}
        assert "default" in [e["name"] for e in svc.get("/api/endpoints").json()["endpoints"]]
        assert server.base_url.split("/v1")[0] not in svc.get("/api/endpoints").text  # names and models, no URL
        assert "AGENTSVC_OPERATOR_KEY" not in svc.get("/api/endpoints").text  # nor the key's variable
        shown = svc.cli("endpoints")  # the command line offers them too
        assert shown.returncode == 0, shown.stderr
        assert any(name in line and "small, large" in line for line in shown.stdout.splitlines()), shown.stdout

        r = svc.post("/api/agents", json={"moniker": "baml", "task": "t", "config": {
            "llm": {"endpoint": name, "model": "huge"}}})
        assert r.status_code == 400 and "does not serve model 'huge'" in r.json()["error"]["message"]
        made = svc.create("baml", "say hello", config={"interval_s": 0, "llm": {"endpoint": name, "model": "large"}})
        done = svc.wait_status(made["session_id"], "done", "error", timeout=60)
        assert done["status"] == "done", done["last_error"]
        request = server.requests[0]
        assert request.model == "large" and request.headers["authorization"] == f"Bearer {OPERATOR_KEY}"


def test_a_llama_cpp_endpoint_whose_model_has_no_chat_template_is_flagged_once(svc):
    """GET /api/endpoints flags a llama.cpp endpoint whose /props shows llama.cpp's ChatML
    fallback for a non-ChatML model (the base Gemma 3 270M's case), not the others, and
    app.py says so once in its log however often the endpoints are listed."""
    from monikers.chat_template import CHATML_FALLBACK
    with FakeOpenAI() as untemplated, FakeOpenAI() as templated:
        untemplated.props = {"chat_template": CHATML_FALLBACK, "bos_token": "<bos>", "eos_token": "<eos>"}
        templated.props = {"chat_template": "{{ messages }}", "eos_token": "</s>"}  # a template of its own
        svc.endpoints.serve(untemplated, name="gemma-base", models=["gemma"], structured="grammar")
        svc.endpoints.serve(templated, name="templated", models=["t"], structured="grammar")

        def listed():
            found = {e["name"]: e for e in svc.get("/api/endpoints").json()["endpoints"]}
            return found if {"gemma-base", "templated"} <= set(found) else None
        found = wait_for(listed, what="app.py to read the endpoints file again")
        for _ in range(3):
            found = listed()
        assert "falls back to ChatML" in found["gemma-base"]["chat_template_warning"]
        assert "'<eos>'" in found["gemma-base"]["chat_template_warning"]
        assert "chat_template_warning" not in found["templated"] and "chat_template_warning" not in found["default"]
        assert untemplated.props_reads == templated.props_reads == 1  # asked once, however often listed
        logs = "".join(open(os.path.join(svc.log_dir, name)).read() for name in os.listdir(svc.log_dir))
        said = [line for line in logs.splitlines() if "endpoint gemma-base (model gemma)" in line]
        assert len(said) == 1, said
