"""The service tried as an attacker would, from outside, against the real
agents.py and app.py (docs/security.md has the threat model and the table of
guarantees these tests show).

Each test asserts a property (what was persisted, what reached a client,
whether the process started), not a message, and has a positive control: the
same request with the right token, origin or config still works, so a
refusal proves the check and not a broken route.
"""
import json
import os
import re
import secrets
import stat
import subprocess
import sys
import threading
import time
from urllib.parse import quote

import pytest
import requests
import socketio

from domain.tokens import entry_text, new_token
from tests.harness import ROOT, Service, free_port, wait_for
from tests.plugins import COUNT_DIR_ENV
from tests.subagent_api import tool_rows

PROFILE = """\
name: careful
description: waits only when a person says so
moniker: scripted
tools:
  allowed: [wait, add]
  approve: [wait]
interval_s: 0
config:
  frames: [{text: a}, {text: b}]
"""


def start(tmp_path_factory, name: str, *, tokens_file=None, app_args=(), agents_args=()) -> Service:
    root = tmp_path_factory.mktemp(name)
    for sub in ("logs", "counts", "profiles"):
        (root / sub).mkdir()
    (root / "profiles" / "careful.yaml").write_text(PROFILE)
    profiles = ["--profiles-dir", str(root / "profiles")]
    auth = ["--tokens-file", str(tokens_file)] if tokens_file else []
    svc = Service(str(root / "data"), str(root / "logs"), env={COUNT_DIR_ENV: str(root / "counts")},
                  app_args=[*auth, *profiles, *app_args], agents_args=[*profiles, *agents_args])
    svc.root = root
    return svc.start()


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    made = {role: new_token() for role in ("viewer", "operator", "admin")}
    path = tmp_path_factory.mktemp("tokens") / "tokens.toml"
    path.write_text("".join(entry_text(f"{role}-1", role, token) for role, token in made.items()))
    return made, path


@pytest.fixture(scope="module")
def locked(tmp_path_factory, tokens):
    """A service with a tokens file; its client presents the admin token."""
    svc = start(tmp_path_factory, "locked", tokens_file=tokens[1])
    svc.http.headers["Authorization"] = f"Bearer {tokens[0]['admin']}"
    yield svc
    svc.stop()


def as_token(token):
    return {"Authorization": f"Bearer {token}"} if token else {}


# ---- 1. nothing is readable without a token -----------------------------------------

def get_paths(svc) -> list[str]:
    """Every GET of the OpenAPI document, its path parameters filled with an id that exists nowhere."""
    spec = svc.get("/api/openapi.json").json()
    paths = [re.sub(r"\{[^}]+\}", "01NOSUCHID0000000000000000", p) for p, ops in spec["paths"].items() if "get" in ops]
    return [p for p in paths if p not in ("/api/health", "/readyz")]  # the probes: they name no agent


def test_every_read_needs_a_token(locked, tokens):
    made, _ = tokens
    anonymous = requests.Session()
    paths = get_paths(locked)
    assert len(paths) >= 25  # the document's reads, not a handful
    for path in [*paths, "/api/stream?rooms=all", "/metrics"]:
        r = anonymous.get(locked.url + path, timeout=30)
        assert r.status_code == 401, (path, r.status_code, r.text[:200])
        seen = anonymous.get(locked.url + path, headers=as_token(made["viewer"]), timeout=30,
                             stream=path.startswith("/api/stream"))
        assert seen.status_code not in (401, 403), (path, seen.status_code)  # the positive control
        seen.close()
    assert anonymous.get(locked.url + "/api/health", timeout=30).status_code == 200
    assert anonymous.get(locked.url + "/readyz", timeout=30).status_code in (200, 503)
    page = anonymous.get(locked.url + "/", allow_redirects=False, timeout=30)
    assert page.status_code == 302 and page.headers["Location"].startswith("/login")


def test_live_events_need_a_token_and_refuse_a_rebinding_host(locked, tokens):
    made, _ = tokens
    refused = socketio.Client(reconnection=False)
    with pytest.raises(socketio.exceptions.ConnectionError):
        refused.connect(locked.url, transports=["websocket"], wait_timeout=10)
    with pytest.raises(socketio.exceptions.ConnectionError):
        refused.connect(locked.url, transports=["websocket"], auth={"token": "agt_wrong"}, wait_timeout=10)
    viewer = socketio.Client(reconnection=False)
    viewer.connect(locked.url, transports=["websocket"], auth={"token": made["viewer"]}, wait_timeout=10)
    assert viewer.connected
    viewer.disconnect()
    # DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1
    handshake = locked.url + "/socket.io/?EIO=4&transport=polling"
    rebound = requests.get(handshake, headers={"Host": "evil.example:80", "Origin": "http://evil.example"},
                           timeout=30)
    assert rebound.status_code == 400
    foreign = requests.get(handshake, headers={"Origin": "http://evil.example"}, timeout=30)
    assert foreign.status_code == 403


