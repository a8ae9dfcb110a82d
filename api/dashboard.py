"""The dashboard at ``/``: one page (web/templates) and its static files
(web/static: the page and component modules under js/, the vendored libraries
under vendor/), and the API reference at ``/api/docs``, all served by the app
itself so that a browser never fetches anything from another host."""
import os

from flask import Blueprint, render_template

WEB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "web")

bp = Blueprint("dashboard", __name__, template_folder=os.path.join(WEB, "templates"),
               static_folder=os.path.join(WEB, "static"), static_url_path="/assets")


@bp.get("/")
def index():
    return render_template("index.html")


@bp.get("/api/docs")
def api_docs():
    """The OpenAPI document (/api/openapi.json) drawn by the vendored Swagger UI."""
    return render_template("api_docs.html")
