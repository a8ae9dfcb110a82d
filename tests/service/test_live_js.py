"""The browser's side of the protocol with the official JS client: node and the
npm package socket.io-client 4.x (tests/js, installed by scripts/test.sh)
receive live steps of a session from the real service."""
import json
import os
import shutil
import subprocess

import pytest

JS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "js")


@pytest.fixture(scope="module")
def node():
    path = shutil.which("node")
    if path is None:
        pytest.fail("node is not installed (scripts/test.sh needs node and npm)")
    if not os.path.isdir(os.path.join(JS, "node_modules", "socket.io-client")):
        pytest.fail("tests/js/node_modules is missing: run `npm ci` in tests/js (scripts/test.sh does)")
    return path


def test_js_client_receives_live_steps(node, shared_service):
    made = shared_service.create("joke", "tell jokes about otters", config={"interval_s": 0.1})
    run = subprocess.run([node, "live_steps.mjs", shared_service.url, made["session_id"], "5"], cwd=JS,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    steps = json.loads(run.stdout)
    assert len(steps) == 5
    assert all(s["session_id"] == made["session_id"] and "otters" in s["text"] for s in steps)
    iterations = [s["iteration"] for s in steps]
    assert iterations == list(range(iterations[0], iterations[0] + 5)), iterations
    assert [s["seq"] for s in steps] == list(range(steps[0]["seq"], steps[0]["seq"] + 5))
    persisted = {s["id"]: s["iteration"] for s in shared_service.steps(made["session_id"])}
    assert all(persisted[s["id"]] == s["iteration"] for s in steps), "a live step that is not in LanceDB"
    shared_service.control(made["agent_id"], "destroy")


def test_timeline_window_logic_in_node(node):
    """web/static/js/components/step_window.js and core/debounce.js, unit-tested in
    node (tests/js/step_window.test.mjs: random sequences of lost, late and repeated
    live steps and catch-ups, several seeds; the debounce's maximum wait)."""
    run = subprocess.run([node, "--test", "step_window.test.mjs"], cwd=JS, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "# fail 0" in run.stdout
