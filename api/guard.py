"""Refusing what a web page of another site makes a browser send.

A service on 127.0.0.1 is still reachable from any page its operator opens:
the page can POST to it (a form or a ``no-cors`` fetch needs no permission),
and a DNS-rebinding page can even read from it, by making its own host name
resolve to 127.0.0.1.  Three checks close that, before any route runs (a WSGI
middleware in front of the app *and* of Socket.IO, so the live events are
covered too):

- **Host**: the ``Host`` header must name an allowed host (default: the bind
  address, ``localhost``, ``127.0.0.1``, ``::1``; more with ``--allowed-hosts``).
  A rebinding page's requests carry its own name, so they stop here (400).
- **Origin**: a request that changes something (any method but GET, HEAD,
  OPTIONS) and every Socket.IO request must, when it carries an ``Origin``,
  come from the service's own origin (``scheme://Host``) or one listed with
  ``--allowed-origins``; otherwise 403.  Browsers send ``Origin`` on every
  cross-site POST and WebSocket; clients that are not browsers (curl, the CLI)
  send none and are judged by their token alone.
- **JSON only**: a POST under ``/api`` with a body must say
  ``Content-Type: application/json`` (415 otherwise): a form or a ``text/plain``
  fetch, the only bodies a page may send cross-site without asking, never
  reaches a route.

The API token (api/auth.py) still decides who may do what; these checks
decide that a browser is not being used against its own user.
"""
from __future__ import annotations

import json
import logging
from urllib.parse import urlsplit

log = logging.getLogger("api.guard")

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
SOCKETIO_PATH = "/socket.io"


def host_name(host_header: str) -> str:
    """The host part of a Host header or an origin's netloc, lower case, without port or brackets."""
    host = host_header.strip().lower()
    if host.startswith("["):  # [::1]:8765
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class SitePolicy:
    """Which Host headers and origins this service answers to."""

    def __init__(self, bind_host: str, allowed_hosts=(), allowed_origins=()):
        hosts = {*LOCAL_HOSTS, *(h.strip().lower() for h in allowed_hosts if h.strip())}
        if bind_host not in ("", "0.0.0.0", "::"):
            hosts.add(host_name(bind_host))
        self.any_host = "*" in hosts
        self.hosts = frozenset(hosts - {"*"})
        self.origins = frozenset(o.strip().rstrip("/").lower() for o in allowed_origins if o.strip())

    def host_allowed(self, host_header: str | None) -> bool:
        return bool(host_header) and (self.any_host or host_name(host_header) in self.hosts)

    def origin_allowed(self, origin: str | None, environ: dict) -> bool:
        """No Origin (not a browser) is allowed; otherwise the service's own, or a listed one."""
        if origin is None:
            return True
        origin = origin.strip().rstrip("/").lower()
        if origin in self.origins:
            return True
        own = f"{environ.get('wsgi.url_scheme', 'http')}://{environ.get('HTTP_HOST', '')}".lower()
        return origin == own and self.host_allowed(urlsplit(origin).netloc)

    def socketio_origin(self, origin, environ=None) -> bool:
        """python-engineio's ``cors_allowed_origins`` callable: the same rule as for POSTs."""
        return self.origin_allowed(origin, environ or {})


class SiteGuard:
    """WSGI middleware applying :class:`SitePolicy` to every request."""

    def __init__(self, wsgi_app, policy: SitePolicy):
        self.wsgi_app = wsgi_app
        self.policy = policy

    def __call__(self, environ, start_response):
        refusal = self.refusal(environ)
        if refusal is None:
            return self.wsgi_app(environ, start_response)
        status, code, message = refusal
        log.warning("refused %s %s from %s: %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"),
                    environ.get("REMOTE_ADDR"), message)
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def refusal(self, environ) -> tuple[str, str, str] | None:
        host = environ.get("HTTP_HOST")
        if not self.policy.host_allowed(host):
            return ("400 Bad Request", "host_not_allowed",
                    "this service does not answer to that Host (the operator lists names with --allowed-hosts)")
        method = environ.get("REQUEST_METHOD", "GET").upper()
        path = environ.get("PATH_INFO", "")
        origin = environ.get("HTTP_ORIGIN")
        if (method not in SAFE_METHODS or path.startswith(SOCKETIO_PATH)) \
                and not self.policy.origin_allowed(origin, environ):
            return ("403 Forbidden", "origin_not_allowed",
                    "requests from another site's page are refused (the operator lists origins with "
                    "--allowed-origins)")
        if method == "POST" and path.startswith("/api/") and _has_body(environ) and not _is_json(environ):
            return ("415 Unsupported Media Type", "unsupported_media_type",
                    "a request body must be JSON, sent with 'Content-Type: application/json'")
        return None


def _has_body(environ) -> bool:
    length = environ.get("CONTENT_LENGTH")
    if length not in (None, "", "0"):
        return True
    return "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()


def _is_json(environ) -> bool:
    mimetype = environ.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower()
    return mimetype == "application/json" or (mimetype.startswith("application/") and mimetype.endswith("+json"))