# ---- 2. roles, and who did what ------------------------------------------------------

def test_roles_bound_each_token_and_every_action_names_its_actor(locked, tokens):
    made, _ = tokens
    post = lambda path, body, who: requests.post(locked.url + path, json=body, headers=as_token(made[who]),
                                                 timeout=30)
    assert post("/api/agents", {"moniker": "countdown", "config": {"n": 3}}, "viewer").status_code == 403
    created = post("/api/agents", {"moniker": "countdown", "config": {"n": 3, "interval_s": 0}}, "operator")
    assert created.status_code == 202
    locked.action(created.json()["action_id"])  # a bulk call picks applied sessions
    destroy_all = {"action": "destroy", "filter": {"ids": [created.json()["agent_id"]]}}
    assert post("/api/agents/bulk", destroy_all, "operator").status_code == 403
    assert post("/api/agents/bulk", destroy_all, "admin").status_code == 202
    # approving many tool calls at once runs many tools: admin; denying them: an operator
    approve_all = {"filter": {"tool": "add"}, "decision": "approve"}
    assert post("/api/tool-calls/bulk", approve_all, "operator").status_code == 403
    assert post("/api/tool-calls/bulk", {**approve_all, "dry_run": True}, "operator").status_code == 200
    assert post("/api/tool-calls/bulk", approve_all, "admin").status_code == 202
    assert post("/api/tool-calls/bulk", {**approve_all, "decision": "deny"}, "operator").status_code == 202
    assert post("/api/tool-calls/bulk", {**approve_all, "decision": "deny"}, "viewer").status_code == 403
    actions = locked.get("/api/actions", agent_id=created.json()["agent_id"]).json()["actions"]
    assert {(a["type"], a["actor"]) for a in actions} == {("create", "operator-1"), ("destroy", "admin-1")}


# ---- 3. a web page of another site cannot drive a service without a token ------------

def test_cross_site_writes_are_refused(tmp_path_factory):
    svc = start(tmp_path_factory, "open")
    try:
        before = len(svc.get("/api/actions", limit=1000).json()["actions"])
        evil = {"Origin": "http://evil.example"}
        body = json.dumps({"moniker": "countdown"})
        assert requests.post(svc.url + "/api/agents", data=body, timeout=30,
                             headers={**evil, "Content-Type": "text/plain"}).status_code in (403, 415)
        assert requests.post(svc.url + "/api/agents", data=body, timeout=30,
                             headers={"Content-Type": "text/plain"}).status_code == 415
        assert requests.post(svc.url + "/api/agents", data={"moniker": "countdown"}, timeout=30,
                             headers=evil).status_code in (403, 415)
        assert requests.post(svc.url + "/api/agents", data=body, timeout=30,
                             headers={**evil, "Content-Type": "application/json"}).status_code == 403
        assert len(svc.get("/api/actions", limit=1000).json()["actions"]) == before  # nothing was queued
        own = {"Origin": svc.url, "Content-Type": "application/json"}
        assert requests.post(svc.url + "/api/agents", data=body, headers=own, timeout=30).status_code == 202
        deep = "[" * 10_000 + "]" * 10_000
        assert requests.post(svc.url + "/api/agents", data=deep, timeout=30,
                             headers={"Content-Type": "application/json"}).status_code == 400
    finally:
        svc.stop()


