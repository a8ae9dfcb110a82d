"""The dashboard's login: ``/login`` takes a token and sets the login cookie,
``/logout`` clears it, ``GET /api/whoami`` says who a request is (the
dashboard shows it, and hides what the role may not do).

The login form posts a token, not JSON: it is a page of this site (the Origin
check in api/guard.py applies to it like to any POST), and a token that is
wrong answers 401 with the form again.  The cookie holds the token's SHA-256,
signed; it never holds the token.
"""
import logging

from flask import Blueprint, g, jsonify, redirect, request, session, current_app

from api import schemas
from api.auth import render_login, ring_of, safe_next
from api.openapi import operation

log = logging.getLogger("api.login")

bp = Blueprint("login", __name__)


@bp.get("/login")
def login_page():
    if not ring_of(current_app).enabled:
        return redirect(safe_next(request.args.get("next")))
    return render_login()


@bp.post("/login")
def login():
    ring = ring_of(current_app)
    token = (request.form.get("token") or "").strip()
    principal = ring.identify(token) if ring.enabled else None
    if principal is None:
        log.warning("login refused from %s", request.remote_addr)
        return render_login("That token is not valid here.", 401)
    session.clear()
    session.permanent = True
    session["token_sha256"] = principal.digest
    log.info("login token=%s role=%s from %s", principal.name, principal.role, request.remote_addr)
    return redirect(safe_next(request.form.get("next")), code=303)


@bp.post("/logout")
def logout():
    session.clear()
    return redirect("/login", code=303)


@bp.get("/api/whoami")
@operation(200, schemas.WhoAmI)
def whoami():
    """who this request is: the token's name and role (auth false when the service has no tokens)"""
    principal = g.get("principal")
    if principal is None:
        return jsonify({"auth": False, "name": None, "role": "admin"})
    return jsonify({"auth": True, "name": principal.name, "role": principal.role})
