"""Every dashboard page, and the API reference, in a real browser (Debian's
chromium driven by playwright) on a quiet service (nothing steps: every
session here is finished or waits for a person):

- axe-core finds no violation of any impact, at 1400 and at 400 px wide, each
  page has one h1, and nothing is wider than the window;
- a page load requests each API URL once (it requested everything twice: once
  on routing, once on the socket's first connect).

With AGENTSVC_SCREENSHOTS=docs it saves the pictures the README shows."""
import time
from collections import Counter

import pytest

from tests.browsing import refused_by_policy, scan, screenshot
from tests.harness import wait_for

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")

FRAMES = [{"text": "adding", "tool_calls": [{"id": "c1", "name": "add", "args": {"numbers": [1, 2]}}]},
          {"text": "thinking", "state": {"notes": ["one"]}},
          {"text": "the answer is 3", "done": True}]
CHANGED = [FRAMES[0], {"text": "thinking again", "state": {"notes": ["two"]}}, FRAMES[2]]


@pytest.fixture(scope="module")
def pages(shared_service):
    """What each page shows, made once and left still: a finished countdown, a
    session waiting for an approval (a step with tool calls), a question, a
    conversation, a fork and its diff, an eval set with a finished run, the
    trace of the session waiting for an approval.
    name -> (path, a selector shown once the page has drawn its data)."""
    svc = shared_service
    done = svc.create("countdown", name="counted", config={"n": 2, "interval_s": 0})
    waiting = svc.create("scripted", name="Adder", config={
        "interval_s": 0, "tools": ["add", "human"], "approve": ["add"],
        "frames": [{"text": "asking", "tool_calls": [{"name": "add", "args": {"numbers": [2, 3]}},
                                                     {"name": "human", "args": {"question": "colour?"}}]},
                   {"text": "thanks", "done": True}]})
    asking = svc.create("scripted", name="Researcher", config={"interval_s": 0, "tools": ["ask_user"], "frames": [
        {"tool_calls": [{"id": "ask", "name": "ask_user", "args": {"question": "Which city?",
                                                                   "choices": ["Paris", "Rome"]}}]},
        {"text": "thanks", "done": True}]})
    source = svc.create("scripted", name="Source", config={"interval_s": 0, "tools": ["add"], "frames": FRAMES})
    conversation = svc.post("/api/conversations", json={"title": "planning"}).json()["conversation_id"]
    svc.wait_status(done["session_id"], "done", timeout=60)
    svc.wait_status(source["session_id"], "done", timeout=60)
    for made in (waiting, asking):
        svc.wait_status(made["session_id"], "waiting", timeout=60)
    fork = svc.post(f"/api/sessions/{source['session_id']}/fork",
                    json={"from_iteration": 0, "config": {"frames": CHANGED}})
    assert fork.status_code == 202, fork.text
    fork = fork.json()["session_id"]
    svc.wait_status(fork, "done", timeout=60)
    evalset = svc.post("/api/evalsets", json={"name": "two cases",
                                               "session_ids": [source["session_id"], done["session_id"]]})
    assert evalset.status_code == 201, evalset.text
    evalset = evalset.json()["id"]
    run = svc.post(f"/api/evalsets/{evalset}/runs", json={"scorers": ["final_equal", "steps"]})
    assert run.status_code == 202, run.text
    wait_for(lambda: all(r["status"] == "done" for r in svc.get(f"/api/evalsets/{evalset}/runs").json()["runs"]),
             timeout=120, what="the eval run to be done")
    wait_for(lambda: not [a for a in svc.get("/api/agents", limit=200).json()["agents"]
                          if a["status"] in ("pending", "running")], timeout=120, what="every session to be still")
    return {"agents": ("/#/", "[data-testid=agent-row]"),
            "session": (f"/#/session/{waiting['session_id']}", "[data-testid=tool-approve]"),
            "needs-you": ("/#/needs-you", "[data-testid=waiting-item]"),
            "conversations": ("/#/conversations", "[data-testid=conversations] li"),
            "conversation": (f"/#/conversation/{conversation}", "[data-testid=post-form]"),
            "search": ("/#/search?q=liftoff", "[data-testid=search-hit]"),
            "evals": (f"/#/evals/{evalset}", "[data-testid=eval-session]"),
            "diff": (f"/#/diff/{fork}?against={source['session_id']}", "[data-testid=diff-row]"),
            "trace": (f"/#/trace/{waiting['session_id']}", "[data-testid=trace-approval]"),
            "api-docs": ("/api/docs", ".swagger-ui .opblock-summary-control")}


