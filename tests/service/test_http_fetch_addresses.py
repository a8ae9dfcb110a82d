"""``http_fetch`` checks addresses, not names (issue 36, part 7), in the real
agents.py: the operator lists a name (``localhost``, port-less) and one
address and port (``127.0.0.1:<site>``).  A session's calls reach the site on
its listed port, by address and by name; a call to another port of the same
machine through the listed name, directly or by a redirect from the site, is
refused and reaches nothing.  (Names resolving to a private network or the
metadata address need DNS answers a test can set: tests/unit/test_http_fetch.py.)"""
import pytest

from tests.harness import Service
from tests.recorder import Recorder


@pytest.fixture(scope="module")
def site():
    """An allowed internal service, listed by address and port."""
    with Recorder() as server:
        yield server


@pytest.fixture(scope="module")
def internal():
    """Another port of the same machine (as the service's own API would be): not listed."""
    with Recorder() as server:
        yield server


@pytest.fixture(scope="module")
def svc(tmp_path_factory, site):
    root = tmp_path_factory.mktemp("fetch")
    (root / "logs").mkdir()
    service = Service(str(root / "data"), str(root / "logs"),
                      agents_args=["--http-fetch-allow", f"localhost,127.0.0.1:{site.port}", "--http-fetch-timeout", "5"])
    service.start()
    yield service
    service.stop()


def fetches(svc, *urls) -> list[dict]:
    """A scripted session that calls http_fetch on each URL, one step each; its tool calls, in order."""
    frames = [{"text": f"fetch {i}", "tool_calls": [{"name": "http_fetch", "args": {"url": url}}]}
              for i, url in enumerate(urls)] + [{"text": "done", "done": True}]
    made = svc.create("scripted", "fetch", config={"interval_s": 0, "tools": ["http_fetch"], "frames": frames})
    svc.wait_status(made["session_id"], "done", "error", timeout=60)
    calls = svc.get("/api/tool-calls", session_id=made["session_id"]).json()["tool_calls"]
    return sorted(calls, key=lambda c: c["iteration"])


def test_a_listed_address_is_reached_on_its_port_and_a_name_does_not_open_loopback(svc, site, internal):
    ok_by_address, ok_by_name, other_port, redirected = fetches(
        svc, f"http://127.0.0.1:{site.port}/ok", f"http://localhost:{site.port}/ok",
        f"http://localhost:{internal.port}/api/agents", f"http://127.0.0.1:{site.port}/to/localhost:{internal.port}/api")

    assert ok_by_address["status"] == "success" and ok_by_address["result"]["text"] == "reached"
    assert ok_by_name["status"] == "success" and ok_by_name["result"]["text"] == "reached"
    for call in (other_port, redirected):
        assert call["status"] == "failed", call
        assert f"localhost:{internal.port} resolves only to addresses the operator has not allowed" in call["error"]
        assert "127.0.0.1 (loopback)" in call["error"]
    assert internal.requests == []  # neither the call nor the redirect reached it
    assert site.requests == ["GET /ok", "GET /ok", f"GET /to/localhost:{internal.port}/api"]