def test_the_service_refuses_to_serve_a_network_without_a_token(tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("AGENTSVC_API_TOKEN", None)
    args = [sys.executable, os.path.join(ROOT, "app.py"), "--data-dir", str(tmp_path / "data"), "--port", str(port),
            "--host", "0.0.0.0"]
    refused = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode != 0 and "without a token" in refused.stderr
    with_token = subprocess.Popen(args, env={**env, "AGENTSVC_API_TOKEN": new_token()},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # the positive control: with a token it serves
        wait_for(lambda: _answers(f"http://127.0.0.1:{port}/api/health"), timeout=90, what="app.py to serve")
    finally:
        with_token.terminate()
        with_token.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


# ---- 4. no secret in the record --------------------------------------------------------

class LiveCollector:
    """A Socket.IO client following every room: what a dashboard would see."""

    def __init__(self, svc, token):
        self.seen = []
        self.client = socketio.Client(reconnection=True)
        for name in ("agent_state", "agent_step", "conversation_message", "action", "tool_call", "step_delta"):
            self.client.on(name, lambda payload, name=name: self.seen.append(json.dumps(payload)))
        self.client.connect(svc.url, transports=["websocket"], auth={"token": token}, wait_timeout=10)
        self.client.call("subscribe", {"rooms": ["all"]}, timeout=10)


def test_no_secret_reaches_a_table_a_log_an_event_or_an_answer(locked, tokens):
    """A canary goes in through every route that takes a config (each must be
    refused) and through the places that take free-form data (each accepted,
    and then redacted); a marker that is no secret goes in beside it and must
    be found, so the search itself is shown to work."""
    made, _ = tokens
    # One search term each: a dash or underscore of a url-safe token would split it
    # into pieces ("3", "end") that match other rows, as the search ORs its terms.
    canary, marker = "CANARY" + secrets.token_hex(8), "MARKER" + secrets.token_hex(8)
    svc = locked
    live = LiveCollector(svc, made["viewer"])
    answers = []

    def post(path, body, expect):
        r = svc.post(path, json=body)
        answers.append(r.text)
        assert r.status_code == expect, (path, r.status_code, r.text[:300])
        return r.json()

    # a recorded session to fork and replay, with an external tool call to answer
    frames = [{"text": "one", "state": {"note": marker}}, {"tool_calls": [{"name": "human", "args": {"question": "?"}}]},
              {"text": "end", "done": True}]
    made_session = post("/api/agents", {"moniker": "scripted", "config": {"interval_s": 0, "tools": ["human"],
                                                                         "frames": frames}}, 202)
    sid = made_session["session_id"]
    call = wait_for(lambda: [c for c in tool_rows(svc, sid) if c["status"] == "waiting_result"], timeout=90,
                    what="the external call")[0]
    # refused: a secret in any config
    for body in ({"moniker": "baml", "config": {"llm": {"api_key": canary}}},
                 {"moniker": "orchestrator", "config": {"sub_config": {"llm": {"api_key": canary}}}},
                 {"moniker": "scripted", "config": {"frames": [{"tool_calls": [
                     {"name": "human", "args": {"question": "?", "password": canary}}]}]}},
                 {"profile": "careful", "config": {"token": canary}}):
        post("/api/agents", body, 400)
    post(f"/api/sessions/{sid}/fork", {"from_iteration": 0, "config": {"llm": {"api_key": canary}}}, 400)
    post(f"/api/sessions/{sid}/fork", {"from_iteration": 0, "config": {"Authorization": canary}}, 400)
    post(f"/api/sessions/{sid}/replay", {"config": {"secret": canary}}, 400)
    evalset = post("/api/evalsets", {"name": "canary", "session_ids": [sid]}, 201)
    post(f"/api/evalsets/{evalset['id']}/runs", {"config": {"api_key": canary}, "scorers": ["steps"]}, 400)
    # accepted, then redacted: free-form data under secret-named keys
    post(f"/api/tool-calls/{call['id']}/result", {"result": {"token": canary, "note": marker}}, 202)
    fork = post(f"/api/sessions/{sid}/fork", {"from_iteration": 0, "state": {"api_key": canary, "note": marker}},
                202)
    conversation = post("/api/conversations", {"title": "c"}, 201)["conversation_id"]
    post(f"/api/conversations/{conversation}/messages", {"text": marker, "data": {"password": canary}}, 201)
    svc.wait_status(sid, "done", timeout=90)
    svc.wait_status(fork["session_id"], "waiting", timeout=90)  # at its own external call
    # read everything back as a client would
    reads = ["/api/agents", f"/api/sessions/{sid}", f"/api/sessions/{fork['session_id']}", "/api/actions?limit=1000",
             f"/api/agent-steps?session_id={sid}", f"/api/agent-steps?session_id={fork['session_id']}",
             f"/api/tool-calls?session_id={sid}", f"/api/conversations/{conversation}/messages",
             f"/api/search?q={quote(marker)}"]
    answers += [svc.get(path).text for path in reads]
    assert svc.get("/api/search", q=canary).json()["hits"] == []  # (its answer repeats the query: not collected)
    stream = requests.get(svc.url + f"/api/stream?rooms=session:{sid},session:{fork['session_id']}",
                          headers=as_token(made["viewer"]), stream=True, timeout=30)
    sse = _read_for(stream, seconds=5)
    time.sleep(2)  # let the live events of the last writes arrive (the grep below needs them, not their timing)
    live.client.disconnect()
    everything = {"answers": "\n".join(answers), "sse": sse, "socket.io": "\n".join(live.seen),
                  "logs": _all_text(svc.log_dir), "data dir": _all_bytes(svc.data_dir)}
    for where, text in everything.items():
        assert canary not in text, f"the canary reached {where}"
    for where in ("answers", "sse", "data dir"):
        assert marker in everything[where], f"the marker (no secret) should be found in {where}"


def _read_for(response, seconds: float) -> str:
    chunks, deadline = [], time.monotonic() + seconds

    def read():
        try:
            for line in response.iter_lines(decode_unicode=True):
                chunks.append(line or "")
                if time.monotonic() > deadline:
                    break
        except (requests.RequestException, AttributeError, ValueError):
            pass  # closed under the reader at the deadline
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(seconds + 5)
    response.close()
    return "\n".join(chunks)


def _all_text(directory: str) -> str:
    return _all_bytes(directory)


def _all_bytes(directory: str) -> str:
    """Every file's bytes as latin-1 text (the canary is ASCII: found wherever its bytes are)."""
    out = []
    for base, _, files in os.walk(directory):
        for name in files:
            try:
                with open(os.path.join(base, name), "rb") as f:
                    out.append(f.read())
            except OSError:
                pass
    return b"\n".join(out).decode("latin-1")


def test_the_data_directory_is_private(locked):
    data = locked.data_dir
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o700
    modes = {os.path.relpath(os.path.join(base, name), data): stat.S_IMODE(os.stat(os.path.join(base, name)).st_mode)
             for base, _, files in os.walk(data) for name in files}
    assert modes and all(mode & 0o077 == 0 for mode in modes.values()), {k: oct(v) for k, v in modes.items()
                                                                          if v & 0o077}


# ---- 5. children, forks and replays never hold more than where they come from ----------

def test_a_child_never_has_more_than_its_parent(locked):
    svc = locked
    frames = [{"tool_calls": [{"name": "spawn_agent", "args": {
                  "task": "fetch", "moniker": "scripted",
                  "config": {"tools": ["http_fetch"], "frames": [{"text": "x", "done": True}]}}}]},
              {"tool_calls": [{"name": "spawn_agent", "args": {
                  "task": "wait", "moniker": "scripted", "config": {"interval_s": 0, "tools": ["wait"], "frames": [
                      {"tool_calls": [{"name": "wait", "args": {"seconds": 0.1}}]}, {"text": "x", "done": True}]}}}]},
              {"text": "end", "done": True}]
    parent = svc.create("scripted", config={"interval_s": 0, "tools": ["spawn_agent", "wait"], "approve": ["wait"],
                                            "frames": frames})
    sid = parent["session_id"]
    calls = wait_for(lambda: (rows := [r for r in tool_rows(svc, sid) if r["name"] == "spawn_agent"
                                       and r["status"] in ("failed", "success")]) and len(rows) == 2 and rows,
                     timeout=90, what="both spawn calls to end")
    refused, spawned = sorted(calls, key=lambda r: r["iteration"])
    assert refused["status"] == "failed" and "http_fetch" in refused["error"]
    assert spawned["status"] == "success"  # the positive control: a child inside the parent's tools
    child = spawned["result"]["session_id"]
    assert svc.wait_status(child, "running", "waiting", "done", timeout=90)["config"]["approve"] == ["wait"]
    waiting = wait_for(lambda: [c for c in tool_rows(svc, child) if c["name"] == "wait"], timeout=90,
                       what="the child's wait call")[0]
    time.sleep(1)  # an unapproved call would have run (0.1 s) by now
    assert svc.get(f"/api/tool-calls/{waiting['id']}").json()["status"] == "waiting_approval"
    # a create naming the parent is held to it too
    r = svc.post("/api/agents", json={"moniker": "scripted", "parent_session_id": sid,
                                      "config": {"tools": ["http_fetch"]}})
    assert r.status_code == 400 and r.json()["error"]["code"] == "exceeds_parent"


def test_forks_and_replays_keep_the_rules_of_the_profile(locked):
    svc = locked
    made = svc.post("/api/agents", json={"profile": "careful"})
    assert made.status_code == 202, made.text
    sid = made.json()["session_id"]
    svc.wait_steps(sid, 1, timeout=90)
    weaker = [{"config": {"approve": []}}, {"config": {"tools": ["wait", "http_fetch"]}},
              {"config": {"approve": ["add"]}}]
    for change in weaker:
        fork = svc.post(f"/api/sessions/{sid}/fork", json={"from_iteration": 0, **change})
        assert fork.status_code == 409 and fork.json()["error"]["code"] == "exceeds_profile", (change, fork.text)
        replay = svc.post(f"/api/sessions/{sid}/replay", json=change)
        assert replay.status_code == 409 and replay.json()["error"]["code"] == "exceeds_profile", (change, replay.text)
    for change in ({"config": {"approve": ["wait", "add"]}}, {"config": {"tools": ["add"]}}):  # narrowing is fine
        assert svc.post(f"/api/sessions/{sid}/fork", json={"from_iteration": 0, **change}).status_code == 202
        assert svc.post(f"/api/sessions/{sid}/replay", json=change).status_code == 202
