"""Pages stay current under large configs, and a page that fell behind says so
and catches up (issue 37 item 7), in a real browser.

1. Three sessions whose configs are ~190 KB step at ``interval_s`` 0.  The
   agents page and a session page (its facts and its timeline) reach what the
   record holds within a generous deadline, round after round, and their badge
   says "live".  Before the fix every ``agent_state`` carried the config, the
   relay dropped its batches and both pages froze while saying "live".
2. A page that missed events learns it from a ``gap`` event: agents.py runs
   with live events off, so the page hears nothing while the session steps;
   the ``gap`` app.py passes on (as it does when the relay drops events or
   reconnects) turns the badge to "catching up…", the page reads the record
   and shows the newest step, and the badge says "live" again."""
import os

import pytest
import socketio

from domain.events import GAP, INGEST_NAMESPACE, TOKEN_FILE
from tests.browsing import ARGS, CHROMIUM
from tests.harness import Service, wait_for

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")

FRAMES = [{"text": f"frame {i} " + "x" * 80} for i in range(2000)]  # a ~190 KB config
ROUNDS = 4


def recorded(svc, session_id: str) -> int:
    steps = svc.get("/api/agent-steps", session_id=session_id, order="desc", limit=1).json()["steps"]
    return steps[0]["iteration"] if steps else -1


def ready(svc) -> None:
    """agents.py polls the queue (it can take a while to start on a loaded machine)."""
    wait_for(lambda: svc.get("/readyz").status_code == 200, timeout=120, interval=0.5, what="GET /readyz to say ready")


def agents_page_steps(page) -> dict[str, int]:
    """Agent id -> the "Steps" cell of its row (a step number: iteration + 1)."""
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll("[data-testid=agent-row]")]
        .map((tr) => [tr.dataset.agent, Number(tr.cells[4].textContent) || 0]))""")


def session_page_steps(page) -> tuple[int, int]:
    """The session page's step count (its facts) and the newest step its timeline shows."""
    return page.evaluate("""() => [Number(document.querySelector("[data-testid=session-iteration]").textContent) || 0,
        Math.max(-1, ...[...document.querySelectorAll("[data-testid=steps] li.step")].map((n) => +n.dataset.iteration))]""")


def shown_config(page) -> str:
    """The text of the session page's config view, opened (it is drawn when opened)."""
    return page.evaluate("""() => new Promise((done) => {
        const view = document.querySelector("[data-testid=session-config]");
        if (!view) return done("");
        view.addEventListener("toggle", () => done(view.textContent), { once: true });
        view.open = true;
    })""")


def watch_badge(page) -> None:
    """Record every text the live badge shows, from now on (window.badgeTexts)."""
    page.evaluate("""() => {
        const badge = document.querySelector("#live");
        window.badgeTexts = [badge.textContent];
        new MutationObserver(() => window.badgeTexts.push(badge.textContent))
            .observe(badge, { childList: true, characterData: true, subtree: true });
    }""")


def test_pages_stay_current_with_large_configs_at_full_speed(browser, shared_service):
    svc = shared_service
    ready(svc)
    made = [svc.create("scripted", f"large {i}", config={"interval_s": 0, "frames": FRAMES}) for i in range(3)]
    wait_for(lambda: min(recorded(svc, m["session_id"]) for m in made) >= 20, timeout=120,
             what="every session to take 20 steps")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        agents, session = context.new_page(), context.new_page()
        agents.goto(svc.url + "/#/?sort=name")
        session.goto(f"{svc.url}/#/session/{made[0]['session_id']}")
        wait_for(lambda: "frame 1999" in shown_config(session), timeout=60, what="the session page's config")
        for round_ in range(ROUNDS):
            want = {m["agent_id"]: recorded(svc, m["session_id"]) + 1 for m in made}  # as step numbers
            wait_for(lambda: all(agents_page_steps(agents).get(a, 0) >= n for a, n in want.items()), timeout=45,
                     what=f"round {round_}: the agents page to show {want} (it shows {agents_page_steps(agents)})")
            first = want[made[0]["agent_id"]]
            wait_for(lambda: min(session_page_steps(session)[0], session_page_steps(session)[1] + 1) >= first,
                     timeout=45, what=f"round {round_}: the session page to show step {first} "
                                      f"(it shows {session_page_steps(session)})")
        assert recorded(svc, made[0]["session_id"]) + 1 > first, "the session stopped stepping"
        for pg in (agents, session):
            playwright_api.expect(pg.get_by_test_id("live-indicator")).to_have_text("live", timeout=30_000)
        # The page still shows the whole config it read over HTTP (events no longer carry it).
        assert "frame 1999" in shown_config(session)
    finally:
        context.close()
        for m in made:
            svc.control(m["agent_id"], "destroy")


