"""An optional API token for the routes that change things.

When the app is started with a token (``--api-token`` / AGENTSVC_API_TOKEN),
every POST under /api must carry ``Authorization: Bearer <token>``; reads stay
open so a dashboard can watch.  The comparison is constant-time.  Without a
token nothing is checked (the service binds to 127.0.0.1 by default).
"""
import hmac

from flask import Flask, request

from api.errors import error_response

PROTECTED_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def install(app: Flask, token: str | None) -> None:
    if not token:
        return
    expected = f"Bearer {token}".encode()

    @app.before_request
    def _require_token():
        if request.method not in PROTECTED_METHODS or not request.path.startswith("/api/"):
            return None
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return error_response(401, "unauthorized", "this route needs 'Authorization: Bearer <API token>'")
        return None
