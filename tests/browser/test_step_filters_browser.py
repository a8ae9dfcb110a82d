"""Step filters on a session's timeline (components/step_filter.js), in a real
browser (Debian's chromium via playwright, as in test_timeline_browser.py).

A ``chaos`` session takes four good steps and fails at the fifth; a resume
fails again at the sixth.  Filtered to errors, the page lists exactly steps 5
and 6 (newest first) with how many match, the full timeline out of view; a
matching step is a link into the full timeline, which it shows and marks;
"Show all steps" brings the timeline back; axe-core finds nothing at 1400 and
400 px with the filter on."""
import pytest

from tests.browsing import scan
from tests.harness import wait_for

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")
expect = playwright_api.expect


@pytest.fixture(scope="module")
def failing(shared_service):
    svc = shared_service
    made = svc.create("chaos", "fails at step 5", config={"fail_at": 5, "interval_s": 0})
    sid = made["session_id"]
    svc.wait_status(sid, "error", timeout=120)
    assert svc.control(made["agent_id"], "resume", session_id=sid)["status"] == "done"
    wait_for(lambda: [s["status"] for s in svc.steps(sid)] == ["ok"] * 4 + ["error", "error"], timeout=120,
             what="a second error step after the resume")
    svc.wait_status(sid, "error", timeout=120)
    return sid


def shown_filtered(page) -> list[int]:
    return page.eval_on_selector_all("[data-testid=filtered-step]", "ns => ns.map((n) => +n.dataset.iteration)")


def open_filtered(page, svc, sid):
    page.goto(f"{svc.url}/#/session/{sid}")
    expect(page.get_by_test_id("step").first).to_be_attached(timeout=60_000)
    page.get_by_label("Show", exact=True).select_option("errors")
    expect(page.get_by_test_id("filter-summary")).to_contain_text("2 matching steps", timeout=60_000)


def test_filter_to_errors_shows_only_them_and_links_into_the_timeline(page, shared_service, failing):
    svc, sid = shared_service, failing
    open_filtered(page, svc, sid)
    assert shown_filtered(page) == [5, 4]
    expect(page.get_by_test_id("steps")).to_be_hidden()  # the full timeline stands aside
    assert page.get_by_test_id("filtered-step").all_inner_texts()[0].startswith("Step 6")

    page.get_by_test_id("filtered-step-link").last.click()  # step 5, the first error
    expect(page.get_by_test_id("steps")).to_be_visible()
    expect(page.locator("[data-testid=steps] li.step.linked")).to_have_attribute("data-iteration", "4")
    expect(page.get_by_test_id("filtered-steps")).to_be_hidden()
    assert page.get_by_label("Show", exact=True).input_value() == ""
    assert page.evaluate("location.hash").endswith(f"/session/{sid}?iteration=4")

    page.get_by_label("Show", exact=True).select_option("tool_calls")  # chaos asks for none
    expect(page.get_by_test_id("filter-summary")).to_contain_text("Showing 0 matching steps")
    page.get_by_test_id("filter-show-all").click()
    expect(page.get_by_test_id("steps")).to_be_visible()
    wait_for(lambda: page.locator("[data-testid=steps] li.step").count() == 6, timeout=60,
             what="all six steps in the timeline again")


@pytest.mark.parametrize("width", [1400, 400])
def test_filtered_timeline_passes_axe(browser, shared_service, failing, width):
    context = browser.new_context(viewport={"width": width, "height": 800})
    try:
        pg = context.new_page()
        open_filtered(pg, shared_service, failing)
        found = scan(pg)
        overflow = pg.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert not found, found
        assert overflow <= 0, f"{overflow}px wider than the window"
    finally:
        context.close()
