"""The diff view in a real browser (chromium via playwright): a fork whose script
changes at one step, opened from the fork's record ("Diff against source"),
shows both sessions side by side step by step, the first divergence
highlighted and scrolled to; the "Replay…" dialog beside "Fork from here"
checks what it is given and starts a replay whose record links its diff; the
pages pass axe-core.

The dashboard counts steps from 1: iteration 2 is "step 3"."""
import pytest

from tests.browsing import scan, screenshot

playwright_api = pytest.importorskip("playwright.sync_api")

USAGE = {"input_tokens": 120, "output_tokens": 30, "cost": 0.0004}
FRAMES = [{"text": "adding", "tool_calls": [{"id": "c1", "name": "add", "args": {"numbers": [1, 2]}}], "usage": USAGE},
          {"text": "thinking", "state": {"notes": ["one"]}, "usage": USAGE},
          {"text": "adding again", "tool_calls": [{"id": "c2", "name": "add", "args": {"numbers": [3, 4]}}]},
          {"text": "the answer is 10", "done": True}]
CHANGED = [*FRAMES[:2], {"text": "adding more", "state": {"notes": ["two"]},
                         "tool_calls": [{"id": "c2", "name": "add", "args": {"numbers": [3, 5]}}]}, FRAMES[3]]


def test_the_diff_of_a_fork_highlights_its_first_divergence(page, shared_service):
    expect = playwright_api.expect
    svc = shared_service
    made = svc.create("scripted", config={"interval_s": 0, "tools": ["add"], "frames": FRAMES}, name="adder")
    source = made["session_id"]
    svc.wait_status(source, "done", timeout=60)
    r = svc.post(f"/api/sessions/{source}/fork", json={"from_iteration": 0, "config": {"frames": CHANGED}})
    assert r.status_code == 202, r.text
    forked = r.json()["session_id"]
    svc.wait_status(forked, "done", timeout=60)

    page.goto(f"{svc.url}/#/session/{forked}")
    page.get_by_test_id("diff-source").click()
    rows = page.get_by_test_id("diff-row")
    expect(rows).to_have_count(3)
    # titled by names (issue 40, item 9), the ids only to tell a fork from its source
    expect(page.locator("#diff-title")).to_have_text(f"Diff: adder ({forked[-8:]}) against adder ({source[-8:]})")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.iteration)") == ["1", "2", "3"]
    first = page.locator("[data-testid=diff-row].first")
    expect(first).to_have_attribute("data-iteration", "2")
    expect(first).to_be_in_viewport()
    expect(first.get_by_test_id("diff-a")).to_contain_text("adding again")
    expect(first.get_by_test_id("diff-b")).to_contain_text("adding more")
    expect(first.get_by_test_id("diff-b")).to_contain_text('add({"numbers":[3,5]})')
    expect(page.locator("[data-testid=diff-row][data-differs=true]")).to_have_count(1)
    expect(page.get_by_test_id("diff-first")).to_contain_text("First divergence at step 3")
    first.get_by_test_id("diff-state").locator("summary").click()
    expect(first.get_by_test_id("diff-state")).to_contain_text("/notes/0 replace")
    assert not scan(page), scan(page)
    page.set_viewport_size({"width": 1100, "height": 760})
    first.scroll_into_view_if_needed()
    screenshot(page, "diff_view.png")  # with AGENTSVC_SCREENSHOTS=docs
    page.set_viewport_size({"width": 400, "height": 760})  # one card per step, nothing cut off
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0

    # the "Replay…" dialog of the source's second step: prefilled, and it checks its fields before sending
    page.goto(f"{svc.url}/#/session/{source}")
    page.locator('[data-testid=steps] li[data-iteration="1"]').get_by_test_id("replay-here").click()
    dialog = page.get_by_test_id("replay-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_test_id("replay-from")).to_have_value("2")
    dialog.get_by_test_id("replay-config").fill("[1]")
    dialog.get_by_test_id("replay-submit").click()
    expect(dialog.locator(".form-error")).to_have_text("Config changes must be a JSON object.")
    assert not scan(page), scan(page)
    dialog.get_by_test_id("replay-cancel").click()
    expect(dialog).to_be_hidden()

    # ... and replays: the replay's record says what it replayed and links its diff, where nothing diverged
    page.locator('[data-testid=steps] li[data-iteration="1"]').get_by_test_id("replay-here").click()
    dialog.get_by_test_id("replay-config").fill("")
    dialog.get_by_test_id("replay-submit").click()
    expect(page.get_by_test_id("replayed-from")).to_contain_text(f"Replay of session {source[-8:]} from step 2")
    replayed = page.evaluate("location.hash").split("/")[-1]
    assert svc.wait_status(replayed, "done", timeout=60)["replayed_from"] == {"session_id": source,
                                                                              "from_iteration": 1}
    page.get_by_test_id("diff-source").click()
    expect(page.get_by_test_id("diff-row")).to_have_count(3)
    expect(page.get_by_test_id("diff-first")).to_contain_text("No divergence")

    # the sessions a search finds can become an eval set: the search page links to the Evals page's form
    page.goto(f"{svc.url}/#/search?q=thinking")
    page.get_by_test_id("search-evalset").click()
    expect(page.get_by_test_id("evalset-q")).to_have_value("thinking")
