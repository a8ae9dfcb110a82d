"""Who may use the API (api/auth.py, domain/tokens.py), from where (api/guard.py),
and retries that queue nothing twice (api/idempotency.py), checked in process
against the app itself.  tests/service/test_security.py probes the same from
outside, against the real processes."""
import os
import time

import pytest

from api.guard import SitePolicy
from domain.tokens import entry_text, new_token
from app import create_app
from store import Store
from tests.harness import wait_for

ADMIN = "admin-token-for-tests"


@pytest.fixture
def tokens(tmp_path):
    """A tokens file with one token of each role; {role: token} and the file's path."""
    made = {role: new_token() for role in ("viewer", "operator", "admin")}
    path = tmp_path / "tokens.toml"
    path.write_text("".join(entry_text(f"{role}-ann", role, token) for role, token in made.items()))
    return made, path


@pytest.fixture
def app(tmp_path, tokens):
    _, path = tokens
    return create_app(Store(str(tmp_path / "db")), api_token=ADMIN, tokens_file=str(path),
                      data_dir=str(tmp_path / "data"))


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def test_every_read_needs_a_token_but_health_and_the_login_page(app):
    client = app.test_client()
    for path in ("/api/agents", "/api/actions", "/api/search?q=x", "/api/stream?rooms=all", "/metrics",
                 "/api/tools", "/api/monikers", "/api/openapi.json", "/api/waiting", "/api/profiles",
                 "/api/sessions/01M8H63YMD7CRNXDY3K7ZRTVYK/export"):
        r = client.get(path)
        assert r.status_code == 401 and r.json["error"]["code"] == "unauthorized", path
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/api/health").status_code == 200
    assert client.get("/login").status_code == 200
    assert client.get("/assets/dashboard.css").status_code == 200
    page = client.get("/")
    assert page.status_code == 302 and page.headers["Location"].startswith("/login?next=/")
    # positive control: the same reads with the token
    assert client.get("/api/agents", headers=bearer(ADMIN)).status_code == 200
    assert client.get("/metrics", headers=bearer(ADMIN)).status_code == 200
    assert client.get("/api/sessions/01M8H63YMD7CRNXDY3K7ZRTVYK/export", headers=bearer(ADMIN)).status_code == 404


def test_roles_bound_what_a_token_may_do(app, tokens):
    made, _ = tokens
    client = app.test_client()
    create = {"moniker": "countdown", "session_id": "s-roles"}
    assert client.get("/api/agents", headers=bearer(made["viewer"])).status_code == 200
    r = client.post("/api/agents", json=create, headers=bearer(made["viewer"]))
    assert r.status_code == 403 and "operator" in r.json["error"]["message"]
    assert client.post("/api/agents", json=create, headers=bearer(made["operator"])).status_code == 202
    admin_only = [("/api/profiles/reload", {}),
                  ("/api/agents/bulk", {"action": "destroy", "filter": {"status": "running"}}),
                  ("/api/agents/bulk", {"action": "resume", "filter": {"status": "paused"}})]
    for path, body in admin_only:
        r = client.post(path, json=body, headers=bearer(made["operator"]))
        assert r.status_code == 403 and "admin" in r.json["error"]["message"], path
        assert client.post(path, json=body, headers=bearer(made["admin"])).status_code in (200, 202), path
    # an operator may still pause many, and preview a destroy
    assert client.post("/api/agents/bulk", json={"action": "pause", "filter": {"status": "running"}},
                       headers=bearer(made["operator"])).status_code == 202
    assert client.post("/api/agents/bulk", json={"action": "destroy", "filter": {}, "dry_run": True},
                       headers=bearer(made["operator"])).status_code == 200
    assert client.get("/api/whoami", headers=bearer(made["operator"])).json == {
        "auth": True, "name": "operator-ann", "role": "operator"}


def test_every_action_records_who_asked(app, tokens):
    made, _ = tokens
    client = app.test_client()
    r = client.post("/api/agents", json={"moniker": "countdown"}, headers=bearer(made["operator"]))
    action = client.get(f"/api/actions/{r.json['action_id']}", headers=bearer(made["viewer"])).json
    assert action["actor"] == "operator-ann"
    r = client.post(f"/api/agents/{r.json['agent_id']}/pause", json={}, headers=bearer(ADMIN))
    listed = client.get("/api/actions", headers=bearer(ADMIN)).json["actions"]
    assert {a["id"]: a["actor"] for a in listed}[r.json["action_id"]] == "admin"


