"""The outside servers a production setup uses, started for a test: redis-server,
an S3-compatible object store (moto_server), app.py under gunicorn.

scripts/test.sh installs redis-server and moto; without them a test is skipped
with its reason on a developer's machine, and fails under CI=true (a fresh CI
machine that lacks them is a broken setup, not a reason to test less).
"""
import os
import shutil
import signal
import subprocess
import sys

import pytest
import requests

from tests.harness import ROOT, free_port, wait_for


def require(program: str) -> str:
    path = shutil.which(program) or (os.path.join(os.path.dirname(sys.executable), program)
                                     if os.path.exists(os.path.join(os.path.dirname(sys.executable), program))
                                     else None)
    if path is None:
        message = f"{program} is not installed (scripts/test.sh installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


class Proc:
    """A server subprocess with its log file; stop() ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, name: str, argv: list[str], log_dir: str, env=None):
        self.name = name
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})

    def stop(self, timeout: float = 20) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(timeout=10)

    def log(self) -> str:
        with open(self.log_path) as f:
            return f"--- {self.name}\n{f.read()[-4000:]}"


def redis_server(log_dir: str) -> tuple[Proc, str]:
    """A throwaway redis-server on 127.0.0.1 (no persistence); returns it and its URL."""
    port = free_port()
    proc = Proc("redis", [require("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no"], log_dir)
    wait_for(lambda: _answers_ping(port), timeout=30, what="redis-server to answer")
    return proc, f"redis://127.0.0.1:{port}/0"


def _answers_ping(port: int) -> bool:
    import redis
    try:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=1).ping()
    except redis.exceptions.ConnectionError:
        return False


def moto_s3(log_dir: str) -> tuple[Proc, str]:
    """moto's S3-compatible server on 127.0.0.1; returns it and its endpoint URL."""
    port = free_port()
    proc = Proc("moto", [require("moto_server"), "-H", "127.0.0.1", "-p", str(port)], log_dir)
    endpoint = f"http://127.0.0.1:{port}"
    wait_for(lambda: _answers_http(endpoint), timeout=60, what="moto_server to answer")
    return proc, endpoint


def _answers_http(url: str) -> bool:
    try:
        requests.get(url, timeout=5)
        return True
    except requests.RequestException:
        return False


def gunicorn_app(name: str, log_dir: str, env: dict) -> tuple[Proc, str]:
    """app.py under gunicorn, as docs/deploy.md runs it; returns it and its URL."""
    port = free_port()
    proc = Proc(name, [sys.executable, "-m", "gunicorn", "-w", "1", "--threads", "100", "-b", f"127.0.0.1:{port}",
                       "--graceful-timeout", "5", "app:wsgi()"], log_dir, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _healthy(url), timeout=60, what=f"{name} (gunicorn) to answer /api/health")
    return proc, url


def _healthy(url: str) -> bool:
    try:
        return requests.get(url + "/api/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False
