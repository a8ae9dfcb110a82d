"""The ``agentsvc`` command line, run as a subprocess against the real service.

What these prove: every command talks to a running service over HTTP and says
what happened, in a table or (``--json``) in JSON a script can read; commands
on a session take a session id or an agent id; control commands wait for their
action and exit 1 when it failed; errors end with the documented exit codes
(README, "The command line"); ``tail -f`` follows a session live until it
finishes; and ``agentsvc`` with only options (or none) still runs the service.
"""
import json
import os
import signal
import subprocess
import sys

import requests

from tests.harness import ROOT, free_port, wait_for


def run(svc, *args, code: int = 0, **kw) -> subprocess.CompletedProcess:
    result = svc.cli(*args, **kw)
    assert result.returncode == code, (f"agentsvc {' '.join(args)} exited {result.returncode}, not {code}\n"
                                       f"stdout: {result.stdout}\nstderr: {result.stderr}")
    return result


def run_json(svc, *args, code: int = 0):
    return json.loads(run(svc, *args, "--json", code=code).stdout)


def test_create_list_show_steps(shared_service):
    svc = shared_service
    made = run_json(svc, "create", "countdown", "count", "--set", "n=4", "--interval", "0.02")
    assert made["status"] == "done" and made["agent_id"] and made["session_id"], made
    sid, aid = made["session_id"], made["agent_id"]
    svc.wait_status(sid, "done")

    listed = run_json(svc, "list", "--status", "done", "--moniker", "countdown")["agents"]
    assert sid in {a["session_id"] for a in listed}
    assert all(a["status"] == "done" and a["moniker"] == "countdown" for a in listed)
    assert run_json(svc, "list", "--status", "paused", "--moniker", "countdown")["agents"] == []
    listed_page = run_json(svc, "list", "--moniker", "countdown", "--limit", "1")
    assert len(listed_page["agents"]) == 1 and listed_page["total"] >= 1 and "done" in listed_page["counts"]
    table = run(svc, "list").stdout
    assert aid in table and "countdown" in table and " of " in table

    for ident in (sid, aid):  # a session id, or an agent id (its latest session)
        shown = run_json(svc, "show", ident)
        assert shown["session_id"] == sid and shown["status"] == "done"
    assert "done" in run(svc, "show", sid).stdout

    steps = run_json(svc, "steps", aid)["steps"]
    assert [s["iteration"] for s in steps] == [0, 1, 2, 3]
    assert [s["iteration"] for s in run_json(svc, "steps", sid, "-n", "2")["steps"]] == [2, 3]
    assert [s["iteration"] for s in run_json(svc, "steps", sid, "--from", "1", "-n", "2")["steps"]] == [1, 2]
    assert "3" in run(svc, "steps", sid).stdout


def test_control_commands_wait_for_their_action(shared_service):
    svc = shared_service
    made = run_json(svc, "create", "echo", "--interval", "0.05", "--config", '{"stop_on_done": false}')
    sid, aid = made["session_id"], made["agent_id"]
    svc.wait_steps(sid, 2)

    paused = run_json(svc, "pause", aid)
    assert paused["status"] == "done" and paused["type"] == "pause" and paused["session_id"] == sid
    assert svc.session(sid)["status"] == "paused"
    assert run_json(svc, "interrupt", sid, "say hello")["status"] == "done"
    assert run_json(svc, "resume", sid)["status"] == "done"
    steps = wait_for(lambda: [s for s in svc.steps(sid) if "say hello" in (s.get("text") or "")], timeout=90,
                     what="the guidance to reach a step")
    assert steps
    out = run(svc, "destroy", sid).stdout
    assert out.startswith("destroy done")
    assert svc.wait_status(sid, "stopped")["status"] == "stopped"

    # Pausing a stopped session is accepted, applied, and fails: exit 1 with the reason.
    failed = run(svc, "pause", sid, code=1)
    assert "pause failed" in failed.stderr and "stopped" in failed.stderr
    assert run_json(svc, "pause", sid, code=1)["status"] == "failed"
    queued = run_json(svc, "pause", sid, "--no-wait")
    assert queued["status"] in ("pending", "processing", "failed")


def test_exit_codes(shared_service):
    svc = shared_service
    assert "no session or agent" in run(svc, "show", "nosuchid", code=3).stderr
    assert json.loads(run(svc, "pause", "nosuchid", "--json", code=3).stdout)["error"]["code"] == "not_found"
    assert "unknown_moniker" in run(svc, "create", "nosuchmoniker", code=4).stderr
    assert "invalid" in run(svc, "show", "bad id!", code=4).stderr
    run(svc, "create", "joke", "--config", "[1, 2]", code=2)
    run(svc, "create", "joke", "--set", "novalue", code=2)
    run(svc, "frobnicate", code=2)
    unreachable = run(svc, "list", env={"AGENTSVC_URL": f"http://127.0.0.1:{free_port()}"}, code=5)
    assert "cannot reach" in unreachable.stderr


def test_say_and_tail_a_conversation(shared_service):
    svc = shared_service
    conv = svc.post("/api/conversations", json={"title": "cli"}).json()["conversation_id"]
    made = run_json(svc, "create", "echo", "--conversation", conv, "--interval", "0.05")
    svc.wait_status(made["session_id"], "running")
    posted = run_json(svc, "say", conv, "hello from the terminal", "--user", "ann")
    assert [d["session_id"] for d in posted["deliveries"]] == [made["session_id"]]
    assert "delivered to 1 sessions" in run(svc, "say", conv, "second").stdout
    # The agent echoes the guidance into the conversation; tail (no -f) prints what is recorded and exits.
    wait_for(lambda: any("hello from the terminal" in (m.get("text") or "") and m.get("sender_type") == "agent"
                         for m in svc.get(f"/api/conversations/{conv}/messages").json()["messages"]),
             timeout=30, what="the agent's reply")
    lines = [json.loads(x) for x in run(svc, "tail", conv, "--json").stdout.splitlines()]
    texts = [e["data"]["text"] for e in lines if e["event"] == "conversation_message"]
    assert texts[:2] == ["hello from the terminal", "second"] or "hello from the terminal" in texts
    assert len(texts) == len(set(e["id"] for e in lines if e["event"] == "conversation_message"))
    human = run(svc, "tail", f"conversation:{conv}").stdout
    assert "message ann: hello from the terminal" in human
    run(svc, "destroy", made["session_id"])


