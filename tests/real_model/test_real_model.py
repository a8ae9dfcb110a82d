"""The service driven by a real model: SmolLM2-135M-Instruct on llama.cpp's server
(tests/llm_server.py), through the real BAML path, structured output and
streaming included.

A 135M model is weak: what it writes is not asserted, only what the service
promises whatever a model writes.  Every step ends ``ok``/``done`` or in error
with a readable reason; no step outlives its deadline; every HTTP attempt is in
the usage, and the session's totals add up its steps; every tool call the model
made names an allowed tool with valid args and ran, or was refused with a
reason; and each flow reaches its end (a done session, a child's result at its
parent, an answered question, an orchestrator's reply, summaries).  Where a
flow needs the model to call a tool, the task says which, and the output
schema only lets it name the session's tools.

Sampling is deterministic (temperature 0, a fixed seed) so that a run repeats
itself.  The operator's setting ``AGENTSVC_LLM_STRUCTURED=grammar`` sends each
reply's schema as a compact grammar (monikers/gbnf.py), so a frame holds no
indentation and ends well inside ``max_tokens`` 256 (under ``json_schema`` 57
of 66 replies filled llama.cpp's whitespace allowance up to the cap).
"""
import json
import re

import pytest

from tests import llm_server
from tests import mcp_reference
from tests.harness import Service, wait_for
from tests.step_stream import Reader

# A flow of several model steps on a shared 2-core machine: the model's one thread
# gets a core to itself only where the server may be reniced (tests/llm_server.py),
# and beside the other xdist workers a step took minutes.  The deadlines are made
# for that: what the tests prove is that a deadline is kept, not its size.
pytestmark = pytest.mark.timeout(2400)

