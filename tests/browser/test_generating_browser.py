"""The step being generated, on a session's page in a real browser (chromium
via playwright, as in test_dashboard_browser.py).

What this proves: step_delta events published through app.py's /ingest
namespace (as agents.py's relay does) show the model output so far, its
tokens and structured-output mode under the timeline's head, scrolled to the
end of the text; the area goes when the step of that iteration arrives, when
no delta came for 30 s, and when the session stops; failed HTTP attempts show
apart in the usage panel and in the step's usage line; the page passes axe.
With AGENTSVC_SCREENSHOTS=docs it saves docs/step-streaming.png.
"""
import os
from datetime import datetime, timezone

import pytest

from domain.events import make_event
from tests.harness import ROOT
from tests.browsing import SHOTS, scan
from tests.step_stream import Ingest, delta

playwright_api = pytest.importorskip("playwright.sync_api")

FIRST_STEP = "Split the trip into three areas, one a day: Belém, Alfama with the castle, and Sintra."
OUTPUT = """{
  "step": "1",
  "next_step": "2",
  "state": {
    "city": "Lisbon",
    "days": [
      {"day": 1, "area": "Belém", "stops": ["Jerónimos Monastery", "Belém Tower", "Pastéis de Belém"]},
      {"day": 2, "area": "Alfama", "stops": ["São Jorge Castle", "Miradouro de Santa Luzia", "a fado dinner"]},
      {"day": 3, "area": "Sintra", "stops": ["Pena Palace", "Quinta da Regaleira"]}
    ],
    "open_questions": ["train or car to Sintra?"]
  },
  "text": "Day 1 is Belém: the monastery opens at 9:30, so start there, walk the river to the tower, \
and end with pastéis at the old bakery. Day 2 climbs Alfama to the castle before the heat, \
then the viewpoints on the way down and fado in the evening. Day 3 is Sintra by the 8:11 train from Rossio"""


def step_row(agent_id: str, session_id: str, iteration: int, usage: dict) -> dict:
    """A step row as agents.py relays it once the step is persisted."""
    return {"id": f"STEP{iteration}", "agent_id": agent_id, "session_id": session_id, "iteration": iteration,
            "status": "ok", "step_token": str(iteration), "next_step_token": str(iteration + 1),
            "text": "Day 1 is Belém, day 2 Alfama, day 3 Sintra by train.", "state": {}, "data": None,
            "guidance": [], "latency_ms": 41_000, "usage": usage,
            "created_at": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")}


def test_the_step_being_generated_shows_until_its_step_arrives(page, shared_service):
    expect = playwright_api.expect
    svc = shared_service
    made = svc.create("scripted", "Plan a three-day trip to Lisbon", name="trip planner",
                      config={"interval_s": 3600, "frames": [{"text": FIRST_STEP}, {"text": "not reached"}]})
    aid, sid = made["agent_id"], made["session_id"]
    svc.wait_steps(sid, 1)
    page.goto(f"{svc.url}/#/session/{sid}")
    expect(page.get_by_test_id("step")).to_have_count(1, timeout=30_000)  # subscribed, then caught up
    area, summary = page.get_by_test_id("generating"), page.get_by_test_id("generating-summary")
    box = page.get_by_test_id("generating-text")
    expect(area).to_be_hidden()
    ingest = Ingest(svc)
    try:
        for n in (60, 300, len(OUTPUT)):
            ingest.send(delta(aid, sid, 1, OUTPUT[:n]))
        expect(area).to_be_visible(timeout=30_000)
        expect(summary).to_have_text("Generating step 2…")
        expect(box).to_have_text(OUTPUT)
        expect(page.get_by_test_id("generating-tokens")).to_have_text(str(len(OUTPUT) // 4))
        expect(page.get_by_test_id("generating-mode")).to_have_text("JSON schema")
        assert box.evaluate("e => e.scrollHeight > e.clientHeight"), "the box is height-capped"
        assert box.evaluate("e => e.scrollHeight - e.scrollTop - e.clientHeight") <= 1, "scrolled to the end"
        assert summary.get_attribute("aria-live") == "polite" and box.get_attribute("aria-live") is None
        assert scan(page) == []
        if SHOTS:
            timeline = page.locator(".panel").filter(has=area)
            timeline.screenshot(path=os.path.join(ROOT, SHOTS, "step-streaming.png"), animations="disabled")

        ingest.send(delta(aid, sid, 1, OUTPUT + '"}', final=True))  # the attempt ended; its step follows
        expect(summary).to_have_text("Step 2: generation ended")
        ingest.send(make_event("agent_step", "STEP1", step_row(aid, sid, 1, {
            "input_tokens": 4200, "output_tokens": 610, "duration_ms": 41_000, "cost": None,
            "attempts": 3, "failed_attempts": 2, "failed_tokens": 1200})))
        expect(area).to_be_hidden(timeout=30_000)
        expect(page.locator("[data-testid=step][data-iteration='1'] .usage")).to_contain_text(
            "2 failed attempts (1,200 tokens)")
        expect(page.locator("[data-testid=step][data-iteration='0'] .usage")).to_have_count(0)

        # A late delta of the recorded step is over; the snapshot relayed after it
        # (events reach the page in order) counts failed attempts apart.
        snapshot = svc.session(sid)
        snapshot["usage"] = {"input_tokens": 52_000, "output_tokens": 7_400, "cost": 0.21, "calls": 5,
                             "duration_ms": 96_000, "attempts": 12, "failed_attempts": 9, "failed_tokens": 8400}
        snapshot["updated_at"] = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        ingest.send(delta(aid, sid, 1, OUTPUT, final=True), make_event("agent_state", sid, snapshot))
        expect(page.get_by_test_id("usage-attempts")).to_have_text("12", timeout=30_000)
        expect(page.get_by_test_id("usage-failed")).to_have_text(", failed 9 (8,400 tokens)")
        expect(area).to_be_hidden()

        page.clock.install()  # the next step's output stops coming: after 30 s it goes
        ingest.send(delta(aid, sid, 2, '{"step": "2", "next_step"', attempt=2))
        expect(summary).to_have_text("Generating step 3… (attempt 2)", timeout=30_000)
        page.clock.fast_forward(29_000)
        expect(area).to_be_visible()
        page.clock.fast_forward(2_000)
        expect(area).to_be_hidden()

        ingest.send(delta(aid, sid, 2, '{"step": "2", "next_step": "3"', attempt=3))
        expect(area).to_be_visible(timeout=30_000)
        svc.control(aid, "destroy")  # a real snapshot: stopped, so nothing is being generated
        expect(page.get_by_test_id("session-status")).to_have_text("stopped", timeout=30_000)
        expect(area).to_be_hidden()
    finally:
        ingest.close()