# What the test of a page saves itself (a picture of a state this module does not make).
SHOT_ELSEWHERE = {"session", "needs-you", "evals", "diff", "trace"}
SHOT_NAMES = {"agents": "dashboard"}


@pytest.mark.parametrize("width", [1400, 400])
def test_every_page_passes_axe_at_any_impact_and_fits(browser, shared_service, pages, width):
    """No axe-core violation at all (critical to minor) on any page, the API
    reference included (also with two operations open), one h1 per page, and
    nothing wider than the window."""
    expect = playwright_api.expect
    context = browser.new_context(viewport={"width": width, "height": 800})
    pg = context.new_page()
    other_hosts, refused = [], []
    pg.on("request", lambda r: r.url.startswith(shared_service.url) or other_hosts.append(r.url))
    pg.on("console", lambda m: refused_by_policy(m) and refused.append(m.text))
    problems = {}
    try:
        for name, (path, ready) in pages.items():
            pg.goto(shared_service.url + path)
            expect(pg.locator(ready).first).to_be_visible(timeout=30_000)
            found = scan(pg)
            headings = pg.locator("h1:visible").count()
            if headings != 1:
                found.append(f"{headings} visible h1 elements")
            overflow = pg.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            if overflow > 0:
                found.append(f"{overflow}px wider than the window")
            if name not in SHOT_ELSEWHERE or width == 400:
                screenshot(pg, f"{SHOT_NAMES.get(name, name)}.png" if width > 400 else f"{name}-400px.png")
            if name == "api-docs":  # what an opened operation draws: parameters, examples, responses
                for operation in ("get_agents", "post_agents"):
                    pg.locator(f"#operations-default-{operation} .opblock-summary-control").click()
                    expect(pg.locator(f"#operations-default-{operation} .responses-table")).to_be_visible()
                found += [f"(operations open) {v}" for v in scan(pg)]
            if found:
                problems[name] = found
        assert not problems, problems
        assert not other_hosts, f"a page fetched from other hosts: {other_hosts}"
        assert not refused, f"the browser refused what a page did: {refused}"
    finally:
        context.close()


PATIENT_CONNECT_S = 60  # what the tests that count reads give a page instead (window.AGENTSVC_CONNECT_WAIT_MS)


def test_a_page_load_requests_each_api_url_once(browser, shared_service, pages):
    """Each page opened in a new tab (a real load, not a change of the hash):
    every API GET of the load is sent once, counted until the page has made no
    request for two seconds (the socket's connect, its subscribe and the
    catch-up it starts have all happened by then).

    A page whose socket took longer than core/live.js's CONNECT_WAIT_MS (2 s)
    to connect rightly reads over HTTP first and again on the connect; on a
    loaded machine that happens, so here the pages wait up to a minute for
    their socket (window.AGENTSVC_CONNECT_WAIT_MS), and one that still took
    longer is not judged, and most pages must be."""
    expect = playwright_api.expect
    context = browser.new_context(viewport={"width": 1400, "height": 800})
    context.add_init_script(f"window.AGENTSVC_CONNECT_WAIT_MS = {PATIENT_CONNECT_S * 1000}")
    doubled, judged, slow = {}, [], []
    try:
        for name, (path, ready) in pages.items():
            if name == "api-docs":
                continue  # Swagger UI reads one document; not ours
            pg = context.new_page()
            sent = []
            pg.on("request", lambda r: "/api/" in r.url and "/socket.io" not in r.url and r.method == "GET"
                  and sent.append((time.monotonic(), r.url.removeprefix(shared_service.url))))
            opened = time.monotonic()
            pg.goto(shared_service.url + path)
            expect(pg.get_by_test_id("live-indicator")).to_have_text("live", timeout=30_000)
            if time.monotonic() - opened > PATIENT_CONNECT_S * 0.9:
                slow.append(name)  # the HTTP fallback may have run: two reads are right
            expect(pg.locator(ready).first).to_be_visible(timeout=30_000)
            deadline = time.monotonic() + 60
            while time.monotonic() - max((at for at, _ in sent), default=0) < 2.0:
                assert time.monotonic() < deadline, f"{name}: the page never stopped requesting"
                pg.wait_for_timeout(100)
            twice = {url: n for url, n in Counter(url for _, url in sent).items() if n > 1}
            if name not in slow:
                judged.append(name)
                if twice:
                    doubled[name] = twice
            pg.close()
        assert not doubled, doubled
        assert len(judged) >= len(slow), f"too few pages connected within {PATIENT_CONNECT_S} s: {slow}"
    finally:
        context.close()