FINISHED = ("done", "stopped", "error")
STEP_TIMEOUT_S = 600
FLOW_TIMEOUT_S = 1200
LLM_ENV = {"AGENTSVC_LLM_MODEL": llm_server.MODEL_NAME, "AGENTSVC_LLM_TEMPERATURE": "0",
           "AGENTSVC_LLM_MAX_TOKENS": "256", "AGENTSVC_LLM_TIMEOUT_S": "500", "AGENTSVC_LLM_STRUCTURED": "grammar"}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The llama.cpp server with the model loaded; its base URL."""
    root = tmp_path_factory.mktemp("llm")
    proc, base_url = llm_server.start(str(root))
    yield base_url
    proc.stop()
    assert proc.proc.poll() is not None


@pytest.fixture(scope="module")
def svc(tmp_path_factory, model):
    """agents.py and app.py on that model, with the reference time server as MCP tools."""
    root = tmp_path_factory.mktemp("real-model")
    (root / "logs").mkdir()
    repo = root / "repo"
    repo.mkdir()
    mcp_reference.git_repo(repo)
    config = mcp_reference.write_config(root / "mcp.json", repo, "real-model")
    service = Service(str(root / "data"), str(root / "logs"), agents_args=["--mcp-config", str(config)],
                      env={**LLM_ENV, "AGENTSVC_LLM_BASE_URL": model})
    try:
        service.start()
        wait_for(lambda: "time.get_current_time" in {t["name"] for t in service.get("/api/tools").json()["tools"]},
                 timeout=90, what="the MCP time server's tools")
        yield service
    finally:
        service.stop()


def config(model: str, **extra) -> dict:
    return {"interval_s": 0, "step_timeout_s": STEP_TIMEOUT_S, "llm": llm_server.llm_config(), **extra}


def finish(svc: Service, session_id: str, timeout: float = FLOW_TIMEOUT_S) -> dict:
    return wait_for(lambda: (s := svc.session(session_id))["status"] in FINISHED and s, timeout=timeout,
                    interval=0.5, what=f"session {session_id} to finish")


def consistent_record(svc: Service, session_id: str) -> tuple[dict, list[dict]]:
    """A snapshot and the steps it holds.  The snapshot is saved behind the
    steps (up to ``snapshot_every_s`` behind while a session steps), so the two
    are read until the snapshot has caught up with the newest step read."""
    def read():
        steps = svc.steps(session_id)
        snap = svc.session(session_id)
        return steps and snap["iteration"] == steps[-1]["iteration"] and (snap, steps)
    return wait_for(read, timeout=60, interval=0.2, what=f"a snapshot of {session_id} holding its steps")


def check_record(svc: Service, session_id: str) -> list[dict]:
    """What the service promises of a session whatever its model wrote; returns its steps."""
    snap, steps = consistent_record(svc, session_id)
    assert [s["iteration"] for s in steps] == list(range(steps[0]["iteration"], steps[0]["iteration"] + len(steps)))
    for step in steps:
        assert step["status"] in ("ok", "done", "error"), step
        assert step["latency_ms"] < STEP_TIMEOUT_S * 1000 + 5000, "a step outlived its deadline"
        if step["status"] == "error":
            first_line = (step["error"] or "").splitlines()[0]
            assert len(first_line) > 10 and "Traceback" not in step["error"], step["error"]
        usage = step.get("usage")
        if usage:  # every HTTP attempt of every ask is counted, failed ones too
            calls = usage["calls"]
            attempts = [a for c in calls for a in c["attempts"]]
            assert usage["attempts"] == len(attempts) and usage["input_tokens"] == sum(
                a["input_tokens"] for a in attempts)
            assert all(a["outcome"] in ("ok", "timeout", "5xx", "429", "unparseable", "cancelled", "unreachable",
                                        "error", "truncated") for a in attempts)
            assert all(c["structured"] == "grammar" for c in calls), "llama.cpp takes the schema as a grammar"
    model_steps = [s for s in steps if s.get("usage")]
    assert snap["usage"]["input_tokens"] == sum(s["usage"]["input_tokens"] for s in model_steps)
    assert snap["usage"]["output_tokens"] == sum(s["usage"]["output_tokens"] for s in model_steps)
    assert snap["usage"]["calls"] == sum(len(s["usage"]["calls"]) for s in model_steps) > 0
    allowed = set(snap["config"].get("tools") or [])
    for call in svc.get("/api/tool-calls", session_id=session_id).json()["tool_calls"]:
        assert call["name"] in allowed, f"the schema allows only the session's tools: {call['name']}"
        assert call["status"] in ("success", "failed", "denied", "waiting_result", "running", "pending", "replayed"), call
        if call["status"] in ("failed", "denied"):
            assert call["error"], call
    return steps


def tool_calls(svc: Service, session_id: str) -> list[dict]:
    return sorted(svc.get("/api/tool-calls", session_id=session_id).json()["tool_calls"], key=lambda c: c["seq"])


# ---- the flows ---------------------------------------------------------------------------

def test_a_plain_agent_runs_to_done_with_llm_turn_and_archive_summaries(svc, model):
    made = svc.create("baml", task="Tell one short joke about cats, then finish.", config=config(model, max_steps=3))
    sid = made["session_id"]
    reader = Reader(svc, f"session:{sid}")  # the model's output while it writes, as GET /api/stream sends it
    try:
        snap = finish(svc, sid)
        wait_for(lambda: reader.of("step_delta"), timeout=90, what="step_delta events of the real model")
    finally:
        reader.close()
    steps = check_record(svc, sid)
    assert snap["status"] == "done", (snap["status_reason"], snap["last_error"])
    assert all(s["status"] in ("ok", "done") for s in steps)
    turns = wait_for(lambda: (t := svc.get(f"/api/sessions/{sid}/turns").json()["turns"])
                     and t[-1]["status"] == "ended" and t[-1].get("summary") and t, timeout=120, interval=0.5,
                     what="the turn's summary")
    assert turns[-1]["summary_method"] == "llm", turns[-1]
    summary = wait_for(lambda: (r := svc.get("/api/summaries", session_id=sid).json()["summaries"]) and r[0],
                       timeout=120, interval=0.5, what="the archive summary")
    assert summary["method"] == "llm" and summary["text"].strip(), summary


_TOOL_FLOWS: dict[tuple[str, str], str] = {}  # (tool, args) -> its finished session, recorded once


def tool_flow(svc: Service, model: str, tool: str, args: str) -> str:
    """A finished session told to call ``tool``: recorded once per module, so that
    the replay test replays the tool test's session instead of recording its own
    (each is several steps of the one-thread model, minutes beside the suite)."""
    if (tool, args) not in _TOOL_FLOWS:
        task = f"Call the tool {tool} with {args}. Then say what it returned and finish."
        made = svc.create("baml", task=task, config=config(model, max_steps=3, tools=[tool]))
        finish(svc, made["session_id"])
        _TOOL_FLOWS[(tool, args)] = made["session_id"]
    return _TOOL_FLOWS[(tool, args)]


@pytest.mark.parametrize("tool, args", [("time.get_current_time", "timezone UTC"),  # an MCP server's
                                        ("wait", "seconds 1")])  # built in
def test_an_agent_calls_a_tool_and_is_given_its_result(svc, model, tool, args):
    sid = tool_flow(svc, model, tool, args)
    steps = check_record(svc, sid)
    calls = tool_calls(svc, sid)
    assert calls and {c["name"] for c in calls} == {tool}, [(s["status"], s.get("error")) for s in steps]
    for call in calls:  # each ran, and the step after it was given its outcome
        assert call["status"] in ("success", "failed"), call
        after = next((s for s in steps if s["iteration"] > call["iteration"]), None)
        if after is not None and after["status"] in ("ok", "done"):  # an error step records no inputs
            results = (after.get("inputs") or {}).get("tool_results") or []
            assert any(r["id"] == call["id"] for r in results), (call, after.get("inputs"))
    assert any(c["status"] == "success" for c in calls), calls
    assert any(s["iteration"] > calls[0]["iteration"] for s in steps), "no step saw the first call's result"


def test_a_spawned_baml_child_reports_its_result_to_its_parent(svc, model):
    """The model spawns a ``baml`` child; the child is stopped once it has stepped
    (a small model may never say it is done), and its outcome reaches the parent.

    SmolLM2 sometimes fills spawn_agent's free-form ``config`` with invented
    keys, and every call is then refused (with the reason, as it should be); a
    parent that spawned nothing is tried again, sampling with another seed."""
    task = 'Call the tool spawn_agent with args {"task": "Say hello.", "moniker": "baml"}. Then report its result.'
    for seed in (42, 7, 1234):
        cfg = config(model, max_steps=8, tools=["spawn_agent"], max_children=1)
        cfg["llm"] = {**cfg["llm"], "temperature": 0.0 if seed == 42 else 0.7, "seed": seed}
        made = svc.create("baml", task=task, config=cfg)
        sid = made["session_id"]
        children = wait_for(lambda: svc.get(f"/api/sessions/{sid}/children").json()["children"]
                            or (svc.session(sid)["status"] in FINISHED and "finished"),
                            timeout=FLOW_TIMEOUT_S, interval=0.5, what="a child spawned by the model")
        if children != "finished":
            break
        check_record(svc, sid)  # every refused call says why
        svc.control(made["agent_id"], "destroy")
    try:
        assert children != "finished", [(c["args"], c["status"], c["error"]) for c in tool_calls(svc, sid)]
        child = children[0]
        assert child["moniker"] == "baml"
        svc.wait_steps(child["session_id"], 1, timeout=FLOW_TIMEOUT_S)
        svc.control(child["agent_id"], "destroy")
        check_record(svc, child["session_id"])

        def outcome_seen():
            for step in svc.steps(sid):
                inputs = step.get("inputs") or {}
                if any(i["kind"] == "child_result" for i in inputs.get("inbox") or []) or any(
                        r["name"] == "spawn_agent" and child["session_id"] in json.dumps(r)
                        for r in inputs.get("tool_results") or []):
                    return step
            return svc.session(sid)["status"] in FINISHED and "finished"
        seen = wait_for(outcome_seen, timeout=FLOW_TIMEOUT_S, interval=0.5, what="the child's outcome at its parent")
        assert seen != "finished", "the parent finished without being given its child's outcome"
        check_record(svc, sid)
    finally:
        svc.control(made["agent_id"], "destroy")


def test_ask_user_is_answered_and_the_answer_reaches_the_model(svc, model):
    task = 'Call the tool ask_user with args {"question": "What is your favourite colour?"}. Then say the answer.'
    made = svc.create("baml", task=task, config=config(model, max_steps=3, tools=["ask_user"]))
    sid = made["session_id"]

    def open_questions():
        return [c for c in tool_calls(svc, sid) if c["status"] == "waiting_result"]
    asked = wait_for(lambda: open_questions() or (svc.session(sid)["status"] in FINISHED and "finished"),
                     timeout=FLOW_TIMEOUT_S, interval=0.5, what="the model's question")
    assert asked != "finished", [(s["status"], s.get("error"), s.get("tool_calls")) for s in svc.steps(sid)]
    first = asked[0]
    answered = 0
    while (snap := svc.session(sid))["status"] not in FINISHED:  # the model may ask several at once
        if open_questions():
            r = svc.post(f"/api/sessions/{sid}/answer", json={"text": "green"})
            assert r.status_code == 202, r.text
            svc.action(r.json()["action_id"], timeout=60)
            answered += 1
            assert answered <= 100
        else:
            wait_for(lambda: open_questions() or svc.session(sid)["status"] in FINISHED, timeout=FLOW_TIMEOUT_S,
                     interval=0.5, what="the next question or the end")
    steps = check_record(svc, sid)
    row = next(c for c in tool_calls(svc, sid) if c["id"] == first["id"])
    assert row["status"] == "success" and "green" in json.dumps(row["result"])
    later = [s for s in steps if s["iteration"] > first["iteration"]]
    assert any("green" in json.dumps((s.get("inputs") or {}).get("tool_results")) for s in later), \
        "the answer reached the model as the tool's result"


def test_the_orchestrator_answers_a_conversation_message(svc, model):
    cid = svc.post("/api/conversations", json={"title": "real model"}).json()["conversation_id"]
    made = svc.create("orchestrator", task="help the user", conversation_id=cid, config={
        **config(model), "interval_s": 300, "tools": ["spawn_agent", "message_agent"], "sub_moniker": "baml",
        "sub_config": {"max_steps": 2, "interval_s": 0, "llm": llm_server.llm_config()}})
    sid = made["session_id"]
    svc.wait_steps(sid, 1, timeout=FLOW_TIMEOUT_S)
    r = svc.post(f"/api/conversations/{cid}/messages", json={"text": "Write a haiku about the sea.", "user_id": "ann"})
    assert r.status_code in (201, 202), r.text

    def agent_messages():
        messages = svc.get(f"/api/conversations/{cid}/messages").json()["messages"]
        return [m for m in messages if m["sender_type"] == "agent" and (m.get("text") or "").strip()]
    replies = wait_for(agent_messages, timeout=FLOW_TIMEOUT_S, interval=0.5, what="the orchestrator's reply")
    assert replies[0]["text"].strip()
    check_record(svc, sid)
    decisions = [d for s in svc.steps(sid) for d in ((s.get("data") or {}).get("decisions") or [])]
    assert decisions and decisions[0]["action"] in ("new_agent", "follow_up", "answer")
    svc.control(made["agent_id"], "destroy")


def test_an_agent_from_a_shipped_profile(svc, model):
    made = svc.create(moniker=None, profile="planner", task="Plan a picnic.", config={  # its llm is the profile's
        "max_steps": 2, "step_timeout_s": STEP_TIMEOUT_S})
    sid = made["session_id"]
    snap = wait_for(lambda: (s := svc.session(sid))["status"] in (*FINISHED, "waiting") and s,
                    timeout=FLOW_TIMEOUT_S, interval=0.5, what="the planner's first draft")
    steps = check_record(svc, sid)
    assert "planner" in json.dumps(snap["config"].get("profile")), snap["config"]
    assert steps[0]["status"] in ("ok", "done"), steps[0]
    assert snap["status"] in ("waiting", "done"), (snap["status"], snap["last_error"])
    svc.control(made["agent_id"], "destroy")


def test_usage_counts_every_attempt_of_a_step_cut_short(svc, model):
    """A reply cap far too small to write a frame: the step fails after its asks,
    and the usage holds every attempt the server was sent."""
    cfg = config(model, max_steps=1)
    cfg["llm"] = {**cfg["llm"], "max_tokens": 3, "max_reasks": 1}
    made = svc.create("baml", task="Tell a long story.", config=cfg)
    sid = made["session_id"]
    snap = finish(svc, sid)
    steps = check_record(svc, sid)
    # a reply cut at max_tokens is never read as a frame: asked again shorter once, then the step fails saying so
    assert snap["status"] == "error" and re.search(r"cut at max_tokens \(3\) twice|unparseable LLM output after 2 ask",
                                                   snap["last_error"]), snap["last_error"]
    usage = steps[-1]["usage"]
    assert usage["attempts"] == 2 and usage["failed_attempts"] == 2 and usage["output_tokens"] >= 2
    assert snap["usage"]["failed_attempts"] == 2


# ---- replay and evals (issue 29) ----------------------------------------------------------

def served_or_diverged(svc: Service, replay_id: str) -> list[dict]:
    """A ``recorded`` replay's tool calls: each served from the record or a
    divergence that stopped it; none ran."""
    calls = tool_calls(svc, replay_id)
    for call in calls:
        assert call["status"] == "replayed" and call["replay_of"] or (
            call["status"] == "failed" and call["error"].startswith("diverged from the recording")), call
    return calls


def test_a_replay_with_other_sampling_finishes_and_its_diff_reads(svc, model):
    """Record a session that calls a tool, replay it with other sampling (one
    real model is installed here, so 'another model' is the same weights
    sampled otherwise), and read the diff."""
    sid = tool_flow(svc, model, "wait", "seconds 1")  # the tool test's session, when it ran first
    recorded = check_record(svc, sid)
    r = svc.post(f"/api/sessions/{sid}/replay",
                 json={"config": {"llm": {"temperature": 0.8, "seed": 7}}, "tools": "recorded"})
    assert r.status_code == 202, r.text
    rid = r.json()["session_id"]
    snap = finish(svc, rid)
    assert snap["replayed_from"] == {"session_id": sid, "from_iteration": 0}
    assert snap["config"]["llm"]["temperature"] == 0.8 and snap["config"]["llm"]["model"] == llm_server.MODEL_NAME
    steps = check_record(svc, rid)
    assert steps[0]["iteration"] == 0
    served_or_diverged(svc, rid)
    if snap["status_reason"] == "diverged":
        assert snap["replay"]["diverged_at"] is not None and snap["last_error"].startswith("diverged")
    diff = svc.get(f"/api/sessions/{rid}/diff", against=sid)
    assert diff.status_code == 200, diff.text
    body = diff.json()
    assert body["a"]["session_id"] == sid and body["b"]["session_id"] == rid
    assert body["a"]["steps"] == len(recorded) and body["b"]["steps"] == len(steps)
    paired = [row["iteration"] for row in body["iterations"]]
    assert paired == sorted(paired) and paired[0] == 0
    first = body["first_divergence"]
    assert first is None or first["iteration"] in paired


def test_an_eval_run_over_two_real_sessions_produces_scores(svc, model):
    """Two sessions (five took ~7 minutes beside the suite, three ~5: each is
    recorded, replayed and judged by the one-thread model)."""
    tasks = ["Say hello and finish.", "Name one colour and finish."]
    sessions = [svc.create("baml", task=t, config=config(model, max_steps=1))["session_id"] for t in tasks]
    for sid in sessions:
        finish(svc, sid)
    r = svc.post("/api/evalsets", json={"name": "two real sessions", "session_ids": sessions})
    assert r.status_code == 201, r.text
    scorers = ["final_equal", "steps", "tokens", "errors", "divergence_step", "llm_judge"]
    run = svc.post(f"/api/evalsets/{r.json()['id']}/runs",
                   json={"config": {"llm": {"temperature": 0.7, "seed": 3}}, "scorers": scorers, "concurrency": 2})
    assert run.status_code == 202, run.text
    done = wait_for(lambda: (v := svc.get(f"/api/evalruns/{run.json()['id']}").json())["status"] == "done" and v,
                    timeout=FLOW_TIMEOUT_S, interval=1, what="the eval run over two real sessions")
    assert done["progress"]["scored"] == 2, done["progress"]
    for result in done["results"]:
        scores = result["scores"]
        assert set(scores) == set(scorers), scores
        assert scores["steps"]["value"] is not None and scores["tokens"]["value"] is not None
        judged = scores["llm_judge"]
        assert (judged["value"] is not None and 0 <= judged["value"] <= 1) or judged["detail"], judged
        served_or_diverged(svc, result["replay_session_id"])
    assert done["summary"]["steps"]["n"] == 2
