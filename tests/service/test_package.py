"""The package, installed as a user installs it, runs the whole service.

What this proves: an sdist made from the checkout holds what a wheel needs,
the wheel built from that sdist holds what the service needs at run time (the
dashboard's templates and static files, the shipped profiles, the generated
BAML client), and ``agentsvc serve`` from that wheel, in a fresh virtualenv
and an empty folder, serves the dashboard and its assets and runs an agent
with its data in ``--data-dir``.  Nothing of the checkout is on the installed
service's path: the test checks its modules resolve inside the new virtualenv.

How, kept offline-cheap: the sdist is made by setuptools' own PEP 517 hook
(what ``python -m build --sdist`` calls; ``build`` is not a dependency of the
project) from a copy of the working tree, so the checkout is not written to;
the wheel is built from the sdist by pip, with build isolation (pip fetches the
build backend pyproject.toml names, as it does for a user).  The new virtualenv
sees the project's dependencies through a ``.pth`` file naming ``.venv``'s
site-packages instead of installing them, and the wheel goes in with
``pip install --no-deps``.
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile

import pytest
import requests
import yaml

from tests.harness import ROOT, free_port, wait_for
from tests.servers import require

# What a copy of the working tree leaves out: virtualenvs, caches, earlier builds.
SKIP = shutil.ignore_patterns(".git", ".venv", ".venv-*", "node_modules", "__pycache__", "*.egg-info", "build",
                              "dist", "data", ".pytest_cache", ".schemathesis")


def run(cmd, **kw) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert result.returncode == 0, f"{' '.join(map(str, cmd))} exited {result.returncode}\n{result.stdout}\n" \
                                   f"{result.stderr}"
    return result


def make_sdist(tmp_path) -> str:
    """The sdist, by setuptools' build_sdist hook, from a copy of the working tree."""
    tree = tmp_path / "src"
    shutil.copytree(ROOT, tree, ignore=SKIP, symlinks=True)
    out = tmp_path / "dist"
    out.mkdir()
    hook = f"from setuptools import build_meta; print(build_meta.build_sdist({str(out)!r}))"
    name = run([sys.executable, "-c", hook], cwd=tree).stdout.strip().splitlines()[-1]
    return str(out / name)


def make_wheel(sdist: str, tmp_path) -> str:
    """The wheel, built by pip from the sdist (so the sdist must hold all that the wheel needs)."""
    out = tmp_path / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
         "-w", str(out), sdist])
    [wheel] = glob.glob(str(out / "agentsvc-*.whl"))
    return wheel


