"""Fleet controls and a list that lets people work, in a real browser (Debian's
chromium via playwright) against the real service: select every agent matching
a filter, see the preview count, pause them in bulk and see the rows say so;
focus and the row under the pointer survive live updates; the list's filters
live in the address (reload, back/forward); axe finds nothing at 1400 and 400 px."""
import pytest
from ulid import ULID

from tests.harness import wait_for

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")
from tests.browsing import scan, screenshot  # noqa: E402

FRAMES = [{"text": f"frame {i}"} for i in range(2000)]


def stepping(svc, name: str, interval: float = 0.2) -> dict:
    """An agent that keeps stepping (a long script) until paused or destroyed."""
    return svc.create("scripted", f"work for {name}", name=name, config={"interval_s": interval, "frames": FRAMES})


def row(pg, agent_id: str):
    return pg.locator(f"[data-testid=agent-row][data-agent='{agent_id}']")


def test_select_all_matching_previews_and_pauses_them(page, shared_service):
    svc, expect = shared_service, playwright_api.expect
    tag = str(ULID())[-6:].lower()
    fleet = [stepping(svc, f"fleet-{tag} {i}") for i in range(3)]
    bystander = stepping(svc, f"bystander-{tag}")
    for made in fleet + [bystander]:
        svc.wait_steps(made["session_id"], 1, timeout=60)

    page.get_by_test_id("agents-search").fill(f"fleet-{tag}")
    expect(page.get_by_test_id("agents-count")).to_have_text("1–3 of 3 matching", timeout=30_000)
    assert f"q=fleet-{tag}" in page.evaluate("location.hash")  # the filter is in the address
    page.get_by_test_id("bulk-select-matching").click()
    expect(page.get_by_test_id("bulk-summary")).to_have_text("All 3 matching agents selected")
    for made in fleet:
        expect(row(page, made["agent_id"]).get_by_test_id("agent-pick")).to_be_checked()

    page.get_by_test_id("bulk-pause").click()
    dialog = page.get_by_test_id("bulk-dialog")
    expect(dialog).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("bulk-preview")).to_have_text("3 agents match; 3 will be paused.")
    expect(page.get_by_test_id("bulk-dialog-title")).to_have_text("Pause 3 agents?")
    screenshot(page, "agents-bulk.png")  # with AGENTSVC_SCREENSHOTS=docs
    page.get_by_test_id("bulk-confirm").click()
    expect(dialog).to_be_hidden()
    for made in fleet:
        expect(row(page, made["agent_id"])).to_contain_text("paused", timeout=60_000)
        assert svc.wait_status(made["session_id"], "paused", timeout=60)["status_reason"] == "user"
    assert svc.session(bystander["session_id"])["status"] == "running"
    before = len(svc.steps(bystander["session_id"]))
    svc.wait_steps(bystander["session_id"], before + 2, timeout=60)  # the bystander goes on

    # A destroy asks first, and says the sub-agents go too; cancelled, nothing happens.
    page.get_by_test_id("bulk-destroy").click()
    expect(dialog).to_be_visible(timeout=30_000)
    expect(dialog).to_contain_text("sub-agents are destroyed too")
    page.get_by_test_id("bulk-cancel").click()
    expect(dialog).to_be_hidden()
    for made in fleet + [bystander]:
        svc.control(made["agent_id"], "destroy")


def test_focus_and_the_row_under_the_pointer_survive_live_updates(page, shared_service):
    svc, expect = shared_service, playwright_api.expect
    tag = str(ULID())[-6:].lower()
    busy = [stepping(svc, f"busy-{tag} {i}", interval=0.1) for i in range(3)]
    for made in busy:
        svc.wait_steps(made["session_id"], 1, timeout=60)
    page.goto(f"{svc.url}/#/?q=busy-{tag}")
    target = row(page, busy[1]["agent_id"])
    expect(target).to_be_visible(timeout=30_000)
    pick = target.get_by_test_id("agent-pick")
    pick.focus()
    target.evaluate("tr => { tr.dataset.marker = 'kept'; }")
    steps = target.locator("td[data-label=Steps]")
    shown = steps.inner_text()
    expect(steps).not_to_have_text(shown, timeout=30_000)  # live updates reached the row...
    later = steps.inner_text()
    expect(steps).not_to_have_text(later, timeout=30_000)
    assert page.evaluate("document.activeElement.dataset.testid") == "agent-pick"  # ...and the focus stayed
    assert target.evaluate("tr => tr.dataset.marker") == "kept"  # in the same row, updated in place
    assert target.evaluate("tr => tr.contains(document.activeElement)")

    # A new agent while the focus is in the list: counted, not slid in under it.
    order = page.get_by_test_id("agent-row").evaluate_all("rows => rows.map(r => r.dataset.agent)")
    newcomer = stepping(svc, f"busy-{tag} new", interval=0.1)
    newer = page.get_by_test_id("agents-new-activity")
    expect(newer).to_have_text("1 agent has new activity — reorder", timeout=30_000)
    assert page.get_by_test_id("agent-row").evaluate_all("rows => rows.map(r => r.dataset.agent)") == order
    newer.click()
    expect(page.get_by_test_id("agent-row").first).to_have_attribute("data-agent", newcomer["agent_id"],
                                                                         timeout=30_000)
    expect(newer).to_be_hidden()

    # "Recently active": the row under the pointer stays while every agent steps.
    with page.expect_response(lambda r: "/api/agents?" in r.url and "sort=updated" in r.url, timeout=30_000):
        page.get_by_test_id("agents-sort").select_option("updated")
    expect(newer).to_be_visible(timeout=30_000)  # drawn in its new order, and the agents stepped since
    first = page.get_by_test_id("agent-row").first
    first.hover()
    box = first.bounding_box()
    under = lambda: page.evaluate(  # noqa: E731
        "([x, y]) => document.elementFromPoint(x, y).closest('tr').dataset.agent",
        [box["x"] + 5, box["y"] + box["height"] / 2])
    pointed = under()
    steps = first.locator("td[data-label=Steps]")
    for _ in range(3):  # every agent steps several times meanwhile, each making it the most recently active
        shown = steps.inner_text()
        expect(steps).not_to_have_text(shown, timeout=30_000)
        assert under() == pointed
    expect(newer).to_contain_text("agents have new activity")
    for made in busy + [newcomer]:
        svc.control(made["agent_id"], "destroy")


