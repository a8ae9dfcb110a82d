"""The dashboard at ``/``: one page (web/templates) and its static files
(web/static: the page and component modules under js/, the vendored libraries
under vendor/), the API reference at ``/api/docs`` and an empty ``/favicon.ico``,
all served by the app itself so that a browser never fetches anything from
another host."""
from flask import Blueprint, render_template, request

import web

# What the browser may load and run on these pages: only the app's own files, so
# the browser itself refuses anything from another host, and any inline script
# or style (the pages have none: an injected one would not run).  Images may be
# data: URLs (Swagger UI's stylesheet draws its icons with them).
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "img-src 'self' data:",
    "style-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])

# The files ship inside the ``web`` package (web/__init__.py), so a wheel installs them too.
bp = Blueprint("dashboard", __name__, template_folder=web.TEMPLATES, static_folder=web.STATIC,
               static_url_path="/assets")


@bp.after_app_request
def _secure(response):
    """Every page of the app (the dashboard, the API reference, /login: any
    HTML answer) and the dashboard's own files carry the policy; a page served
    by another blueprint once had none, so nothing stopped it loading from a CDN."""
    if request.blueprint != bp.name and response.mimetype != "text/html":
        return response
    response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


@bp.get("/")
def index():
    return render_template("index.html")


@bp.get("/api/docs")
def api_docs():
    """The OpenAPI document (/api/openapi.json) drawn by the vendored Swagger UI."""
    return render_template("api_docs.html")


@bp.get("/favicon.ico")
def favicon():
    """No icon, and no error: the dashboard's pages declare a ``data:`` icon, but a
    browser opening a page that is not HTML (``/metrics``, the JSON endpoints)
    asks for this one, and a 404 would show in its console."""
    return "", 204
