"""The dashboard in a real browser: Debian's chromium driven by playwright,
against the real service.  Everything the page does goes through the UI: the
forms, the buttons, and live events arriving over Socket.IO."""
import os
import re
import time

import pytest

from tests.browsing import screenshot
from tests.harness import wait_for

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")


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
    page.get_by_test_id("run-interval_s").fill("0.2")
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

    # The timeline keeps the control actions, between the steps, with their outcome.
    actions = page.get_by_test_id("action")
    expect(actions.filter(has_text="Pause")).to_contain_text("applied", timeout=30_000)
    expect(actions.filter(has_text="Resume")).to_contain_text("applied", timeout=30_000)

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
    page.get_by_test_id("run-interval_s").fill("-1")  # the API refuses a negative interval
    page.get_by_test_id("run-interval_s").evaluate("e => e.removeAttribute('min')")
    page.get_by_test_id("create-submit").click()
    expect(page.get_by_test_id("create-error")).to_contain_text("interval_s", timeout=30_000)


# ---- a dashboard people can run real work on ------------------------------

@pytest.fixture(scope="module")
def store(shared_service):
    """The service's own database, opened here to seed many rows in one commit
    (300 agents, 3,000 steps) instead of running them."""
    from store import Store
    st = Store(os.path.join(shared_service.data_dir, "lancedb"))
    yield st
    st.close()


def seed_agents(store, n: int, failed_every: int = 30) -> list[dict]:
    """``n`` finished agents (done, or error every ``failed_every``), created one
    millisecond apart; finished so agents.py leaves them alone."""
    from datetime import datetime, timedelta, timezone
    from ulid import ULID
    start = datetime.now(timezone.utc) - timedelta(hours=1)
    rows = []
    for i in range(n):
        failed = i % failed_every == 0
        at = start + timedelta(milliseconds=i)
        rows.append({"session_id": str(ULID()), "agent_id": str(ULID()), "moniker": "countdown",
                     "name": f"seeded {i:03d}", "task": f"seeded agent number {i}", "config": {},
                     "status": "error" if failed else "done",
                     "status_reason": "step_failed:error" if failed else "done", "iteration": 2,
                     "last_error": "RuntimeError: seeded failure\ntraceback here" if failed else None,
                     "result": {"text": f"output of {i}"}, "created_at": at, "updated_at": at,
                     "status_changed_at": at})
    store.writer.submit_upsert("agent_state", "session_id", rows).result()
    return rows


def seed_session_with_steps(store, n: int) -> dict:
    from datetime import datetime, timedelta, timezone
    from ulid import ULID
    agent_id, session_id = str(ULID()), str(ULID())
    start = datetime.now(timezone.utc) - timedelta(hours=2)
    steps = [{"id": str(ULID()), "created_at": start + timedelta(milliseconds=10 * i), "agent_id": agent_id,
              "session_id": session_id, "iteration": i, "step_token": str(i), "next_step_token": str(i + 1),
              "status": "ok", "text": f"line {i + 1} of a long story", "state": {"n": i + 1}, "attempts": 1}
             for i in range(n)]
    store.writer.submit_append("agent_steps", steps).result()
    at = start + timedelta(milliseconds=10 * n)
    snapshot = {"session_id": session_id, "agent_id": agent_id, "moniker": "joke", "name": "long story",
                "task": "a long story", "config": {}, "status": "done", "status_reason": "max_steps",
                "iteration": n - 1, "state": {"n": n}, "created_at": start, "updated_at": at,
                "status_changed_at": at}
    store.writer.submit_upsert("agent_state", "session_id", [snapshot]).result()
    return snapshot


