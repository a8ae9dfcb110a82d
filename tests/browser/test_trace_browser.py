"""The trace view (pages/trace.js) in a real browser (Debian's chromium driven
by playwright) against the real service: reached from the session page's
Trace link, it draws a row per step with its model attempt, a tool call that
waited for approval (the wait drawn apart from the run, both said in words),
a question's wait for the user and a sub-agent whose link opens the child's
own trace; windows of a longer session page both ways; the page passes
axe-core at 1400 and 400 px and fits at 400 px."""
import pytest

from tests.browsing import scan, screenshot
from tests.harness import wait_for

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")

FRAMES = [
    {"text": "starting", "usage": {"input_tokens": 11, "output_tokens": 7},
     "tool_calls": [{"name": "add", "args": {"numbers": [1, 2]}},
                    {"name": "spawn_agent", "args": {"task": "quick", "moniker": "scripted", "name": "helper",
                                                     "config": {"interval_s": 0,
                                                                "frames": [{"text": "child done", "done": True}]}}}]},
    {"text": "asking", "tool_calls": [{"name": "ask_user", "args": {"question": "Which city?"}}]},
    {"text": "bye", "done": True}]


def calls(svc, session_id: str) -> list[dict]:
    return svc.get("/api/tool-calls", session_id=session_id, limit=1000).json()["tool_calls"]


def one_call(svc, session_id: str, name: str, status: str) -> dict:
    return wait_for(lambda: [c for c in calls(svc, session_id) if c["name"] == name and c["status"] == status],
                    timeout=120, what=f"a {status} {name} call of {session_id}")[0]


def traced_session(svc) -> tuple[str, str]:
    """A finished session with an approved call, an answered question and a
    sub-agent; its id and the child's."""
    made = svc.create("scripted", name="traced", config={
        "interval_s": 0, "tools": ["add", "spawn_agent", "ask_user"], "approve": ["add"], "frames": FRAMES})
    sid = made["session_id"]
    add = one_call(svc, sid, "add", "waiting_approval")
    # the approval waits a measurable while: until the record says so (no fixed sleep)
    wait_for(lambda: svc.get(f"/api/sessions/{sid}/trace").json()["steps"][0]["tool_calls"][0]["approval_wait_ms"]
             >= 500, timeout=120, what="the approval wait to pass half a second")
    assert svc.post(f"/api/tool-calls/{add['id']}/approve").status_code == 202
    one_call(svc, sid, "ask_user", "waiting_result")
    assert svc.post(f"/api/sessions/{sid}/answer", json={"text": "Rome"}).status_code in (200, 202)
    svc.wait_status(sid, "done", timeout=120)
    child = [c for c in calls(svc, sid) if c["name"] == "spawn_agent"][0]["result"]["session_id"]
    svc.wait_status(child, "done", timeout=120)
    return sid, child


def test_the_trace_draws_steps_attempts_approval_waits_questions_and_sub_agents(page, shared_service):
    svc, expect = shared_service, playwright_api.expect
    page.set_viewport_size({"width": 1400, "height": 900})
    sid, child = traced_session(svc)

    page.goto(f"{svc.url}/#/session/{sid}")
    link = page.get_by_test_id("trace-link")
    expect(link).to_have_attribute("href", f"#/trace/{sid}", timeout=90_000)
    link.click()
    steps = page.get_by_test_id("trace-step")
    expect(steps).to_have_count(3, timeout=90_000)
    assert steps.evaluate_all("ns => ns.map((n) => +n.dataset.iteration)") == [0, 1, 2]
    expect(page.get_by_test_id("trace-meta")).to_contain_text("Steps 1–3 of 3")

    first = steps.nth(0)
    attempt = first.get_by_test_id("trace-attempt")
    expect(attempt).to_have_count(1)
    expect(attempt).to_contain_text("Model attempt 1 · ok")
    expect(attempt).to_contain_text("11 in, 7 out tokens")

    add = first.locator("[data-testid=trace-call][data-name=add]")
    expect(add).to_have_attribute("data-status", "success")
    expect(add).to_contain_text("for approval")
    expect(add).to_contain_text("ran ")
    approval, run = add.get_by_test_id("trace-approval"), add.get_by_test_id("trace-run")
    expect(approval).to_have_count(1)
    expect(run).to_have_count(1)
    # the wait is drawn apart from the run: it ends where the run starts, not over it
    wait_box, run_box = approval.bounding_box(), run.bounding_box()
    assert wait_box["width"] > 0 and wait_box["x"] + wait_box["width"] <= run_box["x"] + 1, (wait_box, run_box)
    assert page.evaluate("getComputedStyle(document.querySelector('[data-testid=trace-approval]')).backgroundImage"
                         ) != page.evaluate("getComputedStyle(document.querySelector('[data-testid=trace-run]'))"
                                            ".backgroundImage")  # hatched, not solid

    question = steps.nth(1).locator("[data-testid=trace-call][data-name=ask_user]")
    expect(question).to_contain_text("for the user")
    expect(question.get_by_test_id("trace-question")).to_have_count(1)

    sub = first.locator(f"[data-testid=trace-child][data-session='{child}']")
    expect(sub).to_contain_text("Sub-agent helper")
    expect(page.get_by_test_id("trace-children")).to_contain_text("spawned at step 1")
    found = scan(page)
    assert not found, f"axe-core at 1400 px: {found}"
    screenshot(page, "trace.png")  # with AGENTSVC_SCREENSHOTS=docs

    page.set_viewport_size({"width": 400, "height": 800})
    expect(steps.first).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0, "wider than the screen"
    found = scan(page)
    assert not found, f"axe-core at 400 px: {found}"

    page.set_viewport_size({"width": 1400, "height": 900})
    sub.get_by_test_id("trace-child-link").click()
    expect(page.get_by_test_id("trace-step")).to_have_count(1, timeout=90_000)
    assert page.evaluate("location.hash") == f"#/trace/{child}"
    expect(page.locator("#trace-title")).to_contain_text("helper")


def test_a_long_session_is_read_a_window_at_a_time(page, shared_service):
    svc, expect = shared_service, playwright_api.expect
    made = svc.create("scripted", config={"interval_s": 0, "frames": [{"text": f"step {i}"} for i in range(229)]
                                          + [{"text": "end", "done": True}]})
    sid = made["session_id"]
    svc.wait_status(sid, "done", timeout=180)
    page.goto(f"{svc.url}/#/trace/{sid}")
    steps = page.get_by_test_id("trace-step")
    expect(steps).to_have_count(200, timeout=90_000)
    expect(page.get_by_test_id("trace-meta")).to_contain_text("Steps 1–200 of 230")
    page.get_by_test_id("trace-later").first.click()
    expect(steps).to_have_count(30, timeout=90_000)
    assert steps.first.get_attribute("data-iteration") == "200"
    page.get_by_test_id("trace-earlier").first.click()
    expect(steps).to_have_count(200, timeout=90_000)
    assert steps.first.get_attribute("data-iteration") == "0"
