"""Saved views of the agents list (components/saved_views.js), in a real
browser (Debian's chromium via playwright, as in test_bulk_browser.py).

The filters are in the address; a named view keeps them in this browser's
localStorage.  Saved, then the page reloaded on the bare list, the view is
still offered; applied, it brings back the address and the filtered table
(status and search both); removed, it is gone after another reload.  axe-core
finds nothing at 1400 and 400 px with a view saved."""
import uuid
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.browsing import scan

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")
expect = playwright_api.expect


@pytest.fixture(scope="module")
def fleet(shared_service):
    """Two agents sharing a word: one fails, one finishes."""
    svc = shared_service
    tag = uuid.uuid4().hex[:8]
    failing = svc.create("chaos", f"views-{tag} failing", config={"fail_at": 1, "interval_s": 0})
    counting = svc.create("countdown", f"views-{tag} counting", config={"n": 2, "interval_s": 0})
    svc.wait_status(failing["session_id"], "error", timeout=120)
    svc.wait_status(counting["session_id"], "done", timeout=120)
    return tag, failing["agent_id"], counting["agent_id"]


def hash_query(page) -> dict:
    return parse_qs(urlsplit(page.evaluate("location.hash")[1:]).query)


def rows(page) -> list[str]:
    return page.eval_on_selector_all("[data-testid=agent-row]", "rs => rs.map((r) => r.dataset.agent)")


def filter_to_failing(page, tag):
    page.get_by_test_id("agents-search").fill(f"views-{tag}")
    expect(page.get_by_test_id("agent-row")).to_have_count(2, timeout=60_000)
    page.get_by_test_id("chip-error").click()
    expect(page.get_by_test_id("agent-row")).to_have_count(1, timeout=60_000)


def test_a_saved_view_survives_a_reload_and_brings_its_filters_back(page, shared_service, fleet):
    svc = shared_service
    tag, failing, _ = fleet
    filter_to_failing(page, tag)
    assert hash_query(page) == {"q": [f"views-{tag}"], "status": ["error"]}  # the address holds the filters
    page.get_by_test_id("saved-view-name").fill("failing views")
    page.get_by_test_id("save-view").click()
    expect(page.get_by_test_id("saved-view-link")).to_have_text("failing views")

    page.goto(f"{svc.url}/#/")  # a new load, on the unfiltered list
    page.reload()
    expect(page.get_by_test_id("agent-row").first).to_be_attached(timeout=60_000)
    assert hash_query(page) == {}
    link = page.get_by_test_id("saved-view-link")
    expect(link).to_have_text("failing views")
    expect(link).not_to_have_attribute("aria-current", "true")
    link.click()
    page.wait_for_function("location.hash.includes('status=error')")
    assert hash_query(page) == {"q": [f"views-{tag}"], "status": ["error"]}
    expect(page.get_by_test_id("agent-row")).to_have_count(1, timeout=60_000)
    assert rows(page) == [failing]
    expect(page.get_by_test_id("agents-search")).to_have_value(f"views-{tag}")
    expect(page.get_by_test_id("chip-error")).to_have_attribute("aria-pressed", "true")
    expect(link).to_have_attribute("aria-current", "true")

    page.get_by_role("button", name="Remove the view failing views").click()
    expect(page.get_by_test_id("saved-view")).to_have_count(0)
    page.reload()
    expect(page.get_by_test_id("agent-row").first).to_be_attached(timeout=60_000)
    expect(page.get_by_test_id("saved-view")).to_have_count(0)


@pytest.mark.parametrize("width", [1400, 400])
def test_saved_views_pass_axe(browser, shared_service, fleet, width):
    context = browser.new_context(viewport={"width": width, "height": 800})
    try:
        pg = context.new_page()
        pg.goto(shared_service.url + "/#/")
        filter_to_failing(pg, fleet[0])
        pg.get_by_test_id("saved-view-name").fill("a view with a longer name than most")
        pg.get_by_test_id("save-view").click()
        expect(pg.get_by_test_id("saved-view")).to_have_count(1)
        found = scan(pg)
        overflow = pg.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert not found, found
        assert overflow <= 0, f"{overflow}px wider than the window"
    finally:
        context.close()
