"""The record in a real browser (chromium via playwright, as in
test_dashboard_browser.py): the search box, a result linking to the exact
step, the session's summary, and "fork from here".

The dashboard counts steps from 1 (iteration 0 is "step 1"), so the liftoff of
a four-step countdown (iteration 3) is "step 4", and a fork from iteration 1
says "at step 2"."""
import pytest


playwright_api = pytest.importorskip("playwright.sync_api")


def test_search_a_step_open_it_see_the_summary_and_fork_from_it(page, shared_service):
    expect = playwright_api.expect
    svc = shared_service
    made = svc.create("countdown", "count the narwhals", config={"interval_s": 0, "n": 4})
    svc.wait_status(made["session_id"], "done")

    page.get_by_test_id("search-input").fill("narwhals")
    page.get_by_test_id("search-input").press("Enter")
    hits = page.get_by_test_id("search-hit")
    expect(hits.first).to_contain_text("summary")  # the finished session's summary mentions its task
    expect(page.locator(".search-results mark").first).to_have_text("narwhals")

    page.get_by_test_id("search-input").fill("liftoff")
    page.get_by_test_id("search-input").press("Enter")
    step_hit = page.get_by_test_id("search-hit").filter(has_text="step 4").first
    step_hit.locator("a").click()
    expect(page.locator("[data-testid=steps] li.linked")).to_have_attribute("data-iteration", "3")
    expect(page.get_by_test_id("session-summary")).to_contain_text("narwhals")

    page.locator('[data-testid=steps] li[data-iteration="1"]').get_by_test_id("fork-here").click()
    page.get_by_test_id("fork-guidance").fill("count the walruses instead")  # the fork dialog (components/fork.js)
    expect(page.get_by_test_id("fork-state")).not_to_have_value("")  # the step's state, read for editing
    page.get_by_test_id("fork-submit").click()
    expect(page.locator(".forked-from")).to_contain_text("at step 2")
    fork_id = page.evaluate("location.hash").split("/")[-1]
    assert fork_id != made["session_id"]
    snapshot = svc.wait_status(fork_id, "done")
    assert snapshot["forked_from"] == {"session_id": made["session_id"], "iteration": 1}
    assert [s["iteration"] for s in svc.steps(fork_id)][0] == 2


def test_a_message_hit_opens_the_conversation_at_that_message(page, shared_service):
    expect = playwright_api.expect
    svc = shared_service
    conversation = svc.post("/api/conversations", json={"title": "zoo"}).json()["conversation_id"]
    for text in ["the penguins are asleep", "the capybaras want lunch", "the ibis flew off"]:
        svc.post(f"/api/conversations/{conversation}/messages", json={"text": text})

    page.get_by_test_id("search-input").fill("capybaras")
    page.get_by_test_id("search-submit").click()  # the button, as well as Enter
    hit = page.get_by_test_id("search-hit").filter(has_text="message").first
    expect(hit.locator("mark")).to_have_text("capybaras")
    hit.locator("a").click()
    linked = page.locator("[data-testid=messages] li.linked")
    expect(linked).to_have_count(1)
    expect(linked).to_contain_text("the capybaras want lunch")
    assert "?message=" in page.evaluate("location.hash")
