"""Who is asking, and may they: every request but a few open ones needs a
token when the service has any (domain/tokens.py), and the token's role bounds
what it may do.

A request presents its token as ``Authorization: Bearer <token>`` (the CLI,
scripts, other services), or carries the dashboard's login cookie: ``/login``
takes a token once and answers with a session cookie (HttpOnly, SameSite=Strict,
signed with a key kept in the data directory) that names the token's hash, so
revoking the token ends every login made with it.  The Socket.IO connection
is checked the same way (api/live.py calls :func:`principal_of_socket`), and
may also give the token as ``auth: {"token": …}``.

Open without a token: ``/api/health`` (which says nothing about agents),
``/readyz``, the login page, and the dashboard's static files.  The dashboard's
pages redirect to the login page; everything else answers 401.

The role a route needs is declared with the route (api/openapi.py
``operation(role=…)``); otherwise a read needs ``viewer`` and a write
``operator``.  The principal of a request is ``flask.g.principal`` (None when
the service has no tokens): api/sessions.py records its name as the actor of
each action the request queues.

Without any token nothing is checked; app.py then refuses to bind to anything
but loopback (settings.py ``require_token_off_loopback``).
"""
from __future__ import annotations

import logging
import os
import secrets
from datetime import timedelta
from urllib.parse import urlsplit

from flask import Flask, g, redirect, render_template, request, session, url_for

from api.errors import ApiError, error_response
from domain.tokens import ROLES, Principal, TokenRing

log = logging.getLogger("api.auth")

EXTENSION = "agentsvc_tokens"  # app.extensions key of the app's TokenRing
OPEN_PATHS = frozenset({"/api/health", "/readyz", "/login", "/logout", "/favicon.ico"})
OPEN_PREFIXES = ("/assets/",)
PAGES = frozenset({"/", "/api/docs"})  # HTML: a missing login redirects instead of answering 401
COOKIE_LIFETIME = timedelta(days=7)  # from the login: a read does not extend it
SESSION_KEY_FILE = "session.key"
SESSION_KEY_ENV = "AGENTSVC_SESSION_KEY"


def install(app: Flask, ring: TokenRing, data_dir: str | None) -> None:
    app.extensions[EXTENSION] = ring
    # Only a login or a logout sets the cookie.  Refreshed on every request (Flask's
    # default for a permanent session), a read the page sent before a logout and
    # answered after it set the cookie again: the logout was undone.
    app.config.update(SESSION_COOKIE_NAME="agentsvc_session", SESSION_COOKIE_HTTPONLY=True,
                      SESSION_COOKIE_SAMESITE="Strict", PERMANENT_SESSION_LIFETIME=COOKIE_LIFETIME,
                      SESSION_REFRESH_EACH_REQUEST=False)
    app.secret_key = session_key(data_dir) if data_dir else secrets.token_bytes(32)

    @app.before_request
    def _authenticate():
        g.principal = None
        if not ring.enabled:
            return None
        g.principal = principal_of_request(ring)
        path = request.path
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return None
        if g.principal is None:
            if request.method == "GET" and path in PAGES:
                return redirect(url_for("login.login_page", next=request.full_path.rstrip("?")))
            response, status = error_response(401, "unauthorized",
                                              "this service needs a token: 'Authorization: Bearer <token>' "
                                              "(or log in at /login)")
            response.headers["WWW-Authenticate"] = 'Bearer realm="agentsvc"'
            return response, status
        needed = required_role()
        if not g.principal.may(needed):
            return error_response(403, "forbidden", f"{request.method} {path} needs the {needed} role; "
                                                    f"token {g.principal.name!r} is {g.principal.role}")
        return None


def principal_of_request(ring: TokenRing) -> Principal | None:
    """The bearer token's principal, else the login cookie's."""
    header = request.headers.get("Authorization", "")
    if header:
        scheme, _, token = header.partition(" ")
        return ring.identify(token.strip()) if scheme.lower() == "bearer" else None
    return principal_of_cookie(ring)


def principal_of_cookie(ring: TokenRing) -> Principal | None:
    hashed = session.get("token_sha256")
    return ring.by_digest(hashed) if isinstance(hashed, str) else None


def principal_of_socket(ring: TokenRing, auth) -> Principal | None:
    """Who a Socket.IO connection is: ``auth.token``, a bearer header, or the login cookie."""
    token = auth.get("token") if isinstance(auth, dict) else None
    if isinstance(token, str):
        return ring.identify(token)
    return principal_of_request(ring)


def required_role(endpoint: str | None = None) -> str:
    """The role the current request's route declares, else viewer for reads, operator for writes."""
    from flask import current_app
    view = current_app.view_functions.get(endpoint or request.endpoint or "")
    declared = getattr(getattr(view, "declaration", None), "role", None)
    if declared:
        return declared
    return "viewer" if request.method in ("GET", "HEAD", "OPTIONS") else "operator"


def require(role: str) -> None:
    """Inside a route: refuse the request unless its principal has ``role``
    (for a role that depends on the body, e.g. a bulk destroy)."""
    assert role in ROLES
    principal = g.get("principal")
    if principal is not None and not principal.may(role):
        raise ApiError(403, "forbidden", f"this request needs the {role} role; token {principal.name!r} is "
                                         f"{principal.role}")


def actor() -> str | None:
    """The name recorded as who asked: the request's token name (None without tokens)."""
    principal = g.get("principal")
    return principal.name if principal is not None else None


def session_key(data_dir: str) -> bytes:
    """The key that signs login cookies: the environment's, else the data
    directory's key file (made on first use, mode 0600), so that every app.py
    on one data directory accepts the others' cookies."""
    if os.environ.get(SESSION_KEY_ENV):
        return os.environ[SESSION_KEY_ENV].encode()
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, SESSION_KEY_FILE)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        with open(path, "rb") as f:
            key = f.read().strip()
        if key:
            return key
        raise RuntimeError(f"{path} is empty; delete it or set {SESSION_KEY_ENV}") from None
    key = secrets.token_urlsafe(48).encode()
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def safe_next(target: str | None) -> str:
    """Where a login sends the browser: a path of this site only (never ``//host`` or a URL)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    parts = urlsplit(target)
    return target if not parts.scheme and not parts.netloc else "/"


def ring_of(app: Flask) -> TokenRing:
    return app.extensions[EXTENSION]


def render_login(error: str | None = None, status: int = 200):
    return render_template("login.html", error=error, next=safe_next(request.values.get("next"))), status