def test_schema_driven_form_runs_countdown_n5_and_refuses_a_bad_key(page, shared_service):
    expect = playwright_api.expect
    expect(page.locator("#create-moniker option")).not_to_have_count(0, timeout=30_000)
    page.get_by_test_id("create-moniker").select_option("countdown")
    page.get_by_test_id("cfg-n").fill("5")  # a field drawn from countdown's config schema
    page.get_by_test_id("run-interval_s").fill("0.05")  # any step, not just tenths
    page.get_by_test_id("create-name").fill("five steps")
    page.get_by_test_id("create-submit").click()
    expect(page.get_by_test_id("session-status")).to_have_text("done", timeout=30_000)
    expect(page.get_by_test_id("step")).to_have_count(5, timeout=30_000)
    expect(page.get_by_test_id("session-iteration")).to_have_text("5")
    expect(page.locator("#s-title")).to_contain_text("five steps")
    session_id = page.evaluate("location.hash").split("/")[-1]
    assert len(shared_service.steps(session_id)) == 5

    # A misspelt key in the JSON box is refused by the API, which names it.
    page.get_by_test_id("nav-agents").click()
    expect(page.locator("#create-moniker option")).not_to_have_count(0, timeout=30_000)
    page.get_by_test_id("create-moniker").select_option("countdown")
    page.get_by_test_id("create-json").fill('{"intervl_s": 1}')
    page.get_by_test_id("create-submit").click()
    expect(page.get_by_test_id("create-error")).to_contain_text("intervl_s", timeout=30_000)
    expect(page.get_by_test_id("create-error")).to_contain_text("unknown key")
    assert page.evaluate("location.hash") in ("#/", "")  # still on the form


def test_baml_usage_cost_and_raising_a_budget_from_the_page(page, shared_service):
    from tests.fake_openai import FakeOpenAI, Reply, scripted
    expect = playwright_api.expect
    content = '{"step": "0", "next_step": "1", "state": {"n": 1}, "text": "thinking", "data": null, "done": false}'
    server = FakeOpenAI(scripted(then=Reply(content=content, prompt_tokens=60, completion_tokens=40))).start()
    try:
        made = shared_service.create("baml", "think", name="thinker", config={
            "interval_s": 0, "budget_tokens": 250, "repeat_limit": 100,  # the fake says "thinking" every step
            "llm": shared_service.endpoints.llm(server, prices={"input_per_1k": 0.01, "output_per_1k": 0.03})})
        shared_service.wait_status(made["session_id"], "paused", timeout=60)
        page.goto(f"{shared_service.url}/#/session/{made['session_id']}")
        notice = page.get_by_test_id("session-notice")
        expect(notice).to_contain_text("budget is reached", timeout=30_000)
        expect(page.get_by_test_id("usage-input")).to_have_text("120")  # two steps of 60 in
        expect(page.get_by_test_id("usage-output")).to_have_text("80")
        expect(page.get_by_test_id("usage-cost")).to_have_text("$0.0036")
        expect(page.get_by_test_id("step")).to_have_count(2)
        screenshot(page, "session-budget.png")

        page.get_by_test_id("raise-tokens").fill("450")
        # The notice is drawn again on every update of the session (here: someone
        # steers it while it waits); what was typed must survive that.
        page.get_by_test_id("raise-tokens").evaluate("el => el.dataset.drawn = 'before'")
        shared_service.control(made["agent_id"], "interrupt", guidance="mind the budget")
        expect(page.locator("#raise-tokens:not([data-drawn])")).to_have_count(1, timeout=30_000)
        expect(page.get_by_test_id("raise-tokens")).to_have_value("450")
        page.get_by_test_id("raise-budget").click()
        # 200 used; a budget of 450 lets two more steps run, then it pauses again.
        expect(page.get_by_test_id("step")).to_have_count(4, timeout=60_000)
        expect(page.get_by_test_id("action").filter(has_text="budget raised to 450 tokens")).to_contain_text(
            "applied", timeout=30_000)
        expect(page.get_by_test_id("usage-input")).to_have_text("240", timeout=30_000)
        assert shared_service.wait_status(made["session_id"], "paused", timeout=60)["config"]["budget_tokens"] == 450
    finally:
        server.stop()