def test_the_tokens_file_is_read_again_when_it_changes(app, tokens):
    made, path = tokens
    client = app.test_client()
    late = new_token()
    assert client.get("/api/agents", headers=bearer(late)).status_code == 401
    path.write_text(entry_text("late", "viewer", late))  # the others are revoked by the same edit
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    wait_for(lambda: client.get("/api/agents", headers=bearer(late)).status_code == 200, timeout=90,
             what="the new token to be accepted")
    assert client.get("/api/agents", headers=bearer(made["admin"])).status_code == 401
    path.write_text("[[token]]\nname = 'broken'\n")  # a file that stops parsing keeps the last good set
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2_000_000))
    time.sleep(1.2)
    assert client.get("/api/agents", headers=bearer(late)).status_code == 200


def test_login_sets_an_httponly_strict_cookie_that_ends_with_its_token(app, tokens):
    made, path = tokens
    client = app.test_client()
    wrong = client.post("/login", data={"token": "nope", "next": "/"})
    assert wrong.status_code == 401 and b"not valid" in wrong.data
    r = client.post("/login", data={"token": made["viewer"], "next": "//evil.example/x"})
    assert r.status_code == 303 and r.headers["Location"] == "/"  # never sent off-site
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and made["viewer"] not in cookie
    assert client.get("/api/agents").status_code == 200
    assert client.get("/").status_code == 200
    assert client.post("/api/agents", json={"moniker": "countdown"}).status_code == 403  # a viewer's login
    path.write_text(entry_text("operator-ann", "operator", made["operator"]))  # revoke the viewer
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    wait_for(lambda: client.get("/api/agents").status_code == 401, timeout=90, what="the revoked login to end")
    client.post("/login", data={"token": made["operator"]})
    assert client.get("/api/agents").status_code == 200
    client.post("/logout")
    assert client.get("/api/agents").status_code == 401


def test_a_read_in_flight_during_logout_does_not_log_back_in(app, tokens):
    """A read the page sent before the logout, answered after it, carried the
    login cookie; with the session refreshed on every request its answer set
    the cookie again and undid the logout (a whole run under load: after
    logging out, ``/`` showed the dashboard instead of the login page).  Only a
    login or a logout sets the cookie; a login lasts COOKIE_LIFETIME from the login."""
    made, _ = tokens
    client = app.test_client()
    client.post("/login", data={"token": made["operator"], "next": "/"})
    login_cookie = client.get_cookie("agentsvc_session").value
    late_read = client.get("/api/agents")  # sent with the login cookie, as the page's reads are
    assert late_read.status_code == 200
    assert "Set-Cookie" not in late_read.headers, "a read refreshed the login cookie"
    assert client.get("/").status_code == 200
    client.post("/logout")
    assert client.get_cookie("agentsvc_session") is None
    # the read still on its way when the logout was answered: sent with the old cookie
    stray = app.test_client()
    stray.set_cookie("agentsvc_session", login_cookie)
    answered = stray.get("/api/agents")
    assert "Set-Cookie" not in answered.headers, "the stray read's answer would log the browser back in"
    assert client.get("/api/agents").status_code == 401 and client.get("/").status_code == 302


