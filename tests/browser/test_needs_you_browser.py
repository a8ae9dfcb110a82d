"""The "Needs you" page in a real browser (Debian's chromium driven by
playwright) against the real service: open questions and approvals are listed
oldest first, answered and approved in place, the list and the nav count follow
live, and the page passes axe-core and fits at 400 px."""
import pytest

from tests.harness import wait_for

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")
from tests.browsing import scan, screenshot  # noqa: E402


def asking(svc, args: dict, **fields) -> dict:
    return svc.create("scripted", config={"interval_s": 0, "tools": ["ask_user"], "frames": [
        {"tool_calls": [{"id": "ask", "name": "ask_user", "args": args}]}, {"text": "thanks", "done": True}]},
        **fields)


def only_call(svc, session_id: str, status: str) -> dict:
    return wait_for(lambda: [c for c in svc.get("/api/tool-calls", session_id=session_id).json()["tool_calls"]
                             if c["status"] == status], what=f"a {status} call of {session_id}")[0]


def needs_you_page(browser, svc):
    """A fresh browser context on Needs you, and the page errors it records."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.goto(svc.url + "/#/needs-you")
    return context, pg, errors


def total(svc) -> int:
    return svc.get("/api/waiting", limit=1).json()["total"]


def test_questions_and_approvals_are_answered_in_place(browser, shared_service):
    svc = shared_service
    expect = playwright_api.expect
    city = asking(svc, {"question": "Which city?", "choices": ["Paris", "Rome"]}, name="Researcher")
    colour = asking(svc, {"question": "Favourite colour?"}, name="Painter")
    approval = svc.create("scripted", name="Adder", config={"interval_s": 0, "tools": ["add"], "approve": ["add"],
                          "frames": [{"tool_calls": [{"name": "add", "args": {"numbers": [2, 3]}}]}, {"done": True}]})
    city_call = only_call(svc, city["session_id"], "waiting_result")
    colour_call = only_call(svc, colour["session_id"], "waiting_result")
    add_call = only_call(svc, approval["session_id"], "waiting_approval")

    context, pg, errors = needs_you_page(browser, svc)
    try:
        count = pg.get_by_test_id("needs-you-count")
        expect(count).to_have_text(str(total(svc)), timeout=30_000)
        item = lambda call: pg.locator(f"[data-testid=waiting-item][data-call='{call['id']}']")  # noqa: E731
        for call in (city_call, colour_call, add_call):
            expect(item(call)).to_be_visible(timeout=30_000)
        expect(item(city_call).get_by_test_id("question")).to_have_text("Which city?")
        ids = pg.locator("[data-testid=waiting-item]").evaluate_all("nodes => nodes.map(n => n.dataset.call)")
        assert ids.index(city_call["id"]) < ids.index(colour_call["id"]) < ids.index(add_call["id"])  # oldest first
        assert not scan(pg), scan(pg)
        screenshot(pg, "needs-you.png")  # with AGENTSVC_SCREENSHOTS=docs

        # A choice, a free-text answer and an approval, each in place; each item leaves the list live.
        item(city_call).get_by_test_id("answer-choice").filter(has_text="Rome").click()
        expect(item(city_call)).to_have_count(0, timeout=30_000)
        item(colour_call).get_by_test_id("answer-text").fill("teal")
        item(colour_call).get_by_test_id("answer-submit").click()
        expect(item(colour_call)).to_have_count(0, timeout=30_000)
        item(add_call).get_by_test_id("waiting-approve").click()
        expect(item(add_call)).to_have_count(0, timeout=30_000)

        for made in (city, colour, approval):
            svc.wait_status(made["session_id"], "done", timeout=90)
        city_row = svc.get(f"/api/tool-calls/{city_call['id']}").json()
        assert city_row["result"] == {"answer": "Rome", "choice": "Rome", "answered_by": "user", "via": "api"}
        assert svc.get(f"/api/tool-calls/{colour_call['id']}").json()["result"]["answer"] == "teal"
        assert svc.get(f"/api/tool-calls/{add_call['id']}").json()["status"] == "success"
        wait_for(lambda: count.text_content() == str(total(svc)) or (total(svc) == 0 and count.is_hidden()),
                 what="the nav count to follow")

        # A question asked while the page is open appears live (no reload).
        late = asking(svc, {"question": "One more thing?"})
        late_call = only_call(svc, late["session_id"], "waiting_result")
        expect(item(late_call)).to_be_visible(timeout=30_000)
        expect(count).to_have_text(str(total(svc)), timeout=30_000)
        pg.set_viewport_size({"width": 400, "height": 800})
        assert pg.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0

        # The session's timeline offers the same answer box on its ask_user call.
        pg.set_viewport_size({"width": 1280, "height": 900})
        pg.goto(svc.url + f"/#/session/{late['session_id']}")
        expect(pg.get_by_test_id("session-reason")).to_have_text("for your answer", timeout=30_000)
        box = pg.locator(f"[data-testid=tool-call][data-call='{late_call['id']}']")
        box.locator("input[name=answer]").fill("from the timeline")
        box.get_by_role("button", name="Answer").click()
        svc.wait_status(late["session_id"], "done", timeout=90)
        assert svc.get(f"/api/tool-calls/{late_call['id']}").json()["result"]["answer"] == "from the timeline"
        assert not errors, errors
    finally:
        context.close()


def test_a_childs_question_is_answered_from_the_root_conversation(browser, shared_service):
    svc = shared_service
    expect = playwright_api.expect
    conv = svc.post("/api/conversations", json={"title": "main chat"}).json()["conversation_id"]
    root = svc.create("scripted", name="Orchestrator", conversation_id=conv,  # its children ask: ask_user is its too
                      config={"interval_s": 0, "tools": ["ask_user"], "frames": [{"text": "delegating", "done": True}]})
    svc.wait_status(root["session_id"], "done")
    child = asking(svc, {"question": "Window or aisle?", "choices": ["window", "aisle"]}, name="Booker",
                   parent_session_id=root["session_id"])
    call = only_call(svc, child["session_id"], "waiting_result")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    try:
        pg.goto(svc.url + f"/#/conversation/{conv}")
        notice = pg.locator(f"[data-testid=message][data-message='{call['id']}']")
        expect(notice).to_contain_text("Booker needs more information: Window or aisle?", timeout=30_000)
        expect(notice.get_by_role("link", name="open Booker")).to_have_attribute(
            "href", f"#/session/{child['session_id']}")
        notice.get_by_test_id("message-choice").filter(has_text="aisle").click()
        svc.wait_status(child["session_id"], "done", timeout=90)
        result = svc.get(f"/api/tool-calls/{call['id']}").json()["result"]
        assert result["answer"] == "aisle" and result["via"] == "conversation"
        expect(pg.locator("[data-testid=message].user").filter(has_text="aisle")).to_have_count(1, timeout=30_000)
    finally:
        context.close()


def test_args_edited_before_approving_run_and_the_timeline_says_so(browser, shared_service):
    """Issue 40: a person changes a call's args before approving it, on Needs you
    (text that is not a JSON object is refused on the page, args that do not fit
    the tool by the service, with its reason) and on the session's timeline."""
    svc = shared_service
    expect = playwright_api.expect
    adds = [{"text": "I will add one and two", "tool_calls": [{"name": "add", "args": {"numbers": [1, 2]}}]},
            {"tool_calls": [{"name": "add", "args": {"numbers": [3, 4]}}]}, {"done": True}]
    made = svc.create("scripted", "sum what you are given", name="Edited adder",
                      config={"interval_s": 0, "tools": ["add"], "approve": ["add"], "frames": adds})
    first = only_call(svc, made["session_id"], "waiting_approval")
    context, pg, errors = needs_you_page(browser, svc)
    try:
        card = pg.locator(f"[data-testid=waiting-item][data-call='{first['id']}']")
        expect(card).to_be_visible(timeout=30_000)
        # the card says why it is asked: the task, and what the step said
        expect(card.get_by_test_id("waiting-context")).to_have_text(
            "Task: sum what you are givenStep 1 said: I will add one and two")
        card.get_by_test_id("waiting-args-toggle").click()
        box = card.get_by_test_id("waiting-args-edit")
        expect(box).to_be_focused()
        box.fill('{"numbers": [40, 2]')  # not JSON: refused here, nothing sent
        card.get_by_test_id("waiting-approve").click()
        expect(card.get_by_test_id("waiting-args-problem")).to_contain_text("not JSON")
        box.fill('{"numbers": "forty-two"}')  # JSON, but not what add takes: the service says why
        card.get_by_test_id("waiting-approve").click()
        expect(pg.locator("#toasts .toast.bad").last).to_contain_text("invalid args for 'add'", timeout=30_000)
        assert svc.get(f"/api/tool-calls/{first['id']}").json()["status"] == "waiting_approval"
        box.fill('{"numbers": [40, 2]}')
        card.get_by_test_id("waiting-approve").click()
        expect(card).to_have_count(0, timeout=30_000)
        ran = wait_for(lambda: (r := svc.get(f"/api/tool-calls/{first['id']}").json())["status"] == "success" and r,
                       timeout=90, what="the edited call to run")
        assert ran["args"] == {"numbers": [40, 2]} and ran["original_args"] == {"numbers": [1, 2]}
        assert ran["result"] == {"sum": 42}

        # On the timeline: the second call, edited there; the first says it was edited.
        second = only_call(svc, made["session_id"], "waiting_approval")
        pg.goto(svc.url + f"/#/session/{made['session_id']}")
        call = pg.locator(f"[data-testid=tool-call][data-call='{second['id']}']")
        expect(call.get_by_test_id("tool-approval-args")).to_be_visible(timeout=30_000)
        call.get_by_test_id("tool-approval-args-toggle").click()
        call.get_by_test_id("tool-approval-args-edit").fill('{"numbers": [5, 5]}')
        assert not scan(pg), scan(pg)
        call.get_by_test_id("tool-approve").click()
        svc.wait_status(made["session_id"], "done", timeout=90)
        assert svc.get(f"/api/tool-calls/{second['id']}").json()["result"] == {"sum": 10}
        edited = pg.locator(f"[data-testid=tool-call][data-call='{first['id']}'] [data-testid=tool-original-args]")
        expect(edited).to_have_count(1, timeout=30_000)
        assert not errors, errors
    finally:
        context.close()


