"""OpenTelemetry traces received by a real receiver (issue 42, What must hold 2):
agents.py with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointed at Arize Phoenix
(tests/servers.py ``Phoenix``, installed by scripts/test_deps/phoenix.sh), and
the spans read back through Phoenix's own REST API.

- a ``baml`` session against the fake OpenAI server, whose first HTTP attempt
  fails: session > steps > one ``chat`` span per attempt, with the GenAI
  attributes and the server's token counts, and (the operator opted in) the
  prompt and the reply;
- a ``scripted`` session whose ``add`` call waits for a person's approval and
  which spawns a sub-agent: ``execute_tool`` spans under their steps, the wait
  as an ``approval wait`` span, and the child's session span under the
  parent's ``spawn_agent`` span, in the parent's trace;
- the steps that followed the parent's create and the approval, both asked
  with a W3C ``traceparent`` header, name those actions (Phoenix's REST API
  does not return span links yet; tests/unit/test_tracing.py checks the
  links themselves), and the header is kept in the actions' payloads;
- agents.py's /metrics counts no dropped span.
"""
import json

import pytest
import requests

from runtime.record import tracing
from tests.fake_openai import FakeOpenAI, Reply, scripted
from tests.harness import Service, free_port, wait_for


def frame(n: int, text: str, done: bool = False) -> str:
    return json.dumps({"step": str(n), "next_step": str(n + 1), "state": {"day": n}, "text": text, "data": None,
                       "done": done})


CREATE_REQUEST = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
APPROVE_REQUEST = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def hex_id(value: int, size: int) -> str:
    return f"{value:0{size * 2}x}"


@pytest.fixture
def fake():
    server = FakeOpenAI(scripted(Reply(status=503, content="busy"),
                                 Reply(frame(0, "Day one: Belém."), prompt_tokens=310, completion_tokens=25),
                                 then=Reply(frame(1, "Day two: Alfama.", done=True), prompt_tokens=340,
                                            completion_tokens=22))).start()
    yield server
    server.stop()


