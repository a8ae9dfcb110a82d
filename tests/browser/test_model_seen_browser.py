"""What the model saw, on a step of a session's page in a real browser (issue
40, What must hold 5): the messages as sent, the reply as received and the
prompt's token split, read from GET /api/sessions/<id>/steps/<n>/model-io; a
private session's steps say why there is nothing; the page passes axe."""
import json

import pytest

from tests.browsing import scan, screenshot
from tests.fake_openai import FakeOpenAI, Reply, scripted

playwright_api = pytest.importorskip("playwright.sync_api")

SYSTEM = "Plan trips in three lines."


def frame(n: int, text: str, done: bool = False) -> str:
    return json.dumps({"step": str(n), "next_step": str(n + 1), "state": {"city": "Lisbon", "day": n},
                       "text": text, "data": None, "done": done}, ensure_ascii=False)


@pytest.fixture
def fake():
    server = FakeOpenAI(scripted(Reply(frame(0, "Day one: Belém."), prompt_tokens=310, completion_tokens=25),
                                 then=Reply(frame(1, "Day two: Alfama.", done=True), prompt_tokens=340,
                                            completion_tokens=22))).start()
    yield server
    server.stop()


def test_a_steps_request_reply_and_token_split_are_shown(page, shared_service, fake):
    expect = playwright_api.expect
    svc = shared_service
    made = svc.create("baml", "Plan two days in Lisbon", name="trip planner",
                      config={"interval_s": 0, "llm": svc.endpoints.llm(fake)})
    sid = made["session_id"]
    svc.wait_status(sid, "done", timeout=60)
    private = svc.create("baml", "Plan two days in Lisbon", name="private planner",
                         config={"interval_s": 0, "private": True, "llm": svc.endpoints.llm(fake)})
    svc.wait_status(private["session_id"], "done", timeout=60)

    seen = svc.get(f"/api/sessions/{sid}/steps/0/model-io").json()
    [call] = seen["calls"]
    assert any("Plan two days in Lisbon" in json.dumps(m) for m in call["request"]["messages"])
    assert json.loads(call["reply"])["text"] == "Day one: Belém."
    assert call["tokens"]["input_tokens"] == 310 and seen["why"] is None
    hidden = svc.get(f"/api/sessions/{private['session_id']}/steps/0/model-io").json()
    assert hidden["calls"] == [] and "private" in hidden["why"]
    assert svc.get(f"/api/sessions/{sid}/steps/7/model-io").json()["why"].startswith("nothing was kept")
    assert svc.get("/api/sessions/01NOSUCHSESSION0000000000/steps/0/model-io").status_code == 404

    page.goto(f"{svc.url}/#/session/{sid}")
    first = page.locator("[data-testid=step][data-iteration='0']")
    expect(first).to_be_visible(timeout=30_000)
    first.get_by_test_id("model-seen").locator("summary").click()
    messages = first.get_by_test_id("model-message")
    expect(messages.first).to_be_visible(timeout=30_000)
    expect(first.get_by_test_id("model-seen")).to_contain_text("Plan two days in Lisbon")
    expect(first.get_by_test_id("model-reply")).to_contain_text("Day one: Belém.")
    split = first.get_by_test_id("token-split")
    expect(split).to_contain_text("310 tokens in, 25 out")
    for part in ("task", "state", "template and output schema"):
        expect(split).to_contain_text(part)
    assert not scan(page), scan(page)
    first.get_by_test_id("model-seen").evaluate("el => el.scrollIntoView({block: 'start'})")
    screenshot(page, "model-seen.png")
    page.set_viewport_size({"width": 400, "height": 800})
    assert not scan(page), scan(page)

    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{svc.url}/#/session/{private['session_id']}")
    step = page.locator("[data-testid=step][data-iteration='0']")
    expect(step).to_be_visible(timeout=30_000)
    step.get_by_test_id("model-seen").locator("summary").click()
    expect(step.get_by_test_id("model-seen")).to_contain_text("the session is private", timeout=30_000)
