"""The scale-out paths, measured: LanceDB on S3-compatible storage (moto_server
on 127.0.0.1) against a local directory, and live events through Redis between
two app.py instances (gunicorn) against one.

    python -m bench.bench_scaleout [--n 20] [--agents 8] [--seconds 5]

Per storage (local, s3 with --watch-interval 0.02 and 0.2):
- ``applied``: an HTTP pause/resume's created_at -> processed_at (accepted ->
  applied, both stamped by this machine's clock), n actions on one agent while
  ``--agents`` others step with interval 0.
- ``steps_per_s``: steps persisted per second by those agents (one worker).
Redis: ``step_event``: a step's created_at -> a Socket.IO client receiving it,
on instance B (the one agents.py relays to) and on instance A (through Redis).

moto is an in-memory Python server on the same 2 cores, not S3: its figures
say what the object-storage code path costs (no inotify, slower commits), not
what a real bucket does.
"""
import argparse
import json
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone

from bench.common import emit, machine, progress, summary, ts
from tests.harness import Service, wait_for
from tests.servers import Proc, gunicorn_app, moto_s3, redis_server


def storage_run(label: str, n: int, agents: int, seconds: float, env: dict, agents_args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as root:
        import os
        os.makedirs(f"{root}/logs")
        svc = Service(f"{root}/data", f"{root}/logs", agents_args=agents_args, env=env).start()
        try:
            target = svc.create("echo", config={"interval_s": 1})
            svc.wait_status(target["session_id"], "running", timeout=120)
            busy = [svc.create("joke", f"s{i}", config={"interval_s": 0}) for i in range(agents)]
            for b in busy:
                svc.wait_steps(b["session_id"], 1, timeout=120)
            before = sum(svc.session(b["session_id"])["iteration"] for b in busy)
            started = time.monotonic()
            applied = []
            for i in range(n):
                r = svc.post(f"/api/agents/{target['agent_id']}/{'pause' if i % 2 == 0 else 'resume'}", json={})
                action = svc.action(r.json()["action_id"], timeout=120)
                applied.append((ts(action["processed_at"]) - ts(action["created_at"])).total_seconds() * 1000)
            time.sleep(max(0.0, seconds - (time.monotonic() - started)))
            after = sum(svc.session(b["session_id"])["iteration"] for b in busy)
            rate = (after - before) / (time.monotonic() - started)
            return {"storage": label, "agents_args": agents_args, "applied": summary(applied),
                    "steps_per_s": round(rate, 1)}
        finally:
            svc.stop()


def redis_run(n_steps: int) -> dict:
    import socketio
    with tempfile.TemporaryDirectory() as root:
        import os
        os.makedirs(f"{root}/logs")
        procs: list[Proc] = []
        try:
            redis_proc, url = redis_server(f"{root}/logs")
            procs.append(redis_proc)
            env = {"AGENTSVC_DATA_DIR": f"{root}/data", "AGENTSVC_MESSAGE_QUEUE": url}
            a, url_a = gunicorn_app("app-a", f"{root}/logs", env)
            b, url_b = gunicorn_app("app-b", f"{root}/logs", env)
            procs += [a, b]
            procs.append(Proc("agents", [sys.executable, "agents.py", "--data-dir", f"{root}/data",
                                         "--events-url", url_b], f"{root}/logs"))
            import requests
            made = requests.post(url_b + "/api/agents", json={"moniker": "joke", "config": {"interval_s": 0.05}},
                                 timeout=30).json()
            latencies = {"A (through Redis)": [], "B (local)": []}
            clients = []
            for name, url_x in (("A (through Redis)", url_a), ("B (local)", url_b)):
                c = socketio.Client()
                sink = latencies[name]
                lock = threading.Lock()

                def on_step(payload, sink=sink, lock=lock):
                    got = datetime.now(timezone.utc)
                    with lock:
                        sink.append((got - ts(payload["data"]["created_at"])).total_seconds() * 1000)
                c.on("agent_step", on_step)
                c.connect(url_x, transports=["websocket"], wait_timeout=30)
                c.call("subscribe", {"rooms": [f"session:{made['session_id']}"]}, timeout=30)
                clients.append(c)
            wait_for(lambda: all(len(v) >= n_steps for v in latencies.values()), timeout=120, what="steps")
            for c in clients:
                c.disconnect()
            return {"step_event": {k: summary(v) for k, v in latencies.items()}}
        finally:
            for p in reversed(procs):
                p.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20, help="control actions per storage")
    parser.add_argument("--agents", type=int, default=8, help="busy agents stepping meanwhile")
    parser.add_argument("--seconds", type=float, default=5.0, help="at least this long per storage run")
    args = parser.parse_args(argv)
    result = {"bench": "scaleout", "machine": machine(), "runs": []}
    with tempfile.TemporaryDirectory() as root:
        moto, endpoint = moto_s3(root)
        try:
            import boto3
            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                         aws_secret_access_key="testing").create_bucket(Bucket="bench")
            options = {"aws_endpoint": endpoint, "aws_region": "us-east-1", "aws_access_key_id": "testing",
                       "aws_secret_access_key": "testing", "allow_http": "true"}
            plans = [("local", {}, []),
                     ("s3", {"AGENTSVC_DB_URI": "s3://bench/w002", "AGENTSVC_STORAGE_OPTIONS": json.dumps(options)},
                      ["--watch-interval", "0.02"]),
                     ("s3", {"AGENTSVC_DB_URI": "s3://bench/w02", "AGENTSVC_STORAGE_OPTIONS": json.dumps(options)},
                      ["--watch-interval", "0.2"])]
            for label, env, agents_args in plans:
                progress(f"{label} {agents_args}")
                result["runs"].append(storage_run(label, args.n, args.agents, args.seconds, env, agents_args))
                progress(json.dumps(result["runs"][-1]))
        finally:
            moto.stop()
    progress("redis")
    result["redis"] = redis_run(30)
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
