"""Running the real service (in subprocesses, or in this process) and waiting
on what it persists."""
import asyncio
import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time

import requests

from tests import forkserver
from tests.llm_endpoints import EndpointsFile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where the suite's CPU goes: with AGENTSVC_SUITE_PROFILE=FILE, every agents.py and
# app.py a Service started appends one JSON line to FILE as it is stopped or killed
# (the test that started it, how long it ran, its CPU seconds).  tests/README.md
# reads such a file per module.
PROFILE = os.environ.get("AGENTSVC_SUITE_PROFILE")
_TICK = os.sysconf("SC_CLK_TCK")


def _profile(proc) -> None:
    """Note what ``proc`` cost, read from /proc while it still runs."""
    started = getattr(proc, "_profile", None)
    if not PROFILE or started is None or proc.poll() is not None:
        return
    try:
        with open(f"/proc/{proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return
    cpu = (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime
    t0 = started.pop("_t0")
    line = {**started, "lived_s": round(time.monotonic() - t0, 1), "cpu_s": round(cpu, 2)}
    proc._profile = None
    with open(PROFILE, "a") as f:
        f.write(json.dumps(line) + "\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float = 120.0, interval: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; return that value.
    The deadline is generous by default: the suite must pass beside a build or a
    soak (a load of 15 on two cores), and a deadline only costs time when it fails."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Service:
    """agents.py and app.py on one data directory, driven over HTTP."""

    def __init__(self, data_dir: str, log_dir: str, agents_args=(), env=None, app_args=()):
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.agents_args = list(agents_args)
        self.app_args = list(app_args)
        # One worker process unless a test asks for more (agents.py's default is one per core):
        # the tests kill, restart and count agents.py by its pid.
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "AGENTSVC_PROCESSES": "1", **(env or {})}
        # The operator's model endpoints, beside the data directory: tests add their fake
        # servers to it (tests/llm_endpoints.py), and both processes read it again when it changes.
        self.env.setdefault("AGENTSVC_LLM_ENDPOINTS", f"{data_dir.rstrip('/')}.endpoints.json")
        self.endpoints = EndpointsFile(self.env["AGENTSVC_LLM_ENDPOINTS"])
        self.agents: subprocess.Popen | forkserver.ForkedProcess | None = None
        self.app: subprocess.Popen | forkserver.ForkedProcess | None = None
        self.workers: list[subprocess.Popen | forkserver.ForkedProcess] = []  # extra agents.py processes (start_worker)
        self.http = requests.Session()
        self._starts = 0

    def _spawn(self, script: str, *args) -> "subprocess.Popen | forkserver.ForkedProcess":
        self._starts += 1
        # From the tests' fork server (tests/forkserver.py): a process of its own, without ~1.3 s of imports.
        proc = forkserver.spawn([os.path.join(ROOT, script), "--data-dir", self.data_dir, *args], cwd=ROOT,
                                env=self.env, log=os.path.join(self.log_dir, f"{script}.{self._starts}.log"))
        proc._profile = {"script": script, "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
                         "_t0": time.monotonic()}
        return proc

    def start(self) -> "Service":
        """Both processes, started together as serve.py starts them (each pays its
        imports, ~3 s of CPU, at the same time); returns once app.py answers."""
        self.app = self._spawn("app.py", "--port", str(self.port), *self.app_args)
        self.start_agents()
        self._wait_healthy()
        return self

    def start_app(self) -> None:
        self.app = self._spawn("app.py", "--port", str(self.port), *self.app_args)
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        # Generous: beside the suite (two workers on two cores) and at nice 10, a
        # start took over 60 s (the long kill loop failed there twice).
        wait_for(lambda: self._healthy() or self.app.poll() is not None, timeout=180,
                 what="app.py to answer /api/health")
        if self.app.poll() is not None:
            raise AssertionError(f"app.py exited with {self.app.returncode}:\n{self.logs()}")

    def start_agents(self, *extra) -> None:
        # Live events go to this service's app.py (a test's own --events-url, later, wins).
        self.agents = self._spawn("agents.py", "--events-url", self.url, *self.agents_args, *extra)

    def start_worker(self, *extra) -> "subprocess.Popen | forkserver.ForkedProcess":
        """One more agents.py on the same data directory; stop() ends it too."""
        proc = self._spawn("agents.py", "--events-url", self.url, *self.agents_args, *extra)
        self.workers.append(proc)
        return proc

    def client(self) -> "Service":
        """This service seen through an HTTP session of its own, for another thread
        (a ``requests.Session`` is not made to be shared between threads)."""
        view = copy.copy(self)
        view.http = requests.Session()
        return view

    def stop_app(self) -> int:
        _profile(self.app)
        self.app.send_signal(signal.SIGTERM)
        return self.app.wait(timeout=20)

    def cli(self, *args, env=None, timeout: float = 60, **popen) -> subprocess.CompletedProcess:
        """Run the ``agentsvc`` command line against this service; its output as text."""
        return subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout, env={**self.env, "AGENTSVC_URL": self.url, **(env or {})}, **popen)

    def _healthy(self) -> bool:
        try:
            return self.http.get(self.url + "/api/health", timeout=5).status_code == 200
        except requests.RequestException:  # refused while starting, or slow (a loaded machine, object storage)
            return False

    def kill_agents(self) -> None:
        """kill -9: no chance to clean up, as in a real crash."""
        _profile(self.agents)
        self.agents.send_signal(signal.SIGKILL)
        self.agents.wait(timeout=10)

    def stop_agents(self) -> int:
        _profile(self.agents)
        self.agents.send_signal(signal.SIGTERM)
        return self.agents.wait(timeout=20)

    def stop(self) -> None:
        for proc in (*self.workers, self.agents, self.app):
            if proc and proc.poll() is None:
                _profile(proc)
                proc.send_signal(signal.SIGTERM)
        for proc in (*self.workers, self.agents, self.app):
            if proc:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()

    def logs(self) -> str:
        out = []
        for name in sorted(os.listdir(self.log_dir)):
            with open(os.path.join(self.log_dir, name)) as f:
                out.append(f"--- {name}\n{f.read()[-4000:]}")
        return "\n".join(out)

    # ---- HTTP helpers ---------------------------------------------------

    def get(self, path: str, **params):
        return self.http.get(self.url + path, params=params, timeout=30)

    def post(self, path: str, json=None, data=None, headers=None):
        return self.http.post(self.url + path, json=json, data=data, headers=headers, timeout=30)

    def create(self, moniker: str = "joke", task: str = "", **fields) -> dict:
        r = self.post("/api/agents", json={"moniker": moniker, "task": task, **fields})
        assert r.status_code == 202, r.text
        return r.json()

    def action(self, action_id: str, timeout: float = 60.0) -> dict:
        """Wait until an action is finished and return it."""
        def finished():
            a = self.get(f"/api/actions/{action_id}").json()
            return a if a["status"] in ("done", "failed") else None
        return wait_for(finished, timeout=timeout, what=f"action {action_id}")

    def control(self, agent_id: str, verb: str, **body) -> dict:
        r = self.post(f"/api/agents/{agent_id}/{verb}", json=body)
        assert r.status_code == 202, r.text
        return self.action(r.json()["action_id"])

    def session(self, session_id: str) -> dict:
        return self.get(f"/api/sessions/{session_id}").json()

    def steps(self, session_id: str, **params) -> list[dict]:
        out, offset = [], 0
        while True:
            page = self.get("/api/agent-steps", session_id=session_id, limit=1000, offset=offset, **params).json()
            out += page["steps"]
            if len(page["steps"]) < 1000:
                return out
            offset += 1000

    def wait_steps(self, session_id: str, n: int, timeout: float = 180.0, interval: float = 0.05) -> list[dict]:
        return wait_for(lambda: (s := self.steps(session_id)) and len(s) >= n and s, timeout=timeout,
                        interval=interval, what=f"{n} steps of session {session_id}")

    def settled_step_count(self, session_id: str, quiet_s: float = 1.0, timeout: float = 60.0) -> int:
        """The step count once it has stopped changing for ``quiet_s``.

        A pause or destroy takes effect at the step boundary, so a step already
        in flight may still land after the action is done; how long that takes
        depends on how loaded the machine is. A session that keeps stepping
        never settles, and this raises.
        """
        count, since = len(self.steps(session_id)), time.monotonic()
        deadline = since + timeout
        while time.monotonic() - since < quiet_s:
            if time.monotonic() > deadline:
                raise AssertionError(f"steps of session {session_id} kept coming for {timeout}s")
            time.sleep(0.1)
            now = len(self.steps(session_id))
            if now != count:
                count, since = now, time.monotonic()
        return count

    def wait_status(self, session_id: str, *statuses: str, timeout: float = 180.0) -> dict:
        return wait_for(lambda: (s := self.session(session_id)).get("status") in statuses and s,
                        timeout=timeout, what=f"session {session_id} to be {statuses}")


# ---- in this process ------------------------------------------------------

async def until(predicate, timeout: float = 45.0, what: str = "condition"):
    """Like :func:`wait_for`, for coroutines: the predicate runs in a thread."""
    deadline = time.monotonic() + timeout
    while not (value := await asyncio.to_thread(predicate)):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)
    return value


def finished(store, action_id: str) -> dict | None:
    action = store.actions.get(action_id)
    return action if action["status"] in ("done", "failed") else None


def run_in_process(store, scenario, monikers=None, **options):
    """Run ``scenario(service)`` while an AgentService polls ``store`` in this
    process; returns what the scenario returns."""
    from monikers import default_registry
    from runtime.base.aio import run_bounded
    from runtime.worker.service import AgentService

    async def main():
        service = AgentService(store, monikers or default_registry(), **options)
        stopping = asyncio.Event()
        task = asyncio.create_task(service.run(stopping))
        try:
            return await scenario(service)
        finally:
            stopping.set()
            await task
    return run_bounded(main(), grace_s=1.0)
