"""The session timeline grouped by turn, in a real browser (chromium via
playwright, as in test_dashboard_browser.py): a header per turn with what
started it, how it ended and its summary, and a button that folds the turn's
steps away and back."""
import pytest

from tests.conversation_api import ended_turns

playwright_api = pytest.importorskip("playwright.sync_api")


def test_the_timeline_is_grouped_by_turn_and_a_turn_folds(page, shared_service):
    expect = playwright_api.expect
    svc = shared_service
    made = svc.create("scripted", "greet the visitor", config={"interval_s": 0, "when_idle": "wait", "frames": [
        {"text": "hello there"}, {"text": "the answer is 42", "done": True}]})
    sid = made["session_id"]
    svc.wait_status(sid, "waiting")
    r = svc.post(f"/api/agents/{made['agent_id']}/interrupt", json={"guidance": "what is the answer?",
                                                                     "session_id": sid})
    assert r.status_code == 202
    ended_turns(svc, sid, 2)

    page.goto(f"{svc.url}/#/session/{sid}")
    heads = page.get_by_test_id("turn")
    expect(heads).to_have_count(2)
    newest, oldest = heads.nth(0), heads.nth(1)  # the timeline is newest first
    expect(newest).to_contain_text("Turn 2")
    expect(newest).to_contain_text("“what is the answer?”")
    expect(newest).to_contain_text("then finished")
    expect(newest.get_by_test_id("turn-summary")).to_have_text("the answer is 42")
    expect(oldest).to_contain_text("Turn 1")
    expect(oldest).to_contain_text("started by the task")
    expect(oldest).to_contain_text("then waited for input")
    expect(oldest.get_by_test_id("turn-summary")).to_have_text("hello there")

    first_step = page.locator('[data-testid=steps] li.step[data-iteration="0"]')
    later_step = page.locator('[data-testid=steps] li.step[data-iteration="1"]')
    expect(first_step).to_be_visible()
    oldest.get_by_test_id("turn-toggle").click()
    expect(first_step).to_be_hidden()
    expect(later_step).to_be_visible()  # only that turn folds
    toggle = page.locator('li.turn-head[data-turn="0"]').get_by_test_id("turn-toggle")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    toggle.click()
    expect(first_step).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "true")
