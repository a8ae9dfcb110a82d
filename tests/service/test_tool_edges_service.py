"""Tools at the edges, end to end through the real service (agents.py and
app.py as subprocesses, one service for the module): app.py lists the tools
agents.py discovered on an MCP server (GET /api/tools, across processes), an
MCP server's tool is called by a session, and the ``baml`` moniker calls a
slow tool against the fake LLM (no LLM request while the
tool runs; afterwards exactly one, whose prompt holds the tool's result).

The session tests need the runner's tool execution (``runtime/session/tool_runner.py``,
the StepFrame-v1 core); without it they are skipped.
"""
import json
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI, Reply, Received
from tests.harness import Service, wait_for

try:
    import runtime.session.tool_runner  # noqa: F401
    HAS_RUNNER = True
except ImportError:
    HAS_RUNNER = False
needs_runner = pytest.mark.skipif(not HAS_RUNNER, reason="needs the StepFrame-v1 tool runner")

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "tests" / "mcp_demo_server.py")


def frame(**fields) -> str:
    return json.dumps({"step": "0", "next_step": "1", "state": {}, "done": False, **fields})


class Script:
    """The fake LLM's answers for the slow-tool session: first a tool call,
    then (with the result in the prompt) done."""

    def __call__(self, request: Received) -> Reply:
        if "tool_results:" in request.prompt:
            return Reply(frame(step="1", next_step="2", done=True, text="the tool answered"))
        return Reply(frame(text="calling the slow tool",
                           tool_calls=[{"name": "sleep_count", "args": {"seconds": 3, "key": "llm-slow"}}]))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("edges")
    (root / "logs").mkdir()
    (root / "counts").mkdir()
    mcp_log = root / "mcp.log"
    config = root / "mcp.json"
    config.write_text(json.dumps({"servers": {"demo": {
        "command": sys.executable, "args": [DEMO], "env": {"MCP_DEMO_LOG": str(mcp_log)}}}}))
    fake = FakeOpenAI(Script()).start()
    svc = Service(str(root / "data"), str(root / "logs"),
                  agents_args=["--mcp-config", str(config), "--http-fetch-allow", "example.org"],
                  env={"AGENTSVC_TOOL_COUNT_DIR": str(root / "counts"), "AGENTSVC_LLM_BASE_URL": fake.base_url,
                       "AGENTSVC_LLM_MODEL": "fake-model"})
    try:
        svc.start_app()
        before = {t["name"]: t for t in svc.get("/api/tools").json()["tools"]}  # agents.py not started yet
        svc.start_agents()
        wait_for(lambda: any(t["name"] == "demo.add" for t in svc.get("/api/tools").json()["tools"]),
                 timeout=90, what="the MCP tools in GET /api/tools")
        yield {"svc": svc, "fake": fake, "counts": root / "counts", "mcp_log": mcp_log, "before": before}
    finally:
        svc.stop()
        fake.stop()


def test_app_lists_the_tools_agents_discovered(env):
    """GET /api/tools across processes: agents.py connected to the MCP server and
    recorded its catalog; app.py, which starts no MCP server, lists it."""
    svc, before = env["svc"], env["before"]
    assert "http_fetch" in before and before["http_fetch"]["workers"] == []  # app.py's own built-in
    assert not any(name.startswith("demo.") for name in before)  # app.py started no MCP server
    tools = {t["name"]: t for t in svc.get("/api/tools").json()["tools"]}
    add = tools["demo.add"]
    assert add["source"] == "mcp" and add["mcp"]["status"] == "connected"
    assert add["args_schema"]["required"] == ["a", "b"] and add["description"] == "Add two integers."
    assert len(add["workers"]) == 1
    # agents.py's description of http_fetch (its allowlist) wins over app.py's
    assert "example.org" in tools["http_fetch"]["description"]
    assert tools["http_fetch"]["args_schema"]["properties"]["url"]["type"] == "string"


def calls_of(svc, session_id):
    return svc.get("/api/tool-calls", session_id=session_id).json()["tool_calls"]


def finished(svc, session_id):
    snap = svc.session(session_id)
    return snap if snap["status"] in ("done", "error", "stopped") else None


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@needs_runner
def test_an_mcp_tool_is_called_by_a_session(env):
    svc = env["svc"]
    created = svc.create("scripted", config={"tools": ["demo.add"], "interval_s": 0, "frames": [
        {"text": "adding", "tool_calls": [{"name": "demo.add", "args": {"a": 2, "b": 40}},
                                          {"name": "demo.add", "args": {"a": "two", "b": 40}}]},
        {"text": "done", "done": True}]})
    snap = wait_for(lambda: finished(svc, created["session_id"]), timeout=60, what="the session to finish")
    assert snap["status"] == "done", snap
    calls = calls_of(svc, created["session_id"])
    assert [c["status"] for c in calls] == ["success", "failed"]
    assert calls[0]["result"] == {"result": 42}
    assert "a: 'two' is not of type 'integer'" in calls[1]["error"]
    steps = svc.steps(created["session_id"])
    results = steps[1]["inputs"]["tool_results"]
    assert [(r["name"], r["status"]) for r in results] == [("demo.add", "success"), ("demo.add", "failed")]
    assert results[0]["result"] == {"result": 42}
    # the bad call never reached the server
    assert sum(1 for line in env["mcp_log"].read_text().splitlines() if line.startswith("add ")) == 1


@needs_runner
def test_the_llm_is_not_called_while_its_tool_runs(env):
    svc, fake = env["svc"], env["fake"]
    before = len(fake.requests)
    created = svc.create("baml", task="use the slow tool once, then finish",
                         config={"tools": ["sleep_count"], "interval_s": 0})
    sid = created["session_id"]
    wait_for(lambda: calls_of(svc, sid), timeout=60, what="the tool call row")
    # Observe the tool running.  Whether the model was asked meanwhile is judged below from
    # the times the fake server and the row record: app.py's read of the row may lag the
    # store by its read-consistency interval, so a sample taken here can see the row still
    # running after its end landed and the next step's request went out (seen under load).
    deadline, samples = time.monotonic() + 60, 0
    while time.monotonic() < deadline and calls_of(svc, sid)[0]["status"] in ("pending", "running"):
        samples += 1
        time.sleep(0.05)
    assert samples, "the tool ended before it could be observed running"
    snap = wait_for(lambda: finished(svc, sid), timeout=60, what="the session to finish")
    assert snap["status"] == "done", snap
    # The session's summary, written once it has finished (the record), is not a step's request.
    requests = [r for r in fake.requests[before:] if "SummarizeRecord" not in r.prompt and "key_points" not in r.prompt]
    assert len(requests) == 2  # one before the tool, exactly one after
    row = calls_of(svc, sid)[0]
    assert row["status"] == "success" and row["result"] == {"slept": 3.0, "executions": 1}
    assert requests[0].at <= ts(row["started_at"]) and requests[1].at >= ts(row["finished_at"])
    line = next(l for l in requests[1].prompt.splitlines() if l.strip().startswith("tool_results:"))
    shown = json.loads(line.split("tool_results:", 1)[1])
    assert shown == [{"id": row["id"], "name": "sleep_count", "status": "success",
                      "result": {"slept": 3.0, "executions": 1}}]
    assert '"name": "sleep_count"' in requests[0].prompt  # the model was shown the tool it may call
