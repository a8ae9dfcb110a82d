"""agents.py's own HTTP endpoints for supervisors and load balancers:
``/healthz`` (alive), ``/readyz`` (working), ``/metrics`` (Prometheus).

- ``/healthz``: 200 while the event loop answers within ``loop_timeout_s``; a
  wedged loop (a blocking call, a deadlock) gets 503, so a supervisor restarts it.
- ``/readyz``: 200 once the worker has adopted its sessions and polls the queue,
  and its own heartbeat row in the database is fresh (the database is reachable
  and the heartbeat chore runs); 503 with the reason otherwise, and from the
  moment a SIGTERM starts the graceful stop.

The server runs in a thread of its own (http.server), bound to 127.0.0.1 by
default, and reads the service only through the event loop or the store.
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from store.codec import parse_time

if TYPE_CHECKING:
    from runtime.worker.service import AgentService
    from store import Store

log = logging.getLogger("runtime.health")


class HealthServer:
    def __init__(self, service: AgentService, store: Store, loop: asyncio.AbstractEventLoop, *,
                 host: str = "127.0.0.1", port: int = 0, registry: CollectorRegistry | None = None,
                 loop_timeout_s: float = 5.0, stale_after_s: float | None = None):
        self.service, self.store, self.loop = service, store, loop
        self.registry = registry
        self.loop_timeout_s = loop_timeout_s
        self.stale_after_s = stale_after_s or max(3 * service.heartbeat_s, 10.0)
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="health-http", daemon=True)

    def start(self) -> "HealthServer":
        self._thread.start()
        log.info("health endpoints on http://%s:%d/healthz, /readyz, /metrics", *self.httpd.server_address[:2])
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- checks ---------------------------------------------------------

    def loop_alive(self) -> bool:
        async def ping():
            return True
        try:
            return asyncio.run_coroutine_threadsafe(ping(), self.loop).result(timeout=self.loop_timeout_s)
        except Exception:
            return False

    def liveness(self) -> tuple[int, dict]:
        if not self.loop_alive():
            return 503, {"status": "unhealthy", "reason": f"event loop did not answer in {self.loop_timeout_s}s"}
        return 200, {"status": "ok", "worker_id": self.service.worker_id}

    def readiness(self) -> tuple[int, dict]:
        body = {"worker_id": self.service.worker_id, "sessions": len(self.service.sessions)}
        if not self.service.ready:
            return 503, {**body, "status": "not_ready", "reason": "starting or stopping"}
        if not self.loop_alive():
            return 503, {**body, "status": "not_ready", "reason": "event loop not answering"}
        try:
            rows = {w["worker_id"]: w for w in self.store.workers.all()}
        except Exception as exc:
            return 503, {**body, "status": "not_ready", "reason": f"database unreachable: {type(exc).__name__}"}
        beat = (rows.get(self.service.worker_id) or {}).get("heartbeat_at")
        age = None if not beat else (datetime.now(timezone.utc)
                                     - parse_time(beat)).total_seconds()
        body["heartbeat_age_s"] = None if age is None else round(age, 3)
        if age is None or age > self.stale_after_s:
            return 503, {**body, "status": "not_ready", "reason": "heartbeat missing or stale"}
        return 200, {**body, "status": "ready"}

    # ---- HTTP -----------------------------------------------------------

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    self._json(*server.liveness())
                elif path == "/readyz":
                    self._json(*server.readiness())
                elif path == "/metrics" and server.registry is not None:
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(server.registry))
                else:
                    self._json(404, {"error": {"code": "not_found", "message": "try /healthz, /readyz, /metrics"}})

            def _json(self, status: int, body: dict):
                self._send(status, "application/json", json.dumps(body).encode())

            def _send(self, status: int, content_type: str, payload: bytes):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):  # probes every few seconds are not operator news
                pass

        return Handler