def test_tail_follows_a_session_until_it_finishes(shared_service):
    """tail -f from the start of a session that is still stepping: every step
    once, in order, then its final state, then exit 0."""
    svc = shared_service
    made = svc.create("countdown", config={"n": 25, "interval_s": 0.05})
    result = run(svc, "tail", "-f", "--all", "--until-finished", "--json", made["session_id"], timeout=90)
    events = [json.loads(line) for line in result.stdout.splitlines()]
    iterations = [e["data"]["iteration"] for e in events if e["event"] == "agent_step"]
    assert iterations == list(range(25)), iterations
    assert events[-1]["event"] == "agent_state" and events[-1]["data"]["status"] == "done"
    assert all(e["cursor"] for e in events)
    types = [e["data"]["type"] for e in events if e["event"] == "action"]
    assert types == ["create"]


def test_no_arguments_runs_the_service_and_the_token_is_sent(tmp_path):
    """`agentsvc` with nothing but its environment starts agents.py and app.py
    (as the README's first command does); the CLI sends AGENTSVC_API_TOKEN."""
    port = free_port()
    env = {**os.environ, "AGENTSVC_PORT": str(port), "AGENTSVC_DATA_DIR": str(tmp_path / "data"),
           "AGENTSVC_API_TOKEN": "s3cret", "PYTHONUNBUFFERED": "1"}
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "cli"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def healthy():
            try:
                return requests.get(url + "/api/health", timeout=1).status_code == 200
            except requests.ConnectionError:
                return False
        wait_for(healthy, timeout=60, what="agentsvc to serve")
        cli = [sys.executable, "-m", "cli"]
        no_token = {k: v for k, v in env.items() if k != "AGENTSVC_API_TOKEN"}
        rejected = subprocess.run([*cli, "create", "joke"], cwd=ROOT, env=no_token, capture_output=True, text=True,
                                  timeout=60)
        assert rejected.returncode == 4 and "unauthorized" in rejected.stderr, rejected
        made = subprocess.run([*cli, "create", "joke", "cats", "--json"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
        assert made.returncode == 0, made
        assert json.loads(made.stdout)["status"] == "done"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_approve_deny_and_post_a_result_of_tool_calls(shared_service):
    svc = shared_service
    made = svc.create("scripted", config={"interval_s": 0, "tools": ["add", "human"], "approve": ["add"], "frames": [
        {"tool_calls": [{"name": "add", "args": {"numbers": [1, 2]}}]},
        {"tool_calls": [{"name": "add", "args": {"numbers": [3, 4]}}]},
        {"tool_calls": [{"name": "human", "args": {"question": "colour?"}}]},
        {"text": "end", "done": True}]})
    sid = made["session_id"]

    def waiting(status: str):
        def found():
            rows = svc.get("/api/tool-calls", session_id=sid, status=status).json()["tool_calls"]
            return rows[-1] if rows else None
        return wait_for(found, timeout=60, what=f"a tool call {status}")

    first = waiting("waiting_approval")
    assert run_json(svc, "approve", first["id"])["status"] == "done"
    second = wait_for(lambda: [c for c in svc.get("/api/tool-calls", session_id=sid, status="waiting_approval")
                               .json()["tool_calls"] if c["id"] != first["id"]], timeout=60, what="the second call")[0]
    denied = run(svc, "deny", second["id"], "--reason", "not today").stdout
    assert denied.startswith("deny done")
    external = waiting("waiting_result")
    assert run_json(svc, "result", external["id"], '"blue"')["status"] == "done"
    svc.wait_status(sid, "done", timeout=60)
    rows = {r["id"]: r for r in svc.get("/api/tool-calls", session_id=sid).json()["tool_calls"]}
    assert rows[first["id"]]["status"] == "success" and rows[first["id"]]["result"] == {"sum": 3}
    assert rows[second["id"]]["status"] == "denied" and "not today" in (rows[second["id"]]["error"] or "")
    assert rows[external["id"]]["status"] == "success" and rows[external["id"]]["result"] == "blue"
    # A decision on a call that no longer waits is refused (the API's 409): exit 4, "rejected".
    refused = run(svc, "result", external["id"], '"red"', code=4)
    assert "conflict" in refused.stderr.lower() or "409" in refused.stderr


def test_search_finds_what_a_step_said(shared_service):
    svc = shared_service
    made = svc.create("echo", config={"interval_s": 0.05, "stop_on_done": False})
    svc.control(made["agent_id"], "interrupt", guidance="the zanzibarian lighthouse")
    wait_for(lambda: [s for s in svc.steps(made["session_id"]) if "zanzibarian" in (s.get("text") or "")],
             timeout=60, what="the guidance to be echoed")
    found = wait_for(lambda: run_json(svc, "search", "zanzibarian", "--kind", "step")["hits"], timeout=60,
                     what="the step to be found")
    assert {h["session_id"] for h in found} == {made["session_id"]} and found[0]["kind"] == "step"
    table = run(svc, "search", "zanzibarian").stdout
    assert "zanzibarian" in table and "step" in table
    svc.control(made["agent_id"], "destroy")
