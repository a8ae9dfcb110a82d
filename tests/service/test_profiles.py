"""Agent profiles against the real service.

One service for the module, started on a profiles directory of its own,
with the fake OpenAI server as the LLM and a test-only python observer
installed under the ``agentsvc.observers`` entry-point group (a dist-info on
PYTHONPATH, exactly as an installed package would register it).
"""
import hashlib
import json
import os
import signal
import textwrap
from datetime import datetime, timezone

import pytest

from tests.fake_openai import FakeOpenAI, Reply, by_model, scripted
from tests.harness import Service, wait_for

PLUGIN = '''
def explode(facts, args):
    raise ValueError("observer exploded on purpose at iteration %d" % facts.iteration)
'''


def frame(**fields) -> Reply:
    return Reply(json.dumps({"step": "0", "next_step": "1", "state": {}, "done": False, **fields}))


def install_plugin(root) -> str:
    """A package that registers the observer ``explode`` under agentsvc.observers."""
    site = root / "plugin-site"
    (site / "explode_observer-0.1.dist-info").mkdir(parents=True)
    (site / "explode_observer.py").write_text(PLUGIN)
    (site / "explode_observer-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: explode-observer\nVersion: 0.1\n")
    (site / "explode_observer-0.1.dist-info" / "entry_points.txt").write_text(
        "[agentsvc.observers]\nexplode = explode_observer:explode\n")
    return str(site)


