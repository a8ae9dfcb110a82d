"""Input survives live updates, in Chromium against the real service: half an
answer typed into a "Needs you" card, and half a message typed into a
conversation, keep their text, focus and selection while other agents ask;
in a conversation a question is answered only through its own buttons (the
message box posts plain messages), shows as answered (here or elsewhere) and
offers no buttons after; agents show by name; "Skip to content" keeps the
route.  axe-core finds nothing on either page."""
import pytest

from tests.harness import wait_for

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")
from tests.browsing import scan  # noqa: E402

FOCUSED = "() => document.activeElement === window.__typing"
SELECTION = "() => [window.__typing.selectionStart, window.__typing.selectionEnd]"


def asking(svc, question: str, **fields) -> dict:
    """A scripted session that asks one question (ask_user), then finishes."""
    args = {"question": question, **({"choices": fields.pop("choices")} if "choices" in fields else {})}
    return svc.create("scripted", config={"interval_s": 0, "tools": ["ask_user"], "frames": [
        {"tool_calls": [{"id": "ask", "name": "ask_user", "args": args}]}, {"text": "thanks", "done": True}]},
        **fields)


def open_question(svc, session_id: str) -> dict:
    return wait_for(lambda: [c for c in svc.get("/api/tool-calls", session_id=session_id).json()["tool_calls"]
                             if c["status"] == "waiting_result"], what=f"the question of {session_id}")[0]


def type_half(pg, box, text: str) -> None:
    """Type into ``box``, select its second and third characters, and remember the node."""
    box.click()
    box.press_sequentially(text)
    box.evaluate("(el) => { window.__typing = el; el.setSelectionRange(1, 3); }")


def still_typing(pg, box, text: str) -> None:
    assert box.input_value() == text
    assert pg.evaluate(FOCUSED), "focus left the box being typed in"
    assert pg.evaluate(SELECTION) == [1, 3]
    assert box.evaluate("(el) => el === window.__typing"), "the box was replaced"


def test_needs_you_keeps_half_an_answer_while_others_ask(page, shared_service):
    svc, expect = shared_service, playwright_api.expect
    first = open_question(svc, asking(svc, "Which city?", name="Researcher")["session_id"])
    page.goto(svc.url + "/#/needs-you")
    card = lambda call: page.locator(f"[data-testid=waiting-item][data-call='{call['id']}']")  # noqa: E731
    box = card(first).get_by_test_id("answer-text")
    expect(box).to_be_visible(timeout=30_000)
    type_half(page, box, "Pari")

    others = [open_question(svc, asking(svc, f"Question {n}?")["session_id"]) for n in range(3)]
    for call in others:  # each arrives live, inserted without redrawing the card being typed in
        expect(card(call)).to_be_visible(timeout=30_000)
    still_typing(page, box, "Pari")
    ids = page.locator("[data-testid=waiting-item]").evaluate_all("nodes => nodes.map(n => n.dataset.call)")
    assert [ids.index(c["id"]) for c in [first, *others]] == sorted(ids.index(c["id"]) for c in [first, *others])
    assert not scan(page), scan(page)

    box.press("End")
    box.press_sequentially("s")
    box.press("Enter")
    expect(card(first)).to_have_count(0, timeout=30_000)
    wait_for(lambda: svc.get(f"/api/tool-calls/{first['id']}").json().get("result", {}).get("answer") == "Paris",
             what="the answer typed across the updates")


def test_conversation_questions_answer_only_through_their_own_box(page, shared_service):
    svc, expect = shared_service, playwright_api.expect
    conv = svc.post("/api/conversations", json={"title": "trip"}).json()["conversation_id"]
    city = asking(svc, "Which city?", choices=["Paris", "Rome"], name="Researcher", conversation_id=conv)
    city_call = open_question(svc, city["session_id"])
    page.goto(svc.url + f"/#/conversation/{conv}")
    question = lambda call: page.locator(f"[data-testid=message-question][data-call='{call['id']}']")  # noqa: E731
    expect(question(city_call).get_by_test_id("message-choice")).to_have_count(2, timeout=30_000)
    expect(page.get_by_test_id("participants")).to_contain_text("Researcher", timeout=30_000)
    expect(page.locator("[data-testid=message] a.msg-who").first).to_have_text("Researcher")

    # Half a message, while another agent asks here: text, focus and selection survive.
    box = page.get_by_test_id("post-text")
    type_half(page, box, "half a note")
    colour = asking(svc, "Favourite colour?", name="Painter", conversation_id=conv)
    colour_call = open_question(svc, colour["session_id"])
    expect(question(colour_call)).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("participants")).to_contain_text("Painter", timeout=30_000)
    still_typing(page, box, "half a note")

    # Free text while questions are open is a plain message, not an answer.
    expect(page.get_by_test_id("post-note")).to_contain_text("never answers a question")
    page.get_by_test_id("post-submit").click()
    expect(page.locator("[data-testid=message].user").filter(has_text="half a note")).to_have_count(1,
                                                                                                   timeout=30_000)
    posted = [m for m in svc.get(f"/api/conversations/{conv}/messages").json()["messages"]
              if m["text"] == "half a note"]
    assert [m["event_type"] for m in posted] == ["message"]
    for call in (city_call, colour_call):
        assert svc.get(f"/api/tool-calls/{call['id']}").json()["status"] == "waiting_result"

    # A choice answers its own question, which then shows its answer and has no buttons.
    question(city_call).get_by_test_id("message-choice").filter(has_text="Rome").click()
    expect(question(city_call).get_by_test_id("question-state")).to_contain_text("answered: “Rome”", timeout=30_000)
    expect(question(city_call).locator("button, input")).to_have_count(0)
    svc.wait_status(city["session_id"], "done", timeout=90)
    assert svc.get(f"/api/tool-calls/{city_call['id']}").json()["result"]["via"] == "conversation"

    # Answered elsewhere (the API, as "Needs you" does): shown live as answered, buttons gone.
    assert svc.post(f"/api/sessions/{colour['session_id']}/answer", json={"text": "teal"}).status_code == 202
    expect(question(colour_call).get_by_test_id("question-state")).to_contain_text("teal", timeout=30_000)
    expect(question(colour_call).locator("button, input")).to_have_count(0)
    assert not scan(page), scan(page)

    # After a reload both still show as answered (the transcript names the questions answered).
    page.reload()
    expect(question(city_call).get_by_test_id("question-state")).to_contain_text("Rome", timeout=30_000)
    expect(question(colour_call).get_by_test_id("question-state")).to_contain_text("teal", timeout=30_000)
    expect(page.get_by_test_id("message-choice")).to_have_count(0)


def test_skip_to_content_keeps_the_route(page, shared_service):
    page.goto(shared_service.url + "/#/needs-you")
    playwright_api.expect(page.locator("#view-needs_you")).to_be_visible(timeout=30_000)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.testid") == "skip-link"
    page.keyboard.press("Enter")
    wait_for(lambda: page.evaluate("document.activeElement.id") == "main", what="focus on <main>")
    assert page.evaluate("location.hash") == "#/needs-you"
    assert page.locator("#view-needs_you").is_visible()
