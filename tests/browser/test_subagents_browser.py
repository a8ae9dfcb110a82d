"""The sub-agent tree on the session page, in a real browser (Debian's chromium
driven by playwright) against the real service: statuses update without a
reload and without polling (from live events), links go down to a child and
back up to its parent."""
import time

import pytest

from tests.browsing import scan
from tests.harness import wait_for
from tests.subagent_api import parent, spawned_ids, tool_rows, working

playwright_api = pytest.importorskip("playwright.sync_api")


def tree_reads(page) -> list[float]:
    """When the page read a session's sub-agents (GET .../children), from now on."""
    reads = []
    page.on("request", lambda r: "/children" in r.url and reads.append(time.monotonic()))
    return reads


def quiet_then_count(page, reads, quiet_s: float = 2.0, window_s: float = 6.0, timeout: float = 60.0) -> int:
    """Wait until the page has not read the tree for ``quiet_s`` (the reads of a
    load and of rooms just joined are over), then count its reads in the next
    ``window_s`` while nothing in the tree changes status: polling shows up here."""
    deadline = time.monotonic() + timeout
    while time.monotonic() - max(reads, default=0) < quiet_s:
        assert time.monotonic() < deadline, "the page never stopped reading the tree"
        page.wait_for_timeout(100)
    before = len(reads)
    page.wait_for_timeout(window_s * 1000)
    return len(reads) - before


def test_the_session_page_shows_the_tree_live_with_links_both_ways(page, shared_service):
    svc, expect = shared_service, playwright_api.expect
    made = parent(svc, [{"text": "spawning", "tool_calls": [
        {"name": "spawn_agent", "args": {"task": "quick", "moniker": "scripted", "name": "quick one",
                                         "config": {"interval_s": 0, "frames": [{"text": "quick answer", "done": True}]}}},
        {"name": "spawn_agent", "args": {"task": "slow", "moniker": "scripted", "name": "slow one",
                                         "config": {"interval_s": 0.2, "frames": working(400)}}}]}]
        + working(400), interval_s=0.2)
    root = made["session_id"]
    quick, slow = spawned_ids(svc, root, 2)
    svc.wait_status(quick, "done", timeout=60)
    svc.wait_steps(slow, 1, timeout=60)

    reads = tree_reads(page)
    page.goto(f"{svc.url}/#/session/{root}")
    tree = page.get_by_test_id("session-tree")
    expect(tree).to_be_visible(timeout=90_000)
    expect(tree.locator(f"[data-session='{root}'] [aria-current=page]")).to_be_visible()
    expect(tree.locator(f"[data-session='{quick}']")).to_have_attribute("data-status", "done")
    expect(tree.locator(f"[data-session='{quick}']")).to_contain_text("quick answer")
    slow_node = tree.locator(f"[data-session='{slow}']")
    expect(slow_node).to_have_attribute("data-status", "running")
    # The parent and the slow child keep stepping (running, running): nothing to read again.
    assert quiet_then_count(page, reads) == 0, "the tree is polled"

    r = svc.post(f"/api/agents/{svc.session(slow)['agent_id']}/destroy", json={})
    assert r.status_code == 202
    expect(slow_node).to_have_attribute("data-status", "stopped", timeout=90_000)  # live, no reload

    tree.locator(f"[data-session='{quick}'] >> a[data-testid=tree-link]").first.click()
    expect(page.get_by_test_id("session-status")).to_have_text("done", timeout=90_000)
    assert page.evaluate("location.hash") == f"#/session/{quick}"
    up = page.get_by_test_id("tree-parent-link")
    expect(up).to_be_visible(timeout=90_000)
    expect(tree.locator(f"[data-session='{quick}'] [aria-current=page]")).to_be_visible()
    found = scan(page)
    assert not found, f"axe-core: {found}"
    up.click()
    expect(page.get_by_test_id("session-status")).to_have_text("running", timeout=90_000)
    assert page.evaluate("location.hash") == f"#/session/{root}"
    svc.control(made["agent_id"], "destroy")


def test_a_parent_page_open_before_the_spawn_shows_the_panel_and_the_list_names_the_parent(page, shared_service):
    svc, expect = shared_service, playwright_api.expect
    frames = working(6) + [{"text": "spawning", "tool_calls": [
        {"name": "spawn_agent", "args": {"task": "later", "moniker": "scripted", "name": "late child",
                                         "config": {"interval_s": 0.2, "frames": working(400)}}}]}] + working(400)
    made = svc.create("scripted", task="delegate", name="live parent", config={
        "interval_s": 1, "tools": ["spawn_agent", "message_agent", "wait"], "frames": frames})
    root = made["session_id"]
    reads = tree_reads(page)
    page.goto(f"{svc.url}/#/session/{root}")
    expect(page.get_by_test_id("session-status")).to_be_visible(timeout=90_000)
    assert not [r for r in tool_rows(svc, root) if r["name"] == "spawn_agent"], "opened after the spawn"
    (child,) = spawned_ids(svc, root, 1)
    tree = page.get_by_test_id("session-tree")
    expect(tree.locator(f"[data-session='{child}']")).to_be_visible(timeout=90_000)  # no reload, no poll
    expect(tree.locator(f"[data-session='{child}']")).to_have_attribute("data-status", "running", timeout=90_000)
    assert quiet_then_count(page, reads) == 0, "the tree is polled"

    # Destroy says the running child goes too, and the panel shows it go (the cascade, live).
    page.get_by_test_id("btn-destroy").click()
    expect(page.get_by_test_id("destroy-children")).to_have_text(
        'Its unfinished sub-agent goes too: each is destroyed after it (except one started with '
        'on_parent_destroy "abandon").', timeout=90_000)
    page.get_by_test_id("destroy-confirm").click()
    expect(tree.locator(f"[data-session='{child}']")).to_have_attribute("data-status", "stopped", timeout=90_000)
    expect(page.get_by_test_id("session-status")).to_have_text("stopped", timeout=90_000)

    page.goto(f"{svc.url}/#/agents")
    link = page.locator(f"[data-testid=agent-row][data-agent='{svc.session(child)['agent_id']}'] "
                        "[data-testid=agent-parent-link]")
    expect(link).to_have_text("live parent", timeout=90_000)
    assert link.get_attribute("href") == f"#/session/{root}"


