"""An HTTP server on 127.0.0.1 that records every request reaching it: the
attacker's host in the security probes, or an internal service that must not be
reached.  ``GET /to/<host:port/path>`` answers a redirect to ``http://<host:port/path>``;
any other request a 200 ``reached`` (``status`` changes it)."""
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Recorder(ThreadingHTTPServer):
    """``with Recorder() as r: ... r.base_url ... r.requests`` (``"GET /path"``) ``... r.log`` (with headers, body)."""

    daemon_threads = True

    def __init__(self, status: int = 200):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.status = status
        self.requests: list[str] = []
        self.log: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def base_url(self) -> str:
        """As a model endpoint's base URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    def handle_error(self, request, client_address):  # a client that gave up
        pass

    def close(self) -> None:
        self.shutdown()
        self.server_close()

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _record(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests.append(f"{self.command} {self.path}")
        self.server.log.append(f"{self.command} {self.path}\n{self.headers}\n{body.decode('utf-8', 'replace')}")
        if self.command == "GET" and self.path.startswith("/to/"):
            self.send_response(302)
            self.send_header("Location", "http://" + self.path[len("/to/"):])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        reply = b"reached"
        self.send_response(self.server.status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    do_GET = do_POST = do_PUT = do_DELETE = _record
