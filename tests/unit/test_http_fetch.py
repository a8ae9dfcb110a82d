"""The http_fetch tool against a local HTTP server on 127.0.0.1: what it returns
for allowed hosts, and what it refuses (hosts not allowed, redirects out of
the list, oversize bodies, slow servers, other schemes)."""
import asyncio
import ipaddress
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.recorder import Recorder
from tools.http_fetch import FetchArgs, FetchPolicy, FetchRefused, fetch, make_tool
from tools.tool_registry import ToolContext

CTX = ToolContext(tool_call_id="t1", agent_id="a1", session_id="s1", iteration=0)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.paths.append(self.path)
        route = self.path.split("?")[0]
        if route == "/text":
            return self.send(200, "text/plain; charset=utf-8", "héllo wörld".encode())
        if route == "/json":
            return self.send(404, "application/json", b'{"error": "nothing here"}')
        if route == "/long":
            return self.send(200, "text/html", b"<p>" + b"x" * 5000 + b"</p>")
        if route == "/big":
            return self.send(200, "text/plain", b"y" * 20_000)
        if route == "/big-chunked":  # no Content-Length: the cap must hold while streaming
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(10):
                chunk = b"z" * 4096
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        if route == "/binary":
            return self.send(200, "image/png", b"\x89PNG\r\n\x1a\n" + bytes(100))
        if route == "/slow":
            time.sleep(3)
            return self.send(200, "text/plain", b"late")
        if route == "/redirect-to":  # to the http:// URL after the "?"
            self.send_response(302)
            self.send_header("Location", "http://" + self.path.split("?", 1)[1])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if route.startswith("/redirect"):
            target = {"/redirect-in": "/text", "/redirect-out": "http://localhost:1/secret",
                      "/redirect-loop": "/redirect-loop", "/redirect-ftp": "ftp://127.0.0.1/x"}[route]
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send(404, "text/plain", b"no such page")

    def send(self, status, content_type, body):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # a client that gave up (the timeout test)
        pass


@pytest.fixture(scope="module")
def site():
    server = QuietServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.paths = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def base(site) -> str:
    return f"http://127.0.0.1:{site.server_address[1]}"


def policy(site, **caps) -> FetchPolicy:
    return FetchPolicy(allow=(f"127.0.0.1:{site.server_address[1]}",), **{"max_bytes": 10_000, **caps})


def get(url, pol):
    return asyncio.run(fetch(url, pol))


def test_fetches_text_and_reports_status_and_type(site):
    result = get(base(site) + "/text", policy(site))
    assert result == {"url": base(site) + "/text", "status": 200, "content_type": "text/plain",
                      "bytes": len("héllo wörld".encode()), "truncated": False, "text": "héllo wörld"}
    error_page = get(base(site) + "/json", policy(site))  # a 404 is a result the model can read
    assert error_page["status"] == 404 and error_page["text"] == '{"error": "nothing here"}'


def test_long_text_is_truncated_with_a_note(site):
    result = get(base(site) + "/long", policy(site, max_chars=100))
    assert result["truncated"] is True and len(result["text"]) == 100
    assert result["note"] == "text truncated to the first 100 of 5007 characters"


def test_binary_content_is_not_shown(site):
    result = get(base(site) + "/binary", policy(site))
    assert result["text"] is None and "binary content (image/png, 108 bytes)" in result["note"]


def test_oversize_bodies_are_refused(site):
    with pytest.raises(FetchRefused, match="20000 bytes, over the 10000-byte cap"):
        get(base(site) + "/big", policy(site))
    with pytest.raises(FetchRefused, match="exceeds the 10000-byte cap"):
        get(base(site) + "/big-chunked", policy(site))


def test_redirects_are_followed_only_within_the_allowlist(site):
    result = get(base(site) + "/redirect-in", policy(site))
    assert result["url"] == base(site) + "/text" and result["text"] == "héllo wörld"
    before = len(site.paths)
    with pytest.raises(FetchRefused, match="redirect from .*/redirect-out to http://localhost:1/secret refused: "
                                           "host localhost:1 is not on the operator's allowlist"):
        get(base(site) + "/redirect-out", policy(site))
    assert site.paths[before:] == ["/redirect-out"]
    with pytest.raises(FetchRefused, match="only http and https"):
        get(base(site) + "/redirect-ftp", policy(site))
    with pytest.raises(FetchRefused, match="more than 5 redirects"):
        get(base(site) + "/redirect-loop", policy(site))