def test_a_child_whose_create_lands_after_the_pages_read_still_shows_up_without_a_reload(page, shared_service):
    """A spawn_agent call ends when its child's create is queued, and the
    create may land after the read the call's events start (under load it
    did, and the panel stayed hidden for good: the child's own events go only
    to its room).  Here the page's first read that would show the child is
    answered without it, as a read served before the create would be; the
    page must then learn of the child by itself, with no reload."""
    svc, expect = shared_service, playwright_api.expect
    frames = working(8) + [{"text": "spawning", "tool_calls": [
        {"name": "spawn_agent", "args": {"task": "later", "moniker": "scripted", "name": "late child",
                                         "config": {"interval_s": 0.2, "frames": working(400)}}}]}] + working(400)
    made = svc.create("scripted", task="delegate", name="slow create", config={
        "interval_s": 1, "tools": ["spawn_agent", "wait"], "frames": frames})
    root = made["session_id"]
    hidden, until = [], []  # the reads answered as if the child's create had not landed; when that ends

    def before_the_create(route):
        response = route.fetch()
        body = response.json()
        if body.get("children") and (not until or time.monotonic() < until[0]):
            hidden.append(route.request.url)
            body = dict(body, children=[])
        route.fulfill(response=response, json=body)

    page.route("**/api/sessions/*/children*", before_the_create)
    page.goto(f"{svc.url}/#/session/{root}")
    expect(page.get_by_test_id("session-status")).to_be_visible(timeout=90_000)
    assert not [r for r in tool_rows(svc, root) if r["name"] == "spawn_agent"], "opened after the spawn"
    (child,) = spawned_ids(svc, root, 1)
    # Every read the spawn call's events start (debounced, 2 s at most after the last) is answered without the child.
    until.append(time.monotonic() + 5)
    tree = page.get_by_test_id("session-tree")
    expect(tree.locator(f"[data-session='{child}']")).to_be_visible(timeout=90_000)
    assert hidden, "no read of the tree came between the spawn and the panel showing the child"
    page.unroute_all(behavior="ignoreErrors")
    svc.control(made["agent_id"], "destroy")


def test_pause_guidance_and_resume_reach_the_whole_tree_when_the_box_is_ticked(page, shared_service):
    """Issue 40, item 1: the session page's Pause acted on one session and left
    its sub-agents running.  A box (shown only with sessions at work below, and
    saying how many) sends pause, guidance and resume to the whole tree."""
    svc, expect = shared_service, playwright_api.expect
    grandchild = {"name": "spawn_agent", "args": {"task": "below", "moniker": "scripted", "name": "grandchild",
                                                  "config": {"interval_s": 0.2, "frames": working(400)}}}
    made = parent(svc, [{"text": "spawning", "tool_calls": [
        {"name": "spawn_agent", "args": {"task": "middle", "moniker": "scripted", "name": "middle", "config": {
            "interval_s": 0.2, "tools": ["spawn_agent"], "frames": [{"text": "spawning below", "tool_calls": [
                grandchild]}] + working(400)}}}]}] + working(400), interval_s=0.2)
    root = made["session_id"]
    (middle,) = spawned_ids(svc, root)
    (grand,) = spawned_ids(svc, middle)
    svc.wait_steps(grand, 1, timeout=60)

    page.goto(f"{svc.url}/#/session/{root}")
    scope = page.get_by_test_id("tree-scope")
    expect(scope).to_be_visible(timeout=90_000)
    expect(page.get_by_test_id("tree-scope-label")).to_contain_text("its 2 unfinished sub-agents")
    scope.check()
    page.get_by_test_id("btn-pause").click()
    for sid in (root, middle, grand):
        svc.wait_status(sid, "paused", timeout=90)
    page.get_by_test_id("interrupt-text").fill("everyone: write it down")
    page.get_by_test_id("btn-interrupt").click()
    for sid in (root, middle, grand):
        wait_for(lambda: any(g["text"] == "everyone: write it down"
                             for g in svc.session(sid).get("pending_guidance") or []),
                 timeout=90, what=f"the guidance at {sid}")
    expect(page.get_by_test_id("btn-resume")).to_be_enabled(timeout=90_000)
    page.get_by_test_id("btn-resume").click()
    for sid in (root, middle, grand):
        svc.wait_status(sid, "running", timeout=90)

    # Unticked, Pause is this session's alone (as before), and a leaf offers no box.
    scope.uncheck()
    page.get_by_test_id("btn-pause").click()
    svc.wait_status(root, "paused", timeout=90)
    assert {svc.session(sid)["status"] for sid in (middle, grand)} == {"running"}
    page.goto(f"{svc.url}/#/session/{grand}")
    expect(page.get_by_test_id("session-status")).to_have_text("running", timeout=90_000)
    expect(page.get_by_test_id("session-tree")).to_be_visible(timeout=90_000)
    expect(scope).to_be_hidden()
    found = scan(page)
    assert not found, f"axe-core: {found}"
    svc.control(made["agent_id"], "destroy")