def test_300_agents_paging_count_and_status_filter(page, shared_service, store):
    expect = playwright_api.expect
    seed_agents(store, 300)  # 10 of them failed
    page.reload()
    total = shared_service.get("/api/agents", limit=1).json()["total"]
    assert total >= 300
    count = page.get_by_test_id("agents-count")
    expect(count).to_have_text(f"1–50 of {total}", timeout=30_000)
    expect(page.get_by_test_id("agent-row")).to_have_count(50)
    page.get_by_test_id("page-next").click()
    expect(count).to_have_text(f"51–100 of {total}")
    first_of_page_2 = page.get_by_test_id("agent-row").first.get_attribute("data-agent")
    api_page_2 = shared_service.get("/api/agents", limit=50, offset=50).json()["agents"]
    assert first_of_page_2 == api_page_2[0]["agent_id"]  # the page shows the server's stable order

    failed_chip = page.get_by_test_id("chip-error")
    expect(failed_chip).to_contain_text("10")
    failed_chip.click()
    expect(count).to_have_text("1–10 of 10 matching")
    rows = page.get_by_test_id("agent-row")
    expect(rows).to_have_count(10)
    for i in range(10):
        expect(rows.nth(i)).to_contain_text("failed")
        expect(rows.nth(i)).to_contain_text("seeded failure")  # the error, not an old output
    screenshot(page, "agents-failed.png")

    page.get_by_test_id("chip-all").click()
    page.get_by_test_id("agents-search").fill("seeded 123")
    expect(count).to_have_text("1–1 of 1 matching", timeout=30_000)


def test_keyboard_only_opens_an_agent(page, shared_service):
    expect = playwright_api.expect
    expect(page.get_by_test_id("agent-row").first).to_be_visible(timeout=30_000)
    for _ in range(60):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('agent-link')"):
            break
    else:
        raise AssertionError("no agent link is reachable with Tab")
    page.keyboard.press("Enter")
    expect(page.locator("#s-title")).not_to_be_empty(timeout=30_000)
    assert "#/session/" in page.url


def test_3000_step_timeline_pages_on_scroll_each_page_once(page, shared_service, store):
    expect = playwright_api.expect
    snapshot = seed_session_with_steps(store, 3000)
    step_reads = []
    page.on("request", lambda r: "/api/agent-steps" in r.url and step_reads.append(r.url))
    started = time.perf_counter()
    page.goto(f"{shared_service.url}/#/session/{snapshot['session_id']}")
    newest = page.locator("[data-testid=step][data-iteration='2999']")
    expect(newest).to_be_visible(timeout=30_000)
    first_paint = time.perf_counter() - started
    print(f"\n3,000-step timeline: first paint (newest step visible) after {first_paint:.3f}s")
    assert page.get_by_test_id("step").first.get_attribute("data-iteration") == "2999"  # newest first
    assert page.get_by_test_id("step").count() < 200  # one page, not 3,000 rows

    # Scrolling down reads older pages, each once.
    for expected in (150, 250):
        page.get_by_test_id("step").last.scroll_into_view_if_needed()
        expect(page.get_by_test_id("step")).to_have_count(expected, timeout=30_000)
    cursors = [u for u in step_reads if "max_iteration" in u]
    assert len(cursors) == len(set(cursors)), f"a page was read twice: {cursors}"
    iterations = page.eval_on_selector_all("[data-testid=step]", "ns => ns.map(n => +n.dataset.iteration)")
    assert iterations == list(range(2999, 2999 - len(iterations), -1))  # no gap, no duplicate