# Holds the page's read of the steps back for 2 s, so live steps and states arrive
# while the page is still reading: what a loaded machine does at random.
SLOW_STEPS_READ = """
const realFetch = window.fetch;
window.fetch = (url, ...rest) => String(url).includes("/api/agent-steps")
  ? new Promise((done) => setTimeout(done, 2000)).then(() => realFetch(url, ...rest))
  : realFetch(url, ...rest);
"""


@pytest.mark.parametrize("slow_steps_read", [False, True], ids=["as_it_comes", "steps_read_slowly"])
def test_the_page_of_a_stepping_session_reads_its_record_once(browser, shared_service, slow_steps_read):
    """With steps arriving live, the session page still reads the session, its
    turns, tool calls and actions once: a live state that says what the page
    read (running) is no reason to read again (the turns were read twice), nor is
    one that comes while the page is still reading (the turns' read comes after it)."""
    expect = playwright_api.expect
    svc = shared_service
    made = svc.create("joke", "owls", config={"interval_s": 0.3})
    sid = made["session_id"]
    svc.wait_steps(sid, 1, timeout=60)
    # The turn's row is written beside the first steps: a page that read the turns
    # before it was there reads them again, rightly (components/turns.js).
    wait_for(lambda: svc.get(f"/api/sessions/{sid}/turns").json()["turns"], timeout=90, what="the turn's row")
    context = browser.new_context(viewport={"width": 1400, "height": 800})
    context.add_init_script(f"window.AGENTSVC_CONNECT_WAIT_MS = {PATIENT_CONNECT_S * 1000}")
    if slow_steps_read:
        context.add_init_script(SLOW_STEPS_READ)
    pg = context.new_page()
    sent = []
    pg.on("request", lambda r: "/api/" in r.url and "/socket.io" not in r.url and r.method == "GET"
          and sent.append(r.url.removeprefix(svc.url)))
    try:
        opened = time.monotonic()
        pg.goto(f"{svc.url}/#/session/{sid}")
        expect(pg.get_by_test_id("live-indicator")).to_have_text("live", timeout=30_000)
        reads = 2 if time.monotonic() - opened > PATIENT_CONNECT_S * 0.9 else 1  # a slow connect: HTTP read it first
        first = len(svc.steps(sid))
        # Live steps arrive and are drawn (no reload): ten more than when the page opened.
        expect(pg.locator(f"[data-testid=step][data-iteration='{first + 9}']")).to_be_attached(timeout=60_000)
        once = [f"/api/sessions/{sid}", f"/api/sessions/{sid}/turns?limit=1000", f"/api/sessions/{sid}/children",
                f"/api/actions?session_id={sid}&limit=500"]
        counts = {url: sent.count(url) for url in once}
        assert all(1 <= n <= reads for n in counts.values()), f"reads {counts} (at most {reads} each); all: {sent}"
    finally:
        context.close()
        svc.control(made["agent_id"], "destroy")


def test_every_page_loads_only_from_the_app_itself(browser, shared_service, pages):
    """No CDN, font host or validator: every request a page makes (scripts,
    styles, images, fonts, XHR, the socket) goes to the app's own origin, so the
    dashboard works offline and no third party learns who looks at it."""
    expect = playwright_api.expect
    context = browser.new_context(viewport={"width": 1400, "height": 800})
    elsewhere = []
    context.on("request", lambda r: r.url.startswith(("data:", "blob:", shared_service.url))
               or elsewhere.append(r.url))
    try:
        pg = context.new_page()
        for name, (path, ready) in {**pages, "login": ("/login", "form")}.items():
            pg.goto(shared_service.url + path)
            expect(pg.locator(ready).first).to_be_visible(timeout=30_000)
            pg.wait_for_load_state("networkidle", timeout=60_000)
        assert pages and elsewhere == [], elsewhere
        # The positive control: the same listener does see a page reaching out.
        pg.set_content('<img src="https://cdn.example.invalid/x.png">')
        wait_for(lambda: elsewhere, timeout=30, what="the control's request to be seen")
    finally:
        context.close()