@pytest.fixture
def traced(tmp_path, phoenix):
    (tmp_path / "logs").mkdir()
    health = free_port()
    svc = Service(str(tmp_path / "data"), str(tmp_path / "logs"), agents_args=["--health-port", str(health)],
                  env={"OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.url, "OTEL_BSP_SCHEDULE_DELAY": "200",
                       "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    svc.health_url = f"http://127.0.0.1:{health}"
    svc.start()
    yield svc
    svc.stop()


def tool_rows(svc, session_id) -> list[dict]:
    return svc.get("/api/tool-calls", session_id=session_id, limit=1000).json()["tool_calls"]


def test_a_baml_and_a_scripted_session_with_a_sub_agent_arrive_as_span_trees(traced, phoenix, fake):
    svc = traced
    baml = svc.create("baml", "Plan two days in Lisbon", name="trip planner",
                      config={"interval_s": 0, "llm": svc.endpoints.llm(fake)})
    child_call = {"name": "spawn_agent", "args": {
        "task": "help your parent", "moniker": "scripted", "name": "helper", "wait": True,
        "config": {"interval_s": 0, "tools": ["human"], "frames": [{"text": "helped", "done": True}]}}}
    made = svc.post("/api/agents", headers={"traceparent": CREATE_REQUEST}, json={
        "moniker": "scripted", "task": "delegate", "name": "parent", "config": {
            "interval_s": 0, "tools": ["add", "spawn_agent", "human"], "approve": ["add"], "frames": [
                {"text": "adding", "tool_calls": [{"name": "add", "args": {"numbers": [1, 2]}}]},
                {"text": "spawning", "tool_calls": [child_call]},
                {"text": "all done", "done": True}]}})
    assert made.status_code == 202, made.text
    parent = made.json()
    pid = parent["session_id"]
    [waiting] = wait_for(lambda: [c for c in tool_rows(svc, pid) if c["status"] == "waiting_approval"],
                         timeout=120, what="the add call to wait for approval")
    r = svc.post(f"/api/tool-calls/{waiting['id']}/approve", headers={"traceparent": APPROVE_REQUEST})
    approval = svc.action(r.json()["action_id"])
    assert approval["status"] == "done" and approval["payload"]["traceparent"] == APPROVE_REQUEST
    assert svc.action(parent["action_id"])["payload"]["traceparent"] == CREATE_REQUEST
    svc.wait_status(baml["session_id"], "done", timeout=120)
    svc.wait_status(pid, "done", timeout=120)
    [spawn] = [c for c in tool_rows(svc, pid) if c["name"] == "spawn_agent"]
    child_id = spawn["id"]  # a sub-agent's session id is its spawn call's id (tools/spawn_agent.py)
    assert svc.session(child_id)["status"] == "done"

    expected = {"session trip planner", "session parent", "session helper", "execute_tool add",
                "execute_tool spawn_agent", "approval wait"}

    def arrived():
        spans = phoenix.spans()
        names = {s["name"] for s in spans}
        chats = [s for s in spans if s["name"].startswith("chat ")]
        return spans if expected <= names and len(chats) >= 3 else None
    spans = wait_for(arrived, timeout=120, interval=0.5, what="the spans to reach Phoenix")

    def one(name, **attrs):
        found = [s for s in spans if s["name"] == name
                 and all(s["attributes"].get(k) == v for k, v in attrs.items())]
        assert len(found) == 1, (name, attrs, [(s["name"], s["attributes"]) for s in spans])
        return found[0]

    # the baml session: session > steps > one chat span per HTTP attempt
    sid = baml["session_id"]
    trace = hex_id(tracing.trace_id(sid), 16)
    session = one("session trip planner")
    assert session["parent_id"] is None and session["context"]["trace_id"] == trace
    assert session["context"]["span_id"] == hex_id(tracing.session_span_id(sid), 8)
    assert session["attributes"]["agentsvc.status"] == "done"
    steps = [one(f"step {n}", **{"agentsvc.session_id": sid}) for n in (0, 1)]
    for step in steps:
        assert step["parent_id"] == session["context"]["span_id"] and step["context"]["trace_id"] == trace
    chats = [s for s in spans if s["name"] == "chat fake-model"]
    assert len(chats) == 3 and {s["context"]["trace_id"] for s in chats} == {trace}
    by_step = {s["context"]["span_id"]: n for n, s in enumerate(steps)}
    failed = [s for s in chats if s["attributes"].get("error.type")]
    assert [s["attributes"]["error.type"] for s in failed] == ["5xx"] and by_step[failed[0]["parent_id"]] == 0
    assert failed[0]["status_code"] == "ERROR"
    ok = sorted(((by_step[s["parent_id"]], s["attributes"]["gen_ai.usage.input_tokens"],
                  s["attributes"]["gen_ai.usage.output_tokens"]) for s in chats if s not in failed))
    assert ok == [(0, 310, 25), (1, 340, 22)]
    assert "gen_ai.input.messages" not in failed[0]["attributes"]  # the kept request is the last attempt's
    for chat in chats:
        if chat not in failed:  # the operator opted in: what the model was sent and answered (model_io)
            assert "Plan two days in Lisbon" in chat["attributes"]["gen_ai.input.messages"]
            assert "Day " in chat["attributes"]["gen_ai.output.messages"]
        assert chat["attributes"]["gen_ai.operation.name"] == "chat"
        assert chat["attributes"]["gen_ai.request.model"] == "fake-model"
        assert chat["attributes"]["agentsvc.structured_mode"]

    # the scripted parent: the approved call, the spawn call, and the child under it, in one trace
    trace = hex_id(tracing.trace_id(pid), 16)
    top = one("session parent")
    assert top["parent_id"] is None and top["context"]["trace_id"] == trace
    step0 = one("step 0", **{"agentsvc.session_id": pid})
    step1 = one("step 1", **{"agentsvc.session_id": pid})
    add = one("execute_tool add")
    assert add["parent_id"] == step0["context"]["span_id"] and step0["parent_id"] == top["context"]["span_id"]
    assert add["attributes"]["gen_ai.tool.name"] == "add" and add["attributes"]["agentsvc.status"] == "success"
    wait = one("approval wait")
    assert wait["parent_id"] == add["context"]["span_id"] and wait["attributes"]["agentsvc.decision"] == "approved"
    assert wait["start_time"] <= wait["end_time"] <= add["end_time"]
    spawned = one("execute_tool spawn_agent")
    assert spawned["parent_id"] == step1["context"]["span_id"]
    helper = one("session helper")
    assert helper["parent_id"] == spawned["context"]["span_id"]
    child_step = one("step 0", **{"agentsvc.session_id": child_id})
    assert child_step["parent_id"] == helper["context"]["span_id"]
    assert {s["context"]["trace_id"] for s in (top, step0, step1, add, wait, spawned, helper, child_step)} == {trace}
    # the steps those requests caused name their actions
    assert list(step0["attributes"]["agentsvc.action_ids"]) == [parent["action_id"]]
    assert list(step1["attributes"]["agentsvc.action_ids"]) == [approval["id"]]
    assert list(step1["attributes"]["agentsvc.action_types"]) == ["tool_approve"]

    metrics = requests.get(f"{svc.health_url}/metrics", timeout=30).text
    assert "agentsvc_trace_spans_dropped_total 0.0" in metrics, metrics


def test_a_session_resumed_after_a_crash_continues_its_trace(traced, phoenix):
    """agents.py killed while a call waits for approval: the new process's spans
    (the call, its wait, the next step, the session) join the first one's trace,
    under the same session and step spans."""
    svc = traced
    made = svc.create("scripted", task="survive", name="survivor", config={
        "interval_s": 0, "tools": ["add"], "approve": ["add"], "frames": [
            {"text": "one"},
            {"text": "adding", "tool_calls": [{"name": "add", "args": {"numbers": [2, 3]}}]},
            {"text": "three", "done": True}]})
    sid = made["session_id"]
    [waiting] = wait_for(lambda: [c for c in tool_rows(svc, sid) if c["status"] == "waiting_approval"],
                         timeout=120, what="the add call to wait for approval")
    before = wait_for(lambda: (spans := phoenix.spans()) and {"step 0", "step 1"} <= {s["name"] for s in spans}
                      and spans, timeout=120, interval=0.5, what="the first process's steps to reach Phoenix")
    svc.kill_agents()
    svc.start_agents()
    r = svc.post(f"/api/tool-calls/{waiting['id']}/approve")
    assert svc.action(r.json()["action_id"], timeout=120)["status"] == "done"
    svc.wait_status(sid, "done", timeout=120)
    expected = {"session survivor", "step 2", "execute_tool add", "approval wait"}
    spans = wait_for(lambda: (spans := phoenix.spans()) and expected <= {s["name"] for s in spans} and spans,
                     timeout=120, interval=0.5, what="the second process's spans to reach Phoenix")
    named = {s["name"]: s for s in spans}
    trace = hex_id(tracing.trace_id(sid), 16)
    session = named["session survivor"]
    assert session["parent_id"] is None and session["context"]["span_id"] == hex_id(tracing.session_span_id(sid), 8)
    assert {s["context"]["trace_id"] for s in spans} == {trace}
    old = {s["name"]: s for s in before}
    for n in (0, 1, 2):
        assert named[f"step {n}"]["parent_id"] == session["context"]["span_id"]
    assert named["execute_tool add"]["parent_id"] == old["step 1"]["context"]["span_id"]  # a span the dead process sent
    # the new process learnt of the wait from the rows it loaded (tool_phase_loaded)
    assert named["approval wait"]["parent_id"] == named["execute_tool add"]["context"]["span_id"]
    assert named["execute_tool add"]["attributes"]["agentsvc.status"] == "success"
