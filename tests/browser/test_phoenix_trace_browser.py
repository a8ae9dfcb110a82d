"""A session's trace as Arize Phoenix shows it (issue 42: "a screenshot of a
session's trace in Phoenix"), in a real browser (Debian's chromium through
playwright): agents.py exports to Phoenix (tests/servers.py, installed by
scripts/test_deps/phoenix.sh), a ``baml`` session against the fake OpenAI
server calls ``add`` (approved by a person) and ``spawn_agent`` (a sub-agent
it waits for), and Phoenix's own trace page lists the session, its steps, the
model calls, both tool calls, the approval wait and the sub-agent's session.
With AGENTSVC_SCREENSHOTS=docs it saves docs/phoenix-trace.png, which the
README's "Traces" section shows."""
import json

import pytest

from runtime.record import tracing
from tests.browsing import screenshot
from tests.fake_openai import FakeOpenAI, Reply
from tests.harness import Service, wait_for

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")

CHILD = {"task": "look up the opening hours", "moniker": "scripted", "name": "researcher", "wait": True,
         "config": {"interval_s": 0, "frames": [{"text": "Open 10:00-18:00.", "done": True}]}}
REPLIES = [
    Reply(json.dumps({"step": "0", "next_step": "1", "state": {}, "done": False, "text": "Counting and delegating.",
                      "tool_calls": [{"name": "add", "args": {"numbers": [120, 45]}},
                                     {"name": "spawn_agent", "args": CHILD}]}),
          prompt_tokens=412, completion_tokens=58),
    Reply(json.dumps({"step": "1", "next_step": "2", "state": {}, "done": True,
                      "text": "165 visitors; the museum opens at 10:00."}), prompt_tokens=530, completion_tokens=21)]
EXPECTED = ("session museum planner", "step 0", "step 1", "chat fake-model", "execute_tool add",
            "execute_tool spawn_agent", "approval wait", "session researcher")


@pytest.fixture
def traced(tmp_path, phoenix):
    (tmp_path / "logs").mkdir()
    svc = Service(str(tmp_path / "data"), str(tmp_path / "logs"),
                  env={"OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.url, "OTEL_BSP_SCHEDULE_DELAY": "200"})
    svc.start()
    yield svc
    svc.stop()


def test_phoenix_shows_a_baml_sessions_trace(browser, traced, phoenix):
    svc = traced
    replies = list(REPLIES)
    with FakeOpenAI(lambda request: replies.pop(0) if replies else Reply(status=500)) as llm:
        made = svc.create("baml", task="How many visitors today, and when does the museum open?",
                          name="museum planner", config={"interval_s": 0, "tools": ["add", "spawn_agent"],
                                                         "approve": ["add"], "llm": svc.endpoints.llm(llm)})
        sid = made["session_id"]
        add = wait_for(lambda: next((c for c in svc.get("/api/tool-calls", session_id=sid).json()["tool_calls"]
                                     if c["name"] == "add" and c["status"] == "waiting_approval"), None),
                       timeout=120, what="the add call to wait for approval")
        assert svc.action(svc.post(f"/api/tool-calls/{add['id']}/approve").json()["action_id"])["status"] == "done"
        svc.wait_status(sid, "done", timeout=120)
    wait_for(lambda: set(EXPECTED) <= {s["name"] for s in phoenix.spans()}, timeout=120, interval=0.5,
             what="the session's spans to reach Phoenix")

    project = phoenix.project_id()
    trace = f"{tracing.trace_id(sid):032x}"
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{phoenix.url}/projects/{project}/traces/{trace}")
        for name in EXPECTED:  # Phoenix's span tree, as its own page draws it
            page.get_by_text(name, exact=True).first.wait_for()
        screenshot(page, "phoenix-trace.png")  # with AGENTSVC_SCREENSHOTS=docs
    finally:
        context.close()