def test_a_catch_up_answered_late_does_not_redraw_the_timeline_under_the_reader(page, shared_service, store):
    """The page catches up on every (re)connect, view change and gap in the live
    events, so two reads of the newest steps can be in flight at once.  When the
    earlier one was answered last, the timeline took it for "a page of new steps",
    redrew itself from the newest and dropped the older pages read meanwhile (CI
    saw it as a step detached under a scroll).  Here the first read is held until
    a second catch-up has drawn the newest page and an older one has been read."""
    expect = playwright_api.expect
    snapshot = seed_session_with_steps(store, 300)
    held = []

    def hold_the_first_read_of_the_newest(route):
        if not held and "max_iteration" not in route.request.url:
            held.append(route)
        else:
            route.continue_()

    page.route("**/api/agent-steps?*", hold_the_first_read_of_the_newest)
    page.goto(f"{shared_service.url}/#/session/{snapshot['session_id']}")
    deadline = time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    assert held, "the session page never read its newest steps"
    # A second catch-up of the same view: following a link to one of its steps.
    page.evaluate("location.hash += '?iteration=299'")
    # The link is followed once it is marked: its reveal scrolls to step 299, and a
    # scroll of ours made before that would be undone within the same frame.
    linked = page.locator("[data-testid=step][data-iteration='299']")
    expect(linked).to_have_class(re.compile(r"\blinked\b"), timeout=30_000)
    page.get_by_test_id("step").last.scroll_into_view_if_needed()
    expect(page.get_by_test_id("step")).to_have_count(150, timeout=30_000)
    page.evaluate("""() => {
      window.removedSteps = 0;
      new MutationObserver((changes) => changes.forEach((c) => c.removedNodes.forEach((n) => {
        if (n.dataset && n.dataset.testid === "step") window.removedSteps += 1;
      }))).observe(document.querySelector("[data-testid=steps]"), { childList: true });
    }""")
    with page.expect_response(lambda r: r.request.url == held[0].request.url):
        held[0].continue_()
    page.evaluate("() => new Promise((done) => setTimeout(done, 1000))")  # the answer is handled
    assert page.evaluate("window.removedSteps") == 0
    iterations = page.eval_on_selector_all("[data-testid=step]", "ns => ns.map(n => +n.dataset.iteration)")
    assert iterations == list(range(299, 149, -1))


def test_follow_mode_shows_the_newest_step_and_jumps_to_latest(page, shared_service):
    expect = playwright_api.expect
    made = shared_service.create("joke", "tell jokes about owls", config={"interval_s": 0.3})
    shared_service.wait_steps(made["session_id"], 3, timeout=60)
    page.goto(f"{shared_service.url}/#/session/{made['session_id']}")
    expect(page.get_by_test_id("step").first).to_be_visible(timeout=30_000)
    # While live, the newest step is the first one, in view.  (Steps keep coming, 3 a second:
    # the one that was newest when asked is soon pushed down and out of view, so the first
    # step is judged, once it is at least as new as the record was.)
    later = len(shared_service.wait_steps(made["session_id"], 6, timeout=90))
    first = page.get_by_test_id("step").first
    wait_for(lambda: int(first.get_attribute("data-iteration") or -1) >= later - 1, timeout=90,
             what=f"the page's first step to reach iteration {later - 1}")
    expect(first).to_be_in_viewport(timeout=30_000)
    # Scrolled away, new steps are counted on a "jump to latest" button.
    page.evaluate("document.querySelector('[data-testid=steps]').style.paddingBottom = '3000px'")
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    jump = page.get_by_test_id("jump-latest")
    expect(jump).to_be_visible(timeout=30_000)
    expect(jump).to_contain_text("jump to latest")
    shared_service.control(made["agent_id"], "pause")
    count = shared_service.settled_step_count(made["session_id"])
    jump.click()
    newest = page.locator(f"[data-testid=step][data-iteration='{count - 1}']")
    expect(newest).to_be_in_viewport(timeout=30_000)
    screenshot(page, "session.png")


