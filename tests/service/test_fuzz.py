"""Hostile input against the real app.py.

The service here has an API token, presented by every probe (schemathesis
too), as a deployed service would.

1. Hostile ids (quotes, ``' OR '1'='1``, unicode, control characters, 10k-character
   strings) through every route and query parameter that takes an id: always a
   4xx in the API's error shape, and not one row of any table changes.
2. Oversized bodies on every POST route: 413.
3. Schemathesis (its CLI, ``st run --checks all`` with the coverage, fuzzing and
   stateful phases) against the app's own OpenAPI document: no 5xx, and the
   document states exactly what the API accepts and answers.

The Socket.IO ingest namespace refusing clients without the token (none, or a
wrong one) is proved in tests/service/test_live.py (test_ingest_refuses_a_missing_or_wrong_token
in-process, test_ingest_over_the_wire_needs_the_token over a real socket);
test_ingest_over_the_wire_refuses_no_token below adds the missing-token case
over the wire.
"""
import os
import subprocess
import sys
from urllib.parse import quote

import pytest
import socketio

from domain.events import INGEST_NAMESPACE
from tests.chaos_client import snapshot_row_counts, table_contents
from tests.harness import Service
from tests.plugins import COUNT_DIR_ENV

HOSTILE = ["x' OR '1'='1", "' OR '1'='1' --", "a\"b", "a'; DROP TABLE actions; --", "id) OR (1=1",
           "é", "日本語", "🙂", "a\u0000b", "a\nb", " ", "%", "*", "x" * 10_000, "'" * 10_000]

MAX_BODY = 1 << 20  # app.MAX_BODY_BYTES
TOKEN = "fuzz-admin-token"