def test_hosts_not_allowed_are_refused_without_a_request(site):
    before = len(site.paths)
    port = site.server_address[1]
    with pytest.raises(FetchRefused, match=r"allowed: none \(the operator has not allowed any host\)"):
        get(base(site) + "/text", FetchPolicy())  # the default: nothing allowed
    with pytest.raises(FetchRefused, match="host localhost"):
        get(f"http://localhost:{port}/text", policy(site))
    with pytest.raises(FetchRefused, match="not on the operator's allowlist"):  # another port of an allowed host
        get("http://127.0.0.1:1/text", policy(site))
    with pytest.raises(FetchRefused, match="credentials"):
        get(f"http://user:pw@127.0.0.1:{port}/text", policy(site))
    with pytest.raises(FetchRefused, match="only http and https"):
        get("file:///etc/passwd", policy(site))
    assert len(site.paths) == before


def test_allowlist_entries():
    pol = FetchPolicy(allow=("example.com", "*.wiki.org", "api.test:8443", " ", ""))
    assert pol.allow == ("example.com", "*.wiki.org", "api.test:8443")
    assert pol.allows("example.com", 443) and pol.allows("EXAMPLE.com.", 80)
    assert not pol.allows("sub.example.com", 443)
    assert pol.allows("en.wiki.org", 443) and not pol.allows("wiki.org", 443)
    assert not pol.allows("evilwiki.org", 443)
    assert pol.allows("api.test", 8443) and not pol.allows("api.test", 443)


def test_a_slow_server_is_cut_off(site):
    with pytest.raises(FetchRefused, match="no complete response within 0.5s"):
        get(base(site) + "/slow", policy(site, timeout_s=0.5))


def test_the_tool(site):
    tool = make_tool(policy(site))
    assert tool.name == "http_fetch" and tool.idempotent and not tool.needs_approval
    assert f"127.0.0.1:{site.server_address[1]}" in tool.description
    assert tool.schema()["required"] == ["url"]
    result = asyncio.run(tool.run(FetchArgs(url=base(site) + "/text"), CTX))
    assert result["text"] == "héllo wörld"
    assert asyncio.run(tool.run({"url": base(site) + "/text"}, CTX))["status"] == 200
    assert "none yet" in make_tool(FetchPolicy()).description


def test_a_url_the_policy_refuses_fails_when_planned_not_after_an_approval(site):
    """Issue 40: approving an http_fetch to a host off the allowlist was offered,
    then failed.  The call's args are checked against the policy with its schema,
    so such a call ends failed at once, with the reason; a listed host still waits."""
    from runtime.session.tool_runner import ToolRunner
    from domain.session_config import SessionConfig
    from tools import args_check
    from tools.tool_registry import ToolRegistry
    tool = make_tool(policy(site))
    registry = ToolRegistry()
    registry.register(tool)
    runner = ToolRunner(registry, persist=None, observers=None)
    config = SessionConfig.model_validate({"tools": ["http_fetch"], "approve": ["http_fetch"]})
    status, error = runner.initial_status(config, "http_fetch", {"url": "http://example.com/x"})
    assert status == "failed" and "not on the operator's allowlist" in error, error
    assert runner.initial_status(config, "http_fetch", {"url": base(site) + "/text"}) == ("waiting_approval", None)
    assert "only http and https" in args_check.args_problem(tool, {"url": "file:///etc/passwd"})
    assert args_check.args_problem(tool, {"url": base(site) + "/text"}) is None


# ---- addresses, not names: every hop is resolved and its address checked ----------

@pytest.fixture
def recorder():
    """What must not be reached (the service's own port, an internal host)."""
    with Recorder() as server:
        yield server


@pytest.fixture
def names(monkeypatch):
    """Host names this test resolves as it likes (``names["internal.test"] = ["10.1.2.3"]``): the DNS answers
    an attacker controls.  Every name not listed resolves as usual."""
    table = {}
    real = socket.getaddrinfo

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if host in table:
            return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                     (a, port, 0, 0) if ":" in a else (a, port)) for a in table[host]]
        return real(host, port, family, type, proto, flags)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return table


def test_a_port_less_name_entry_does_not_open_loopback(recorder):
    """The issue's finding: 'localhost' on the list let a redirect reach the service's own port.  A name
    that resolves to loopback now needs the address itself on the list."""
    port = recorder.server_address[1]
    pol = FetchPolicy(allow=("localhost",), timeout_s=5)
    with pytest.raises(FetchRefused, match=rf"host localhost:{port} resolves only to addresses the operator has "
                                           r"not allowed: 127\.0\.0\.1 \(loopback\)"):
        get(f"http://localhost:{port}/api/agents", pol)
    assert recorder.requests == []