@pytest.fixture
def quiet_service(tmp_path):
    """agents.py with no live events: a page hears nothing of what it does."""
    (tmp_path / "logs").mkdir()
    svc = Service(str(tmp_path / "data"), str(tmp_path / "logs"), agents_args=["--events-url", "off"]).start()
    yield svc
    svc.stop()


def send_gap(svc) -> None:
    """What app.py receives when the relay lost events: a gap, through the ingest door."""
    with open(os.path.join(svc.data_dir, TOKEN_FILE)) as f:
        token = f.read().strip()
    ingest = socketio.Client(reconnection=False)
    ingest.connect(svc.url, namespaces=[INGEST_NAMESPACE], auth={"token": token}, transports=["websocket"],
                   wait_timeout=10)
    try:
        gap = {"event": GAP, "id": "gap-test", "stream": GAP,
               "data": {"reason": "buffer_full", "dropped": 5, "sessions": None}}
        assert ingest.call("events", [gap], namespace=INGEST_NAMESPACE, timeout=10) == {"ok": True, "accepted": 1}
    finally:
        ingest.disconnect()


def test_a_page_that_missed_events_says_so_and_catches_up(browser, quiet_service):
    svc = quiet_service
    ready(svc)
    made = svc.create("countdown", "slow count", config={"n": 1000, "interval_s": 0.3})
    sid = made["session_id"]
    svc.wait_steps(sid, 2, timeout=60)
    # The page's step count is the snapshot's, saved behind the steps: with live
    # events off the page reads once, so the snapshot must say 2 steps before it does.
    wait_for(lambda: svc.session(sid)["iteration"] + 1 >= 2, timeout=90, what="a snapshot of 2 steps")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{svc.url}/#/session/{sid}")
        playwright_api.expect(page.get_by_test_id("live-indicator")).to_have_text("live", timeout=30_000)
        wait_for(lambda: session_page_steps(page)[0] >= 2, timeout=90, what="the page's first read")
        shown = session_page_steps(page)[0]
        wait_for(lambda: recorded(svc, sid) + 1 >= shown + 3 and svc.session(sid)["iteration"] + 1 > shown, timeout=60,
                 what="steps (and a snapshot) the page did not hear of")
        assert session_page_steps(page)[0] == shown, "the page heard of steps with live events off"
        watch_badge(page)
        # What the record holds now: the steps, and the snapshot (saved behind the steps, so its count may lag).
        want = (svc.session(sid)["iteration"] + 1, recorded(svc, sid))
        send_gap(svc)
        wait_for(lambda: (got := session_page_steps(page))[0] >= want[0] and got[1] >= want[1], timeout=90,
                 what=f"the page to catch up to {want} (it shows {session_page_steps(page)})")
        playwright_api.expect(page.get_by_test_id("live-indicator")).to_have_text("live", timeout=30_000)
        texts = page.evaluate("window.badgeTexts")
        assert "catching up…" in texts and texts[-1] == "live", texts
    finally:
        context.close()