def make_venv(tmp_path) -> str:
    """A fresh virtualenv that sees .venv's packages (the dependencies) without holding them."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    with open(os.path.join(site, "agentsvc_test_deps.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    return python


def served(url: str):
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


# ~30 s of CPU; 75 s of wall time beside a load of 17, 165 s beside 26 (pip's isolated build is most of it).
@pytest.mark.timeout(900)
def test_wheel_in_a_fresh_virtualenv_serves_the_dashboard_and_runs_an_agent(tmp_path):
    sdist = make_sdist(tmp_path)
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    for needed in ("web/templates/index.html", "web/static/js/main.js", "baml_src/step.baml",
                   "profiles/planner.yaml", "deploy/Containerfile"):
        assert any(n.endswith("/" + needed) for n in names), f"the sdist lacks {needed}"

    wheel = make_wheel(sdist, tmp_path)
    held = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("web/templates/index.html", "web/static/vendor/socket.io.min.js", "profiles/planner.yaml",
                   "baml_client/inlinedbaml.py", "agents.py", "app.py"):
        assert needed in held, f"the wheel lacks {needed}"
    assert not [n for n in held if n.startswith("tests/")], "the wheel carries the tests"

    python = make_venv(tmp_path)
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "--quiet",
         "--disable-pip-version-check", wheel])
    venv = os.path.dirname(os.path.dirname(python))

    empty = tmp_path / "empty"
    empty.mkdir()
    # A user's environment: none of the suite's settings (AGENTSVC_PLUGINS names tests.plugins, which a
    # wheel does not carry and the service must not need), nothing that puts the checkout on the path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("AGENTSVC_")}
    env["PYTHONUNBUFFERED"] = "1"
    where = run([python, "-c", "import json, sys, agents, app, serve, settings, api.routes.dashboard as d, web; "
                 "print(json.dumps(sys.path)); [print(m.__file__) for m in (agents, app, serve, settings, d, web)]"],
                cwd=empty, env=env).stdout.splitlines()
    assert ROOT not in json.loads(where[0]), "the checkout is on the installed service's path"
    for path in where[1:]:
        assert path.startswith(venv + os.sep), f"{path} is not the installed wheel's"

    port, data = free_port(), tmp_path / "data"
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([os.path.join(venv, "bin", "agentsvc"), "serve", "--port", str(port),
                             "--data-dir", str(data)], cwd=empty, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_for(lambda: served(url + "/readyz") or proc.poll() is not None, timeout=180, what="agentsvc to serve")
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        page = requests.get(url + "/", timeout=30)
        assert page.status_code == 200 and "<html" in page.text.lower(), (page.status_code, page.text[:300])
        for asset in ("/assets/js/main.js", "/assets/dashboard.css", "/assets/vendor/socket.io.min.js"):
            assert asset in page.text, f"the page does not link {asset}"
            got = requests.get(url + asset, timeout=30)
            assert got.status_code == 200 and got.content, (asset, got.status_code)
        profiles = requests.get(url + "/api/profiles", timeout=30).json()["profiles"]
        assert {"planner", "researcher", "orchestrator"} <= {p["name"] for p in profiles if p["ok"]}, profiles

        made = requests.post(url + "/api/agents", json={"moniker": "countdown", "task": "count",
                                                        "config": {"n": 3, "interval_s": 0}}, timeout=30)
        assert made.status_code == 202, made.text  # accepted: the create is an action on the queue
        sid = made.json()["session_id"]

        def stepped():
            steps = requests.get(url + "/api/agent-steps", params={"session_id": sid}, timeout=30).json()["steps"]
            return len(steps) >= 3 and steps
        wait_for(stepped, timeout=120, what="the agent to step")
        assert os.listdir(data), "nothing was written to --data-dir"
        assert not os.listdir(empty), f"the service wrote into the working folder: {os.listdir(empty)}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        log.close()
    assert code == 0, (tmp_path / "serve.log").read_text()[-3000:]
    # Nothing left behind: the group serve.py led (agents.py, app.py) is gone.
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            os.killpg(proc.pid, 0)
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("a process of the service outlived agentsvc serve")
    except ProcessLookupError:
        pass


# deploy/: no container engine can be installed here, so the image is linted
# (hadolint) and the compose file's layout is checked against the code.
DEPLOY = os.path.join(ROOT, "deploy")


def test_containerfile_passes_hadolint():
    hadolint = require("hadolint", os.path.join(ROOT, ".venv-hadolint", "bin", "hadolint"),
                       installer="scripts/test_deps/hadolint.sh")
    result = subprocess.run([hadolint, "--no-color", "--failure-threshold", "info",
                             os.path.join(DEPLOY, "Containerfile")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_file_is_the_production_layout_and_names_what_the_code_reads():
    import agents
    with open(os.path.join(DEPLOY, "compose.yaml")) as f:
        compose = yaml.safe_load(f)
    services = compose["services"]
    with open(os.path.join(DEPLOY, "entrypoint.sh")) as f:
        entrypoint = f.read()
    source = "".join(open(p).read() for p in glob.glob(os.path.join(ROOT, "**", "*.py"), recursive=True)
                     if "/tests/" not in p and "/.venv" not in p and "/bench/" not in p)

    for name, service in services.items():
        image = service["image"]
        assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), f"{name}: unpinned {image}"
        if "build" in service:
            build = service["build"]
            context = os.path.normpath(os.path.join(DEPLOY, build["context"]))
            assert os.path.isfile(os.path.join(context, build["dockerfile"])), f"{name}: no {build['dockerfile']}"
            assert f"\n  {service['command'][0]})" in entrypoint, f"{name}: entrypoint.sh has no {service['command']}"
        for key in service.get("environment", {}):
            if key.startswith("AGENTSVC_"):
                assert f'"{key}"' in source, f"{name}: the code reads no {key}"

    def host(url: str) -> str:
        return url.split("://", 1)[1].split("/", 1)[0].split(":", 1)[0]

    apps = [n for n, s in services.items() if s.get("command", [None])[0] == "app"]
    [workers] = [s for s in services.values() if s.get("command", [None])[0] == "agents"]
    assert len(apps) >= 2 and workers["deploy"]["replicas"] >= 2, "not several app instances and workers"
    agents.parse_args(workers["command"][1:])  # the worker's flags are agents.py's
    for service in (services[apps[0]], workers):
        env = service["environment"]
        assert env["AGENTSVC_DB_URI"].startswith("s3://")
        storage = json.loads(env["AGENTSVC_STORAGE_OPTIONS"])
        assert host(storage["aws_endpoint"]) in services
        assert host(env["AGENTSVC_MESSAGE_QUEUE"]) in services
    assert host(workers["environment"]["AGENTSVC_EVENTS_URL"]) in apps