def test_pages_of_other_sites_cannot_drive_the_service(tmp_path):
    """No token here: the guard alone stands between a web page and the API."""
    client = create_app(Store(str(tmp_path / "db")),
                        site=SitePolicy("127.0.0.1", allowed_origins=["https://ops.example"])).test_client()
    create = '{"moniker": "countdown"}'
    r = client.post("/api/agents", data=create, content_type="text/plain")
    assert r.status_code == 415
    r = client.post("/api/agents", data="moniker=countdown", content_type="application/x-www-form-urlencoded")
    assert r.status_code == 415
    r = client.post("/api/agents", data=create, content_type="application/json",
                    headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and r.json["error"]["code"] == "origin_not_allowed"
    r = client.post("/api/agents", data=create, content_type="application/json", headers={"Origin": "null"})
    assert r.status_code == 403
    r = client.get("/api/agents", headers={"Host": "rebind.evil.example"})
    assert r.status_code == 400 and r.json["error"]["code"] == "host_not_allowed"
    r = client.get("/socket.io/?EIO=4&transport=polling", headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    # positive controls: the page's own origin, a listed origin, a client that sends none
    for origin in ("http://localhost", "https://ops.example", None):
        headers = {"Origin": origin} if origin else {}
        r = client.post("/api/agents", data=create, content_type="application/json", headers=headers)
        assert r.status_code == 202, origin
    assert client.post("/api/agents/x/pause").status_code == 404  # a POST without a body needs no type


def test_deep_or_huge_bodies_are_refused_not_a_500(tmp_path):
    client = create_app(Store(str(tmp_path / "db"))).test_client()
    deep = "[" * 10_000 + "]" * 10_000
    r = client.post("/api/agents", data=deep, content_type="application/json")
    assert r.status_code == 400
    nested = '{"moniker": "countdown", "config": ' + '{"a": ' * 40 + "1" + "}" * 40 + "}"
    r = client.post("/api/agents", data=nested, content_type="application/json")
    assert r.status_code == 400 and r.json["error"]["code"] == "too_deep"
    r = client.post("/api/agents", data="x" * (2 << 20), content_type="application/json")
    assert r.status_code == 413


def test_a_retry_with_the_same_idempotency_key_queues_nothing_new(app, tokens):
    made, _ = tokens
    client = app.test_client()
    op = {**bearer(made["operator"]), "Idempotency-Key": "create-1"}
    first = client.post("/api/agents", json={"moniker": "countdown"}, headers=op)
    again = client.post("/api/agents", json={"moniker": "countdown"}, headers=op)
    assert first.status_code == again.status_code == 202
    assert again.json == first.json and again.headers["Idempotent-Replayed"] == "true"
    agent = first.json["agent_id"]
    actions = client.get(f"/api/actions?agent_id={agent}", headers=op).json["actions"]
    assert len(actions) == 1
    # the same key with another body is refused; another token's same key is its own
    other = client.post("/api/agents", json={"moniker": "countdown", "task": "x"}, headers=op)
    assert other.status_code == 422 and other.json["error"]["code"] == "idempotency_key_reused"
    mine = client.post("/api/agents", json={"moniker": "countdown"},
                       headers={**bearer(ADMIN), "Idempotency-Key": "create-1"})
    assert mine.status_code == 202 and mine.json["agent_id"] != agent
    # a control: one pause for any number of retries
    for _ in range(3):
        r = client.post(f"/api/agents/{agent}/pause", json={}, headers={**op, "Idempotency-Key": "pause-1"})
        assert r.status_code == 202
    pauses = client.get(f"/api/actions?agent_id={agent}&type=pause", headers=op).json["actions"]
    assert len(pauses) == 1
    bad = client.post(f"/api/agents/{agent}/pause", json={}, headers={**op, "Idempotency-Key": "sp ace"})
    assert bad.status_code == 400


def test_a_message_retried_with_its_key_is_posted_and_delivered_once(app):
    client = app.test_client()
    h = bearer(ADMIN)
    conv = client.post("/api/conversations", json={"title": "t"}, headers=h).json["conversation_id"]
    client.post("/api/agents", json={"moniker": "countdown", "conversation_id": conv, "session_id": "s-conv"},
                headers=h)
    keyed = {**h, "Idempotency-Key": "msg-1"}
    first = client.post(f"/api/conversations/{conv}/messages", json={"text": "hello"}, headers=keyed)
    again = client.post(f"/api/conversations/{conv}/messages", json={"text": "hello"}, headers=keyed)
    assert first.status_code == again.status_code == 201 and first.json == again.json
    assert len(first.json["deliveries"]) == 1
    messages = client.get(f"/api/conversations/{conv}/messages", headers=h).json["messages"]
    assert [m["text"] for m in messages] == ["hello"]
    interrupts = client.get("/api/actions?session_id=s-conv&type=interrupt", headers=h).json["actions"]
    assert len(interrupts) == 1


def test_the_login_page_loads_only_the_apps_own_files(app):
    """/login (another blueprint than the dashboard's) carries the same
    Content-Security-Policy: without it, nothing stopped the page loading from a CDN."""
    from api.routes.dashboard import CONTENT_SECURITY_POLICY
    for r in (app.test_client().get("/login"), app.test_client().post("/login", data={"token": "nope"})):
        assert r.mimetype == "text/html" and r.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "Content-Security-Policy" not in app.test_client().get("/api/health").headers  # JSON: not a page
