"""The dashboard in a real browser: Debian's chromium driven by playwright,
against the real service.  Everything the page does goes through the UI: the
forms, the buttons, and live events arriving over Socket.IO."""
import os
import time

import pytest

from tests.harness import ROOT

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: scripts/test.sh installs it (apt-get install chromium)")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, shared_service):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    other_hosts = []
    pg.on("request", lambda r: r.url.startswith(shared_service.url) or other_hosts.append(r.url))
    errors = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("response", lambda r: r.status >= 500 or (r.status == 404 and "/api/" not in r.url)
          and errors.append(f"{r.status} {r.url}"))
    pg.goto(shared_service.url + "/")
    yield pg
    context.close()
    assert not other_hosts, f"the dashboard fetched from other hosts: {other_hosts}"
    assert not errors, f"JavaScript errors or missing assets: {errors}"


def step_count(pg) -> int:
    return pg.locator("[data-testid=step]").count()


def test_create_watch_pause_and_talk_to_an_agent(page, shared_service):
    expect = playwright_api.expect
    expect(page.get_by_test_id("live-indicator")).to_have_text("live")
    expect(page.get_by_text("No agents yet")).to_be_visible()  # the module's service starts empty

    # A conversation, made through its form.
    page.get_by_test_id("nav-conversations").click()
    page.get_by_test_id("conversation-title").fill("browser chat")
    page.get_by_test_id("conversation-submit").click()
    expect(page.locator("#c-title")).to_have_text("browser chat")
    conversation_id = page.evaluate("location.hash").split("/")[-1]

    # An echo agent in it, started through the create form.
    page.get_by_test_id("nav-agents").click()
    page.get_by_test_id("create-moniker").select_option("echo")
    page.get_by_test_id("create-task").fill("repeat what you hear")
    page.get_by_test_id("create-conversation").select_option(conversation_id)
    page.get_by_test_id("create-interval").fill("0.2")
    page.get_by_test_id("create-submit").click()

    # The session view: steps appear live (no reload, no polling in the page).
    expect(page.get_by_test_id("session-status")).to_have_text("running", timeout=30_000)
    expect(page.locator("[data-testid=step]").nth(3)).to_be_attached(timeout=30_000)
    session_id = page.evaluate("location.hash").split("/")[-1]

    page.get_by_test_id("btn-pause").click()
    expect(page.get_by_test_id("session-status")).to_have_text("paused", timeout=30_000)
    paused_at = shared_service.settled_step_count(session_id)  # a step in flight may still land
    expect(page.locator("[data-testid=step]")).to_have_count(paused_at, timeout=30_000)
    time.sleep(1.5)
    assert step_count(page) == paused_at, "steps kept appearing while paused"
    assert len(shared_service.steps(session_id)) == paused_at

    # Post to the conversation while the agent is paused; resume; its next step echoes the message.
    page.get_by_role("link", name=conversation_id[-8:]).click()
    page.get_by_test_id("post-text").fill("hello from the browser")
    page.get_by_test_id("post-submit").click()
    expect(page.locator("[data-testid=message].user", has_text="hello from the browser")).to_be_visible()
    page.go_back()
    expect(page.get_by_test_id("session-status")).to_have_text("paused")
    page.get_by_test_id("btn-resume").click()
    expect(page.get_by_test_id("session-status")).to_have_text("running", timeout=30_000)
    steered = page.locator(f"[data-testid=step][data-iteration='{paused_at}']")
    expect(steered).to_contain_text("hello from the browser", timeout=30_000)
    expect(steered.locator(".guidance")).to_contain_text("message from user")

    # And the conversation shows the agent's reply live.
    page.goto(f"{shared_service.url}/#/conversation/{conversation_id}")
    expect(page.locator("[data-testid=message].agent", has_text="hello from the browser")).to_be_visible(
        timeout=30_000)
    shared_service.control(shared_service.session(session_id)["agent_id"], "destroy")


def test_errors_are_shown(page, shared_service):
    expect = playwright_api.expect
    # Wait for the form to be ready (its monikers loaded), as a person would.
    expect(page.get_by_test_id("live-indicator")).to_have_text("live", timeout=30_000)
    expect(page.locator("#create-moniker option")).not_to_have_count(0, timeout=30_000)
    page.get_by_test_id("create-interval").fill("-1")  # the API refuses a negative interval
    page.get_by_test_id("create-interval").evaluate("e => e.removeAttribute('min')")
    page.get_by_test_id("create-submit").click()
    expect(page.get_by_test_id("create-error")).to_contain_text("interval_s", timeout=30_000)


def test_tool_calls_in_the_timeline_approve_and_post_a_result(page, shared_service):
    """A step's tool calls show inside it, live: Approve runs a waiting call, the
    result box answers an external one, and the next step follows."""
    expect = playwright_api.expect
    made = shared_service.create("scripted", config={"interval_s": 0, "tools": ["add", "human"], "approve": ["add"],
                                                     "frames": [{"text": "asking", "tool_calls": [
                                                         {"name": "add", "args": {"numbers": [2, 3]}},
                                                         {"name": "human", "args": {"question": "colour?"}}]},
                                                         {"text": "thanks", "done": True}]})
    page.goto(f"{shared_service.url}/#/session/{made['session_id']}")
    calls = page.locator("[data-testid=step][data-iteration='0'] [data-testid=tool-call]")
    expect(calls).to_have_count(2, timeout=30_000)
    expect(page.get_by_test_id("session-status")).to_have_text("waiting", timeout=30_000)
    expect(calls.nth(0)).to_contain_text("waiting_approval")
    expect(calls.nth(1)).to_contain_text("waiting_result")

    calls.nth(0).get_by_test_id("tool-approve").click()
    expect(calls.nth(0)).to_contain_text("success", timeout=30_000)
    calls.nth(0).locator("summary").click()
    expect(calls.nth(0).locator(".tool-json").nth(1)).to_contain_text('"sum": 5')

    calls.nth(1).locator("textarea").fill('{"colour": "blue"}')
    calls.nth(1).get_by_test_id("tool-post-result").click()
    expect(calls.nth(1)).to_contain_text("success", timeout=30_000)
    expect(page.locator("[data-testid=step][data-iteration='1']")).to_contain_text("thanks", timeout=30_000)
    expect(page.get_by_test_id("session-status")).to_have_text("done", timeout=30_000)
    step1 = shared_service.steps(made["session_id"])[1]
    assert [r["result"] for r in step1["inputs"]["tool_results"]] == [{"sum": 5}, {"colour": "blue"}]
