"""The dashboard of a service with tokens: a page without a login goes to the
login page; a token logs in (an HttpOnly cookie, so no script ever holds the
token) and brings the page back; live events and controls work with the
cookie alone; the top bar names the token; Log out ends it."""
import re

import pytest

from domain.tokens import entry_text, new_token
from tests.browsing import scan
from tests.harness import Service, wait_for
from tests.plugins import COUNT_DIR_ENV


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    made = {role: new_token() for role in ("viewer", "operator")}
    path = tmp_path_factory.mktemp("tokens") / "tokens.toml"
    path.write_text("".join(entry_text(f"{role}-ann", role, token) for role, token in made.items()))
    return made, path


@pytest.fixture(scope="module")
def shared_service(tmp_path_factory, tokens):
    root = tmp_path_factory.mktemp("login")
    (root / "logs").mkdir()
    (root / "counts").mkdir()
    svc = Service(str(root / "data"), str(root / "logs"), env={COUNT_DIR_ENV: str(root / "counts")},
                  app_args=["--tokens-file", str(tokens[1])])
    svc.http.headers["Authorization"] = f"Bearer {tokens[0]['operator']}"
    yield svc.start()
    svc.stop()


def log_in(pg, token):
    pg.get_by_test_id("login-token").fill(token)
    pg.get_by_test_id("login-submit").click()


def test_a_token_logs_in_and_the_page_works_with_its_cookie(page, shared_service, tokens):
    made, _ = tokens
    svc = shared_service
    agent = svc.create("countdown", config={"n": 100000, "interval_s": 0.5})
    page.goto(f"{svc.url}/#/session/{agent['session_id']}")
    page.wait_for_url("**/login?next=**")  # no login: the login page, remembering where the user was going
    assert scan(page) == []
    log_in(page, "agt_not-a-token")
    assert page.get_by_test_id("login-error").is_visible()
    log_in(page, made["operator"])
    page.wait_for_url(f"**/#/session/{agent['session_id']}")
    assert page.get_by_test_id("who").inner_text() == "operator-ann (operator)"
    cookies = page.context.cookies()
    assert [c["httpOnly"] for c in cookies if c["name"] == "agentsvc_session"] == [True]
    assert made["operator"] not in page.evaluate("document.cookie + JSON.stringify(localStorage)")
    # live over the cookie: the badge says live and steps arrive
    wait_for(lambda: page.get_by_test_id("live-indicator").inner_text() == "live", timeout=60,
             what="the live connection")
    first = page.locator("[data-testid=step]").count()
    wait_for(lambda: page.locator("[data-testid=step]").count() > first, timeout=60, what="live steps")
    # a control from the page, recorded as this token's
    page.get_by_role("button", name="Pause").first.click()
    wait_for(lambda: svc.session(agent["session_id"])["status"] == "paused", timeout=60, what="the pause")
    actions = svc.get("/api/actions", session_id=agent["session_id"], type="pause").json()["actions"]
    assert [a["actor"] for a in actions] == ["operator-ann"]
    page.get_by_test_id("logout").locator("button").click()
    page.wait_for_url("**/login")
    page.goto(svc.url + "/")
    page.wait_for_url("**/login?next=**")


def test_a_read_answered_401_while_logging_out_does_not_cancel_the_logout(page, shared_service, tokens):
    """Logging out clears the cookie with the logout's answer, before the login
    page has loaded; a read of the old page answered 401 in that gap used to
    send the browser to ``/login?next=…``, cancelling the logout's own way to
    ``/login`` (the whole run under load: wait_for_url("**/login") timed out).
    Here the logout's request is held while the old page's read is refused
    (Playwright cannot hold the redirect to /login itself)."""
    made, _ = tokens
    svc = shared_service
    page.goto(f"{svc.url}/#/sessions")
    page.wait_for_url("**/login?next=**")
    log_in(page, made["operator"])
    page.wait_for_url("**/#/sessions")
    page.get_by_test_id("logout").wait_for()
    held = []

    def hold(route):
        held.append(route)

    page.route("**/logout", hold)
    # While the logout's navigation is pending Playwright cannot evaluate in the
    # page, so the page reads on its own, every 0.5 s until a read is refused.
    page.evaluate("""() => {
        document.querySelector('[data-testid=logout]').requestSubmit();
        const tick = setInterval(() => import('/assets/js/core/api.js').then(m => m.get('/api/whoami'))
            .catch(e => { if (e.status === 401) clearInterval(tick); }), 500);
    }""")
    with page.expect_response(lambda r: r.url.endswith("/api/whoami") and r.status == 401, timeout=60_000):
        wait_for(lambda: page.wait_for_timeout(50) or held, timeout=30, what="the held logout")
        # as after the logout's answer, before the login page has loaded
        page.route("**/api/whoami", lambda route: route.fulfill(status=401, json={"error": {
            "code": "unauthorized", "message": "log in first"}}))
    page.wait_for_timeout(500)  # a navigation the old page started, if any, goes ahead here
    page.unroute("**/logout", hold)
    wait_for(lambda: held, timeout=30, what="the held logout")
    try:
        held[0].continue_()
    except Exception:  # cancelled by the old page's own navigation: the bug
        pass
    page.wait_for_url(re.compile(r".*/login(\?.*)?$"))
    page.wait_for_load_state()
    assert page.url == f"{svc.url}/login", page.url


def test_a_viewer_reads_but_its_controls_are_refused(page, shared_service, tokens):
    made, _ = tokens
    svc = shared_service
    agent = svc.create("countdown", config={"n": 100000, "interval_s": 0.5})
    page.goto(f"{svc.url}/login?next=/%23/session/{agent['session_id']}")
    log_in(page, made["viewer"])
    page.wait_for_url(f"**/#/session/{agent['session_id']}")
    page.get_by_role("button", name="Pause").first.click()
    wait_for(lambda: "operator role" in page.locator("#toasts").inner_text(), timeout=90,
             what="the refusal shown to the user")
    assert svc.session(agent["session_id"])["status"] == "running"