def test_filters_live_in_the_address(page, shared_service):
    svc, expect = shared_service, playwright_api.expect
    tag = str(ULID())[-6:].lower()
    made = svc.create("countdown", f"count for {tag}", name=f"counter-{tag}", config={"n": 1, "interval_s": 0})
    svc.wait_status(made["session_id"], "done", timeout=60)
    count = page.get_by_test_id("agents-count")
    expect(page.get_by_test_id("agents-moniker").locator("option[value=countdown]")).to_be_attached(timeout=30_000)
    page.get_by_test_id("agents-moniker").select_option("countdown")
    expect(page).to_have_url(f"{svc.url}/#/?moniker=countdown", timeout=30_000)
    page.get_by_test_id("agents-search").fill(f"counter-{tag}")
    expect(count).to_have_text("1–1 of 1 matching", timeout=30_000)
    page.get_by_test_id("agents-sort").select_option("name")
    wait_for(lambda: "sort=name" in page.evaluate("location.hash"), timeout=90, what="the sort in the address")
    hash_ = page.evaluate("location.hash")
    assert f"q=counter-{tag}" in hash_ and "moniker=countdown" in hash_

    page.reload()  # the same list, and the controls say which
    expect(count).to_have_text("1–1 of 1 matching", timeout=30_000)
    expect(page.get_by_test_id("agents-search")).to_have_value(f"counter-{tag}")
    expect(page.get_by_test_id("agents-moniker")).to_have_value("countdown")
    expect(page.get_by_test_id("agents-sort")).to_have_value("name")
    expect(row(page, made["agent_id"])).to_be_visible()

    page.go_back()  # before the sort changed: newest first again, same search
    expect(page.get_by_test_id("agents-sort")).to_have_value("newest", timeout=30_000)
    expect(page.get_by_test_id("agents-search")).to_have_value(f"counter-{tag}")
    page.go_back()  # before the search too (typing replaced one entry, it did not add one per key)
    expect(page.get_by_test_id("agents-search")).to_have_value("", timeout=30_000)
    expect(page.get_by_test_id("agents-moniker")).to_have_value("countdown")
    page.go_forward()
    page.go_forward()
    expect(page.get_by_test_id("agents-sort")).to_have_value("name", timeout=30_000)
    expect(count).to_have_text("1–1 of 1 matching", timeout=30_000)


@pytest.mark.parametrize("width", [1400, 400])
def test_the_agents_page_is_accessible(browser, shared_service, width):
    svc, expect = shared_service, playwright_api.expect
    made = svc.create("countdown", "a11y", name="a11y", config={"n": 1, "interval_s": 0})
    svc.wait_status(made["session_id"], "done", timeout=60)
    context = browser.new_context(viewport={"width": width, "height": 900})
    pg = context.new_page()
    try:
        pg.goto(svc.url + "/#/?q=a11y")
        expect(pg.get_by_test_id("agent-row").first).to_be_visible(timeout=30_000)
        pg.get_by_test_id("agent-row").first.get_by_test_id("agent-pick").check()
        assert not (found := scan(pg)), found
        assert pg.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
        pg.get_by_test_id("bulk-interrupt").click()  # the dialog too (nothing to interrupt: it is done)
        expect(pg.get_by_test_id("bulk-dialog-title")).to_have_text("Nothing to interrupt", timeout=30_000)
        expect(pg.get_by_test_id("bulk-confirm")).to_be_disabled()
        assert not (found := scan(pg)), found
        pg.get_by_test_id("bulk-cancel").click()
    finally:
        context.close()