def test_destroy_asks_for_confirmation_and_disables_what_cannot_apply(page, shared_service):
    expect = playwright_api.expect
    made = shared_service.create("echo", "listen", config={"interval_s": 0.5})
    page.goto(f"{shared_service.url}/#/session/{made['session_id']}")
    expect(page.get_by_test_id("session-status")).to_have_text("running", timeout=30_000)
    page.get_by_test_id("btn-destroy").click()
    dialog = page.get_by_test_id("destroy-dialog")
    expect(dialog).to_be_visible()
    page.get_by_test_id("destroy-cancel").click()
    expect(dialog).to_be_hidden()
    assert shared_service.session(made["session_id"])["status"] == "running"
    page.get_by_test_id("btn-destroy").click()
    page.get_by_test_id("destroy-confirm").click()
    expect(page.get_by_test_id("session-status")).to_have_text("stopped", timeout=30_000)
    # After destroy: no guidance, no pause, no second destroy; the page says why.
    expect(page.get_by_test_id("interrupt-text")).to_be_disabled()
    expect(page.get_by_test_id("btn-pause")).to_be_disabled()
    expect(page.get_by_test_id("btn-destroy")).to_be_disabled()
    expect(page.get_by_test_id("controls-why")).to_contain_text("it has finished")
    expect(page.get_by_test_id("action").filter(has_text="Destroy")).to_contain_text("applied", timeout=30_000)


def test_a_bad_session_url_shows_no_other_session(page, shared_service):
    expect = playwright_api.expect
    made = shared_service.create("countdown", config={"n": 1, "interval_s": 0})
    page.goto(f"{shared_service.url}/#/session/{made['session_id']}")
    expect(page.get_by_test_id("session-status")).to_have_text("done", timeout=30_000)
    page.evaluate("location.hash = '#/session/no-such-session'")
    expect(page.get_by_test_id("session-missing")).to_contain_text("There is no session no-such-session",
                                                                    timeout=30_000)
    expect(page.get_by_test_id("session-status")).to_be_hidden()


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
    expect(calls.nth(0)).to_contain_text("waits for your approval")
    expect(calls.nth(0).get_by_test_id("tool-approval-args")).to_be_visible()  # what is approved, unfolded
    expect(calls.nth(0).get_by_test_id("tool-approval-args")).to_contain_text('"numbers"')
    expect(calls.nth(1)).to_contain_text("waits for a result")
    resume = page.locator("[data-verb=resume]")
    expect(resume).to_be_disabled()  # waiting is not paused: Resume would do nothing
    expect(resume).to_have_attribute("title", re.compile("waits for"))

    calls.nth(0).get_by_test_id("tool-approve").click()
    expect(calls.nth(0)).to_contain_text("succeeded", timeout=30_000)
    calls.nth(0).locator("summary").click()
    expect(calls.nth(0).locator(".tool-json").nth(1)).to_contain_text('"sum": 5')

    calls.nth(1).locator("textarea").fill('{"colour": "blue"}')
    calls.nth(1).get_by_test_id("tool-post-result").click()
    expect(calls.nth(1)).to_contain_text("succeeded", timeout=30_000)
    expect(page.locator("[data-testid=step][data-iteration='1']")).to_contain_text("thanks", timeout=30_000)
    expect(page.get_by_test_id("session-status")).to_have_text("done", timeout=30_000)
    step1 = shared_service.steps(made["session_id"])[1]
    assert [r["result"] for r in step1["inputs"]["tool_results"]] == [{"sum": 5}, {"colour": "blue"}]


def test_a_new_session_page_logs_no_404(page, shared_service):
    """The newest-first step read of a session not started yet (no state row) is an empty list, not a 404."""
    svc = shared_service
    assert svc.get("/api/agent-steps", session_id="01M8CBSA35C780522SPF79FFRR", order="desc").json()["steps"] == []
    bad = []
    page.on("response", lambda r: r.status >= 400 and bad.append((r.status, r.url)))
    made = svc.create("countdown", task="x", config={"interval_s": 0, "n": 2})
    page.goto(f"{svc.url}/#/session/{made['session_id']}")
    playwright_api.expect(page.get_by_test_id("session-status")).to_have_text("done", timeout=30_000)
    assert not bad, bad