def test_a_redirect_to_a_name_that_resolves_to_loopback_is_refused(site, recorder):
    app_port = recorder.server_address[1]  # the service's own port, say
    pol = FetchPolicy(allow=(f"127.0.0.1:{site.server_address[1]}", "localhost"), timeout_s=5)
    site_redirect = f"{base(site)}/redirect-to?localhost:{app_port}/api/agents"
    with pytest.raises(FetchRefused, match=r"127\.0\.0\.1 \(loopback\)"):
        get(site_redirect, pol)
    assert recorder.requests == []


@pytest.mark.parametrize("address,why", [
    ("10.1.2.3", "private"), ("192.168.0.7", "private"), ("172.16.5.4", "private"),
    ("169.254.169.254", "a cloud metadata address"), ("169.254.10.10", "link-local"),
    ("fd00:ec2::254", "a cloud metadata address"), ("127.0.0.53", "loopback"), ("::1", "loopback"),
    ("0.0.0.0", "unspecified"), ("100.64.1.1", "not public"), ("::ffff:10.0.0.1", "private"),
])
def test_a_name_that_resolves_to_an_internal_address_is_refused_before_connecting(names, address, why):
    names["internal.test"] = [address]
    pol = FetchPolicy(allow=("internal.test", "*.internal.test"), timeout_s=1)
    started = time.monotonic()
    with pytest.raises(FetchRefused, match=rf"resolves only to addresses the operator has not allowed: "
                                           rf"{re.escape(str(ipaddress.ip_address(address)))} \({why}\)"):
        get("http://internal.test/latest/meta-data/", pol)
    assert time.monotonic() - started < 1.0  # refused at the lookup: no connection was tried


def test_a_redirect_to_a_name_that_resolves_to_the_metadata_address_is_refused(names, recorder):
    names["metadata.test"] = ["169.254.169.254"]
    pol = FetchPolicy(allow=(f"127.0.0.1:{recorder.server_address[1]}", "metadata.test"), timeout_s=1)
    with pytest.raises(FetchRefused, match=r"169\.254\.169\.254 \(a cloud metadata address\)"):
        get(f"http://127.0.0.1:{recorder.server_address[1]}/to/metadata.test/latest/meta-data/", pol)
    assert recorder.requests == ["GET /to/metadata.test/latest/meta-data/"]


def test_a_listed_address_is_reached_on_its_port_only(names, recorder, site):
    """An address entry with a port opens that port of that address, whatever name leads there."""
    port, other = recorder.server_address[1], site.server_address[1]
    names["app.test"] = ["127.0.0.1"]
    pol = FetchPolicy(allow=("app.test", f"127.0.0.1:{port}"), timeout_s=5)
    assert get(f"http://app.test:{port}/ok", pol)["text"] == "reached"
    assert get(f"http://127.0.0.1:{port}/ok", pol)["text"] == "reached"
    before = len(site.paths)
    with pytest.raises(FetchRefused, match=r"127\.0\.0\.1 \(loopback\)"):
        get(f"http://app.test:{other}/text", pol)
    with pytest.raises(FetchRefused, match="not on the operator's allowlist"):
        get(f"http://127.0.0.1:{other}/text", pol)
    assert len(site.paths) == before and recorder.requests == ["GET /ok", "GET /ok"]


def test_ranges_and_mixed_answers(names, recorder):
    """A range entry allows the addresses in it; of a name's answers only the allowed ones are used."""
    port = recorder.server_address[1]
    names["mixed.test"] = ["10.9.9.9", "127.0.0.1"]
    pol = FetchPolicy(allow=("mixed.test", f"127.0.0.0/8:{port}"), timeout_s=5)
    assert get(f"http://mixed.test:{port}/ok", pol)["text"] == "reached"  # 10.9.9.9 was never tried
    assert FetchPolicy(allow=("[fd00::]/8",)).lists(ipaddress.ip_address("fd00:ec2::254"), 80)
    assert FetchPolicy(allow=("::1",)).lists(ipaddress.ip_address("::1"), 80)  # without brackets: no port
    assert FetchPolicy(allow=("[::1]:8080",)).lists(ipaddress.ip_address("::1"), 8080)
    assert not FetchPolicy(allow=("[::1]:8080",)).lists(ipaddress.ip_address("::1"), 80)
    assert not FetchPolicy(allow=("[fd00::]/8:443",)).lists(ipaddress.ip_address("fd00:ec2::254"), 80)
    with pytest.raises(ValueError, match="neither a host name nor an address range"):
        FetchPolicy(allow=("10.0.0.0/33",))


def test_addresses_in_urls_need_an_address_entry(recorder):
    port = recorder.server_address[1]
    for url in (f"http://[::1]:{port}/", f"http://0.0.0.0:{port}/", f"http://169.254.169.254:{port}/"):
        with pytest.raises(FetchRefused, match="not on the operator's allowlist"):
            get(url, FetchPolicy(allow=("localhost",), timeout_s=1))
    assert recorder.requests == []