@pytest.fixture(scope="module")
def shared_service(tmp_path_factory):
    """This module's service has a token, as a deployed one would: every probe
    (schemathesis too) presents it, so the routes behind the check are what is
    fuzzed; a request without it is refused before any route (test_security.py)."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "logs").mkdir()
    (root / "counts").mkdir()
    svc = Service(str(root / "data"), str(root / "logs"), env={COUNT_DIR_ENV: str(root / "counts")},
                  app_args=["--api-token", TOKEN])
    svc.http.headers["Authorization"] = f"Bearer {TOKEN}"
    yield svc.start()
    svc.stop()


@pytest.fixture(scope="module")
def target(shared_service):
    """A finished agent session and a conversation with one participant: real ids
    for the routes, and nothing left running that would change the tables."""
    svc = shared_service
    made = svc.create("countdown", config={"n": 1, "interval_s": 0})
    svc.wait_status(made["session_id"], "done")
    conv = svc.post("/api/conversations", json={"title": "fuzz"}).json()
    conversation_id = conv.get("conversation_id") or conv["conversation"]["conversation_id"]
    r = svc.post(f"/api/conversations/{conversation_id}/participants", json={"kind": "user", "user_id": "u1"})
    assert r.status_code == 201, r.text
    return {**made, "conversation_id": conversation_id}


def hostile_requests(svc, t: dict, bad: str) -> list:
    """One request per place an id or a filter value goes in, carrying ``bad``."""
    aid, sid, cid = t["agent_id"], t["session_id"], t["conversation_id"]
    in_path = quote(bad, safe="")
    get, post = svc.get, svc.post
    return [
        # ids in the path
        get(f"/api/agents/{in_path}"), get(f"/api/agents/{in_path}/sessions"),
        *[post(f"/api/agents/{in_path}/{verb}", json={}) for verb in ("pause", "resume", "destroy")],
        post(f"/api/agents/{in_path}/interrupt", json={"guidance": "hi"}),
        get(f"/api/sessions/{in_path}"), get(f"/api/sessions/{in_path}/trace"), get(f"/api/actions/{in_path}"),
        get(f"/api/conversations/{in_path}"),
        get(f"/api/conversations/{in_path}/participants"), get(f"/api/conversations/{in_path}/messages"),
        post(f"/api/conversations/{in_path}/participants", json={"kind": "user", "user_id": "u2"}),
        post(f"/api/conversations/{in_path}/messages", json={"text": "hi"}),
        # ids and filters in the query string
        get("/api/agent-steps", session_id=bad), get("/api/agent-steps", agent_id=bad),
        get("/api/agent-steps", status=bad), get("/api/agent-steps", since=bad),
        get("/api/agent-steps", min_iteration=bad), get("/api/agent-steps", session_id=sid, limit=bad),
        get(f"/api/conversations/{cid}/messages", after=bad),
        get("/api/agents", offset=bad), get("/api/conversations", limit=bad),
        get(f"/api/sessions/{sid}/trace", from_iteration=bad), get(f"/api/sessions/{sid}/trace", limit=bad),
        # ids in bodies
        post("/api/agents", json={"moniker": "joke", "agent_id": bad}),
        post("/api/agents", json={"moniker": "joke", "session_id": bad}),
        post("/api/agents", json={"moniker": "joke", "conversation_id": bad}),
        post("/api/agents", json={"moniker": bad}),
        *[post(f"/api/agents/{aid}/{verb}", json={"session_id": bad}) for verb in ("pause", "resume", "destroy")],
        post(f"/api/agents/{aid}/interrupt", json={"guidance": "hi", "session_id": bad}),
        post("/api/conversations", json={"conversation_id": bad}),
        post("/api/conversations", json={"created_by": bad}),
        post(f"/api/conversations/{cid}/participants", json={"kind": "user", "user_id": bad}),
        post(f"/api/conversations/{cid}/participants", json={"kind": "agent", "session_id": bad}),
        post(f"/api/conversations/{cid}/participants", json={"kind": "agent", "session_id": sid, "agent_id": bad}),
        post(f"/api/conversations/{cid}/messages", json={"text": "hi", "user_id": bad}),
        # tool calls
        get(f"/api/tool-calls/{in_path}"), post(f"/api/tool-calls/{in_path}/approve", json={}),
        post(f"/api/tool-calls/{in_path}/deny", json={}), post(f"/api/tool-calls/{in_path}/result", json={"result": 1}),
        get("/api/tool-calls", session_id=bad), get("/api/tool-calls", agent_id=bad), get("/api/tool-calls", name=bad),
        get("/api/tool-calls", status=bad), get("/api/tool-calls", since=bad), get("/api/tool-calls", limit=bad),
    ]


def test_hostile_ids_everywhere_get_4xx_and_change_nothing(shared_service, target):
    """Every id-taking route and query parameter refuses hostile values with a
    4xx in the error shape, and not one row of any table changes."""
    svc = shared_service
    before = table_contents(svc)
    for bad in HOSTILE:
        for r in hostile_requests(svc, target, bad):
            where = f"{r.request.method} {r.request.url[:150]} ({bad[:20]!r})"
            assert 400 <= r.status_code < 500, f"{where} -> {r.status_code} {r.text[:200]}"
            assert set(r.json()["error"]) == {"code", "message"}, where
    after = table_contents(svc)
    for name in before:
        assert after[name] == before[name], f"table {name} changed"
    # The real ids still work: the hostile ones were refused, not the routes broken.
    assert svc.get(f"/api/sessions/{target['session_id']}").json()["status"] == "done"


POST_ROUTES = ["/api/agents", "/api/agents/{aid}/pause", "/api/agents/{aid}/resume", "/api/agents/{aid}/destroy",
               "/api/agents/{aid}/interrupt", "/api/conversations", "/api/conversations/{cid}/participants",
               "/api/conversations/{cid}/messages", "/api/tool-calls/{aid}/approve", "/api/tool-calls/{aid}/deny",
               "/api/tool-calls/{aid}/result"]


@pytest.mark.parametrize("route", POST_ROUTES)
def test_oversized_bodies_get_413(shared_service, target, route):
    """A body over the 1 MiB cap is refused whole, before any parsing, and enqueues nothing."""
    svc = shared_service
    path = route.format(aid=target["agent_id"], cid=target["conversation_id"])
    before = snapshot_row_counts(svc)
    huge = '{"guidance": "' + "x" * MAX_BODY + '"}'
    r = svc.post(path, data=huge, headers={"Content-Type": "application/json"})
    assert r.status_code == 413, (path, r.status_code, r.text[:200])
    assert set(r.json()["error"]) == {"code", "message"}
    assert snapshot_row_counts(svc) == before


def test_ingest_over_the_wire_refuses_no_token(shared_service):
    """A Socket.IO client with no auth at all cannot join the ingest namespace."""
    client = socketio.Client(reconnection=False)
    with pytest.raises(socketio.exceptions.ConnectionError):
        client.connect(shared_service.url, namespaces=[INGEST_NAMESPACE], transports=["websocket"], wait_timeout=5)
    assert not client.connected


# ---- schemathesis ---------------------------------------------------------------

EXAMPLES = int(os.environ.get("AGENTSVC_FUZZ_EXAMPLES", "10"))
SEED = int(os.environ.get("AGENTSVC_FUZZ_SEED", "20261123"))


@pytest.mark.timeout(1200)  # the CLI's own limit is 900 s; ~35 s on a quiet machine, 300 s and more beside the suite
def test_api_conforms_to_its_openapi_document(shared_service):
    """Schemathesis' own runner, as a user would run it, with every check and
    the coverage, fuzzing and stateful phases (the stateful phase follows the
    document's links from a create to the agent, session and action routes):
    no 5xx, every status/header/body as documented, schema-valid requests
    accepted, invalid ones refused, 405 with Allow, created things findable.
    The seed is fixed so a failure replays; AGENTSVC_FUZZ_EXAMPLES and
    AGENTSVC_FUZZ_SEED explore further."""
    config = os.path.join(os.path.dirname(os.path.dirname(__file__)), "schemathesis.toml")  # 422 of a reused key
    cmd = [sys.executable, "-m", "schemathesis.cli", "--config-file", config, "run",
           shared_service.url + "/api/openapi.json",
           "--checks", "all", "--phases", "coverage,fuzzing,stateful", "--max-examples", str(EXAMPLES),
           "--seed", str(SEED), "--request-timeout", "30", "--no-color", "--header", f"Authorization: Bearer {TOKEN}"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    summary = run.stdout[run.stdout.find("FAILURES"):] if "FAILURES" in run.stdout else run.stdout[-3000:]
    assert run.returncode == 0, f"schemathesis found problems:\n{summary[:12000]}\n{run.stderr[-2000:]}"
    assert "Stateful" in run.stdout  # the stateful phase ran (it needs the document's links)


@pytest.mark.parametrize("since,finds_steps", [("0152-09-28T20:17:15Z", True), ("0999-12-31T23:59:59Z", True),
                                                 ("0001-01-01T00:00:00+05:00", True),
                                                 ("9999-12-31T23:59:59-05:00", False)])
def test_step_query_since_at_the_edges_of_the_calendar(shared_service, target, since, finds_steps):
    """Found by schemathesis: a `since` before the year 1000 reached LanceDB as an
    unparsable timestamp (500), and one at the edge of the calendar overflowed.
    Such dates are valid RFC 3339, so they are answered (clamped to 1000-9999)."""
    r = shared_service.get("/api/agent-steps", since=since, session_id=target["session_id"])
    assert r.status_code == 200, (since, r.status_code, r.text[:200])
    assert bool(r.json()["steps"]) == finds_steps


@pytest.mark.parametrize("since", ["0.5", "1700000000", "2026-01-01", "2026-01-01T00:00:00", "yesterday"])
def test_step_query_since_must_be_an_rfc3339_date_time(shared_service, since):
    """Found by schemathesis: `since=0.5` was taken as a Unix time although the
    document says date-time; a date-time with no offset is ambiguous."""
    r = shared_service.get("/api/agent-steps", since=since)
    assert r.status_code == 400, (since, r.status_code, r.text[:200])
    assert "since" in r.json()["error"]["message"]


def test_documented_statuses_of_repeated_creates(shared_service):
    """Found by schemathesis: the 200 of a repeated conversation create (and the 404
    of an agent create naming an unknown conversation) were not in the document."""
    paths = shared_service.get("/api/openapi.json").json()["paths"]
    body = {"conversation_id": "fuzz-repeat"}
    codes = [shared_service.post("/api/conversations", json=body).status_code for _ in range(2)]
    assert codes == [201, 200]
    assert {"200", "201"} <= set(paths["/api/conversations"]["post"]["responses"])
    r = shared_service.post("/api/agents", json={"moniker": "joke", "conversation_id": "no-such-conversation"})
    assert r.status_code == 404
    assert "404" in paths["/api/agents"]["post"]["responses"]