def test_approve_all_and_deny_all_of_a_tool_with_a_preview(browser, shared_service):
    """Issue 40, What must hold 3: Needs you filters what waits by kind and tool
    and decides every approval shown at once, after a preview that says how
    many and of which tool; a question among them is left alone."""
    svc = shared_service
    expect = playwright_api.expect
    waits_for = lambda tool, args: svc.create("scripted", name=f"uses {tool}", config={  # noqa: E731
        "interval_s": 0, "tools": [tool], "approve": [tool],
        "frames": [{"text": f"use {tool}", "tool_calls": [{"name": tool, "args": args}]}, {"done": True}]})
    repeats = [waits_for("repeat", {"text": "ab", "times": n}) for n in (2, 3)]
    adder = waits_for("add", {"numbers": [4, 5]})
    question = asking(svc, {"question": "Left alone?"}, name="Asker")
    repeat_calls = [only_call(svc, r["session_id"], "waiting_approval") for r in repeats]
    add_call = only_call(svc, adder["session_id"], "waiting_approval")
    question_call = only_call(svc, question["session_id"], "waiting_result")

    context, pg, errors = needs_you_page(browser, svc)
    try:
        item = lambda call: pg.locator(f"[data-testid=waiting-item][data-call='{call['id']}']")  # noqa: E731
        for call in (*repeat_calls, add_call, question_call):
            expect(item(call)).to_be_visible(timeout=30_000)
        pg.get_by_test_id("waiting-tool").select_option("repeat")
        expect(item(add_call)).to_have_count(0, timeout=30_000)  # the filter shows repeat's calls only
        expect(item(question_call)).to_have_count(0)
        n_repeat = svc.get("/api/waiting", tool="repeat", kind="approval").json()["total"]
        assert n_repeat >= 2
        approve_all = pg.get_by_test_id("approve-all")
        expect(approve_all).to_have_text(f"Approve all {n_repeat} calls…", timeout=30_000)
        approve_all.click()
        dialog = pg.get_by_test_id("decide-dialog")
        expect(dialog).to_be_visible()
        expect(pg.get_by_test_id("decide-dialog-title")).to_have_text(f"Approve {n_repeat} calls?")
        expect(pg.get_by_test_id("decide-preview")).to_have_text(f"repeat: {n_repeat}.")
        expect(dialog).to_contain_text("uses repeat")  # the sample names the sessions
        assert not scan(pg), scan(pg)
        pg.get_by_test_id("decide-confirm").click()
        for made in repeats:
            svc.wait_status(made["session_id"], "done", timeout=90)
        for call, n in zip(repeat_calls, (2, 3)):
            ran = svc.get(f"/api/tool-calls/{call['id']}").json()
            assert ran["status"] == "success" and ran["result"] == "ab" * n
        for call in repeat_calls:
            expect(item(call)).to_have_count(0, timeout=30_000)
        assert svc.get(f"/api/tool-calls/{add_call['id']}").json()["status"] == "waiting_approval"

        pg.get_by_test_id("waiting-tool").select_option("add")
        expect(item(add_call)).to_be_visible(timeout=30_000)
        pg.get_by_test_id("deny-all").click()
        pg.get_by_test_id("decide-reason").fill("adding is done by hand today")
        pg.get_by_test_id("decide-confirm").click()
        svc.wait_status(adder["session_id"], "done", timeout=90)
        denied = svc.get(f"/api/tool-calls/{add_call['id']}").json()
        assert denied["status"] == "denied" and "adding is done by hand today" in denied["error"]
        assert svc.get(f"/api/tool-calls/{question_call['id']}").json()["status"] == "waiting_result"

        # the kind filter: questions only, and no bulk decision offered for them
        pg.get_by_test_id("waiting-tool").select_option("")
        pg.get_by_test_id("waiting-kind").select_option("question")
        expect(item(question_call)).to_be_visible(timeout=30_000)
        expect(approve_all).to_be_hidden()
        pg.set_viewport_size({"width": 400, "height": 800})
        assert not scan(pg), scan(pg)
        item(question_call).get_by_test_id("answer-text").fill("yes")
        item(question_call).get_by_test_id("answer-submit").click()
        svc.wait_status(question["session_id"], "done", timeout=90)
        assert not errors, errors
    finally:
        context.close()