def write(directory, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return path


def file_hash(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("profiles")
    (root / "logs").mkdir()
    profiles = root / "profiles"
    profiles.mkdir()
    fake = FakeOpenAI(by_model({
        "m-helper": scripted(
            frame(text="adding and failing", tool_calls=[{"name": "add", "args": {"numbers": [1, 2]}},
                                                          {"name": "fail", "args": {"message": "nope"}}]),
            frame(step="1", next_step="2", text="thinking"),
            then=frame(step="2", next_step="3", text="still thinking")),
    })).start()
    write(profiles, "helper.yaml", f"""
        name: helper
        description: the issue's test 1
        moniker: baml
        llm: {{endpoint: helper-llm, model: m-helper, temperature: 0.1}}
        prompt:
          - text: STATIC-SEGMENT-7 is the first thing you read.
          - template: "Agent {{{{ agent_name }}}} on {{{{ date }}}} doing: {{{{ task }}}}"
        tools: {{allowed: [add]}}
        limits: {{max_steps: 3}}
        interval_s: 0
        """)
    frames = json.dumps([{"text": f"line {i}"} for i in range(50)])
    write(profiles, "script.yaml", f"""
        name: script
        moniker: scripted
        config: {{frames: {frames}}}
        limits: {{max_steps: 4}}
        interval_s: 0
        overridable: [interval_s, max_steps, tools]
        tools: {{allowed: [add, human]}}
        """)
    write(profiles, "watcher.yaml", f"""
        name: watcher
        moniker: scripted
        config: {{frames: {frames}}}
        interval_s: 0
        tools: {{allowed: [add]}}
        observers:
          - name: boom
            when: after_step
            python: explode
          - name: reminder
            when: after_step
            if: {{no_tool_calls_for: 2}}
            then: {{note: "Step {{{{ iteration }}}}: remember your tools: {{{{ tools }}}}"}}
          - name: stopper
            when: before_step
            if: {{iteration_at_least: 3}}
            then: {{stop: enough steps}}
        """)
    write(profiles, "chat.yaml", """
        name: chat
        moniker: scripted
        config:
          frames: [{text: "Which colour do you want?"}, {text: "noted"}, {text: "bye", done: true}]
        interval_s: 0
        flow:
          - if: {text_has_question: true}
            then: wait_user
          - then: end_turn
        """)
    write(profiles, "asker.yaml", """
        name: asker
        moniker: scripted
        config:
          frames: [{text: "Shall I continue?"}, {text: "continuing", done: true}]
        interval_s: 0
        observers:
          - name: ask
            when: after_step
            if: {text_has_question: true}
            then: {ask_user: true}
        """)
    write(profiles, "pauser.yaml", f"""
        name: pauser
        moniker: scripted
        config: {{frames: {frames}}}
        interval_s: 0
        limits: {{max_steps: 4}}
        observers:
          - name: hold
            when: before_step
            once: true
            if: {{iteration_at_least: 1}}
            then: {{pause: check in with a human}}
        """)
    # broken ones: a syntax error, an unknown key, an unknown tool
    write(profiles, "syntax.yaml", """
        name: syntax
        moniker: joke
        prompt:
          - text: "never closed
        """)
    write(profiles, "unknownkey.yaml", """
        name: unknownkey
        moniker: joke
        limits:
          max_stepz: 3
        """)
    write(profiles, "badtool.yaml", """
        name: badtool
        moniker: joke
        tools:
          allowed: [add, no_such_tool]
        """)
    svc = Service(str(root / "data"), str(root / "logs"), app_args=["--profiles-dir", str(profiles)],
                  env={"PYTHONPATH": install_plugin(root)})
    svc.profiles_dir = str(profiles)
    svc.endpoints.serve(fake, name="helper-llm")  # the operator's, before the profile naming it is read
    svc.start()
    try:
        yield svc, fake
    finally:
        svc.stop()
        fake.stop()


def create(svc, profile: str, task: str = "", **fields) -> dict:
    r = svc.post("/api/agents", json={"profile": profile, "task": task, **fields})
    assert r.status_code == 202, r.text
    return r.json()


# ---- 1. a profile runs with its prompt, tools and limits; edits and reloads ----

def test_a_profile_runs_with_its_prompt_segments_tools_and_limits(env):
    svc, fake = env
    made = create(svc, "helper", "sum things", name="helper-one")
    done = svc.wait_status(made["session_id"], "done", "error", timeout=60)
    assert (done["status"], done["status_reason"]) == ("done", "max_steps"), done
    assert len(svc.steps(made["session_id"])) == 3  # limits.max_steps
    # the profile's name and content hash are recorded on the session
    profile = done["config"]["profile"]
    assert profile["name"] == "helper"
    assert profile["hash"] == file_hash(os.path.join(svc.profiles_dir, "helper.yaml"))
    assert done["config"]["tools"] == ["add"] and done["config"]["llm"]["temperature"] == 0.1
    # the fake LLM saw the segments, rendered, in the system message
    asked = [r for r in fake.requests if r.model == "m-helper"  # the steps' requests, not the summary's
             and ((r.body.get("response_format") or {}).get("json_schema") or {}).get("name") == "RunMonikerStep"]
    assert len(asked) == 3
    system = asked[0].body["messages"][0]
    assert system["role"] == "system"
    today = datetime.now(timezone.utc).date().isoformat()
    assert "STATIC-SEGMENT-7 is the first thing you read." in system["content"]
    assert f"Agent helper-one on {today} doing: sum things" in system["content"]
    # the allowed tool ran; the other was denied
    calls = {c["name"]: c for c in svc.get("/api/tool-calls", session_id=made["session_id"]).json()["tool_calls"]}
    assert calls["add"]["status"] == "success" and calls["add"]["result"] == {"sum": 3}
    assert calls["fail"]["status"] == "denied" and "not allowed" in calls["fail"]["error"]


def test_editing_the_file_changes_no_running_session_and_reload_picks_up_changes(env):
    svc, _ = env
    path = os.path.join(svc.profiles_dir, "script.yaml")
    old_hash = file_hash(path)
    first = create(svc, "script", config={"interval_s": 0.3})  # resolved now, whatever happens to the file
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("max_steps: 4", "max_steps: 2"))
    r = svc.post("/api/profiles/reload")
    assert r.status_code == 200
    listed = {p["name"]: p for p in r.json()["profiles"]}
    assert listed["script"]["hash"] == file_hash(path) != old_hash
    second = create(svc, "script")
    a = svc.wait_status(first["session_id"], "done", timeout=60)
    b = svc.wait_status(second["session_id"], "done", timeout=60)
    assert len(svc.steps(first["session_id"])) == 4 and a["config"]["profile"]["hash"] == old_hash
    assert len(svc.steps(second["session_id"])) == 2 and b["config"]["profile"]["hash"] == file_hash(path)
    # a new file: unknown until a reload (POST), then usable; another one through SIGHUP
    write(svc.profiles_dir, "fresh.yaml", "name: fresh\nmoniker: countdown\nconfig: {n: 1}\ninterval_s: 0\n")
    assert svc.get("/api/profiles/fresh").status_code == 404
    assert svc.post("/api/agents", json={"profile": "fresh"}).status_code == 400
    svc.post("/api/profiles/reload")
    assert svc.get("/api/profiles/fresh").json()["ok"] is True
    svc.wait_status(create(svc, "fresh")["session_id"], "done", timeout=90)
    write(svc.profiles_dir, "hup.yaml", "name: hup\nmoniker: joke\n")
    svc.app.send_signal(signal.SIGHUP)
    wait_for(lambda: svc.get("/api/profiles/hup").status_code == 200, timeout=90, what="SIGHUP reload")


def test_config_overrides_only_what_the_profile_allows(env):
    svc, _ = env
    ok = create(svc, "script", config={"max_steps": 1, "tools": ["add"]})
    done = svc.wait_status(ok["session_id"], "done", timeout=90)
    assert done["config"]["max_steps"] == 1 and done["config"]["tools"] == ["add"]
    refused = {
        "frames": svc.post("/api/agents", json={"profile": "script", "config": {"frames": []}}),
        "wider tools": svc.post("/api/agents", json={"profile": "script", "config": {"tools": ["fail"]}}),
        "profile key": svc.post("/api/agents", json={"profile": "script", "config": {"profile": {"name": "x"}}}),
        "both": svc.post("/api/agents", json={"profile": "script", "moniker": "joke"}),
        "neither": svc.post("/api/agents", json={"task": "x"}),
    }
    for what, r in refused.items():
        assert r.status_code == 400, (what, r.text)
    assert "config.frames" in refused["frames"].json()["error"]["message"]
    assert "may only narrow" in refused["wider tools"].json()["error"]["message"]


# ---- 2. broken profiles --------------------------------------------------------

def test_broken_profiles_are_refused_with_file_line_and_field_and_the_rest_still_serve(env):
    svc, _ = env
    listed = {p["name"]: p for p in svc.get("/api/profiles").json()["profiles"]}
    expect = {"syntax": ("syntax.yaml", None, "YAML syntax error"),
              "unknownkey": ("unknownkey.yaml", "limits.max_stepz", "unknown key"),
              "badtool": ("badtool.yaml", "tools.allowed[1]", "no tool 'no_such_tool'")}
    for name, (file, field, why) in expect.items():
        entry = listed[name]
        assert entry["ok"] is False, entry
        error = entry["errors"][0]
        assert error["file"] == file and error["line"] and why in error["message"], error
        assert error["field"] == field, error
        r = svc.post("/api/agents", json={"profile": name})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_profile", r.text
        message = r.json()["error"]["message"]
        assert f"{file}:{error['line']}" in message and why in message, message
        detail = svc.get(f"/api/profiles/{name}").json()
        assert detail["errors"] == entry["errors"]
    assert listed["unknownkey"]["errors"][0]["line"] == 5  # (each file starts with an empty line)
    assert listed["badtool"]["errors"][0]["line"] == 5
    assert svc.post("/api/agents", json={"profile": "nosuch"}).status_code == 400
    assert svc.get("/api/profiles/NOT..valid").status_code == 404
    # logged at start, and the good profiles still work
    app_log = open(os.path.join(svc.log_dir, sorted(f for f in os.listdir(svc.log_dir) if f.startswith("app"))[0])
                   ).read()
    assert "profile unknownkey refused: unknownkey.yaml:5: limits.max_stepz: unknown key" in app_log
    assert listed["script"]["ok"] is True
    made = create(svc, "script", config={"max_steps": 1})
    svc.wait_status(made["session_id"], "done", timeout=90)
    # the document offers a create variant per usable profile only
    variants = svc.get("/api/openapi.json").json()["components"]["schemas"]
    assert "CreateAgentRequest_profile_script" in variants
    assert "CreateAgentRequest_profile_badtool" not in variants


# ---- 4. observers ------------------------------------------------------------------

def test_observers_stop_remind_and_a_failing_one_does_not_wedge_the_session(env):
    svc, _ = env
    made = create(svc, "watcher")
    stopped = svc.wait_status(made["session_id"], "stopped", "error", timeout=60)
    assert (stopped["status"], stopped["status_reason"]) == ("stopped", "observer"), stopped
    steps = svc.steps(made["session_id"])
    assert [s["iteration"] for s in steps] == [0, 1, 2]  # the before_step observer stopped it at step 3
    # the failing python observer: recorded on every step row, never fired, session went on
    for s in steps:
        boom = next(o for o in s["observers"]["after"] if o["name"] == "boom")
        assert boom["fired"] is False and "exploded on purpose" in boom["error"], s["observers"]
    # the reminder fired after the second step without tool calls, and reached the next frame_in
    fired = [s["iteration"] for s in steps
             if any(o["name"] == "reminder" and o["fired"] for o in s["observers"]["after"])]
    assert fired == [1, 2]
    inbox = steps[2]["inputs"]["inbox"]
    assert inbox == [{"kind": "observer_note", "text": "Step 1: remember your tools: add",
                      "source": {"observer": "reminder", "when": "after_step", "iteration": 1}}]
    assert [g["action_id"] for g in steps[2]["guidance"]] == [
        f"observer:{made['session_id']}:1:reminder:after"]
    # the note of the last step stays queued (no step consumed it); no step consumed one twice
    pending = svc.session(made["session_id"])["pending_guidance"]
    assert [p["action_id"] for p in pending] == [f"observer:{made['session_id']}:2:reminder:after"]


def test_an_observer_asks_the_user_and_another_pauses_once(env):
    svc, _ = env
    asked = create(svc, "asker")
    waiting = svc.wait_status(asked["session_id"], "waiting", "done", timeout=90)
    assert (waiting["status"], waiting["status_reason"]) == ("waiting", "user"), waiting
    step0 = svc.steps(asked["session_id"])[0]
    assert step0["observers"]["after"] == [{"name": "ask", "fired": True, "action": "ask_user",
                                            "text": "Shall I continue?", "when": "after_step"}]
    svc.control(asked["agent_id"], "interrupt", guidance="yes, go on")
    assert svc.wait_status(asked["session_id"], "done", timeout=90)["status_reason"] == "done"

    paused = create(svc, "pauser")
    held = svc.wait_status(paused["session_id"], "paused", "done", timeout=90)
    assert (held["status"], held["status_reason"]) == ("paused", "observer"), held
    assert svc.settled_step_count(paused["session_id"], quiet_s=1.0) == 1
    svc.control(paused["agent_id"], "resume")
    done = svc.wait_status(paused["session_id"], "done", timeout=90)  # `once`: not paused again
    assert done["status_reason"] == "max_steps" and len(svc.steps(paused["session_id"])) == 4
    before = svc.steps(paused["session_id"])[1]["observers"]["before"]
    assert before == [{"name": "hold", "fired": True, "action": "pause", "text": "check in with a human",
                       "when": "before_step"}]


# ---- 5. the flow decider ------------------------------------------------------------

def test_flow_waits_for_the_user_and_a_message_continues_it(env):
    svc, _ = env
    made = create(svc, "chat")
    waiting = svc.wait_status(made["session_id"], "waiting", "done", "error", timeout=90)
    assert (waiting["status"], waiting["status_reason"]) == ("waiting", "user"), waiting
    assert svc.settled_step_count(made["session_id"], quiet_s=1.0) == 1
    step0 = svc.steps(made["session_id"])[0]
    assert step0["observers"]["flow"] == {"decision": "wait_user", "rule": 0}
    svc.control(made["agent_id"], "interrupt", guidance="red, please")
    # the message continues it; step 1 ("noted", no question) ends the turn: waiting, reason idle
    idle = svc.wait_status(made["session_id"], "waiting", timeout=90)
    wait_for(lambda: svc.session(made["session_id"])["status_reason"] == "idle", what="end of turn")
    steps = svc.steps(made["session_id"])
    assert len(steps) == 2 and steps[1]["inputs"]["inbox"][0]["text"] == "red, please", steps
    assert steps[1]["observers"]["flow"] == {"decision": "end_turn", "rule": 1}
    assert idle["status"] == "waiting"
    # any inbox item ends an idle wait; the last frame is done
    svc.control(made["agent_id"], "interrupt", guidance="anything else?")
    done = svc.wait_status(made["session_id"], "done", timeout=90)
    assert done["status_reason"] == "done" and len(svc.steps(made["session_id"])) == 3


# ---- the command line ------------------------------------------------------------

def test_the_cli_lists_profiles_and_creates_from_one(env):
    svc, _ = env
    listed = svc.cli("profiles", "--json")
    assert listed.returncode == 0, listed.stderr
    by_name = {p["name"]: p for p in json.loads(listed.stdout)["profiles"]}
    assert by_name["script"]["ok"] and not by_name["badtool"]["ok"]
    table = svc.cli("profiles").stdout
    assert "badtool.yaml:5" in table and "no_such_tool" in table
    made = svc.cli("create", "--profile", "script", "a task", "--set", "max_steps=1", "--json")
    assert made.returncode == 0, made.stderr
    session = svc.wait_status(json.loads(made.stdout)["session_id"], "done", timeout=90)
    assert session["task"] == "a task" and session["config"]["profile"]["name"] == "script"
    refused = svc.cli("create", "--profile", "badtool", "x")
    assert refused.returncode == 4 and "badtool.yaml:5" in refused.stderr, refused.stderr


# ---- the dashboard ----------------------------------------------------------------

@pytest.mark.browser  # drives chromium: deselect with -m "not browser"
def test_the_timeline_shows_what_observers_and_flow_rules_did(env):
    """In a real browser (Debian's chromium): a fired observer, a failing one
    (skipped, with its error) and a flow decision, inside their steps."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from tests.browsing import ARGS, CHROMIUM, be_patient

    svc, _ = env
    watched = create(svc, "watcher")
    svc.wait_status(watched["session_id"], "stopped", timeout=60)
    chat = create(svc, "chat")
    svc.wait_status(chat["session_id"], "waiting", timeout=90)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            be_patient(page.context)
            errors = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{svc.url}/#/session/{watched['session_id']}")
            step1 = page.locator("[data-testid=step][data-iteration='1']")
            sync_api.expect(step1.get_by_test_id("observer-fired")).to_contain_text(
                "reminder added a note: Step 1: remember your tools: add", timeout=30_000)
            sync_api.expect(step1.get_by_test_id("observer-failed")).to_contain_text("exploded on purpose")
            page.goto(f"{svc.url}/#/session/{chat['session_id']}")
            sync_api.expect(page.locator("[data-testid=step][data-iteration='0']").get_by_test_id(
                "flow-decision")).to_have_text("flow: wait for the user", timeout=30_000)
            assert not errors, errors
        finally:
            browser.close()
