"""How long a control action takes to apply: accepted (created_at) -> applied (processed_at).

    python -m bench.bench_control_latency [--n 20] [--busy 20]

Starts agents.py and app.py on a temporary directory, alternates pause/resume on
one agent n times, idle and then while ``--busy`` other agents step every 50 ms,
and prints JSON with the median and p90 in milliseconds.  Both timestamps are
written on this machine, so their difference is the service's own latency.
"""
import argparse
import json
import statistics
import sys
import tempfile
from datetime import datetime

from tests.harness import Service, wait_for


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def measure(svc: Service, agent_id: str, n: int) -> dict:
    latencies = []
    for i in range(n):
        verb = "pause" if i % 2 == 0 else "resume"
        action = svc.control(agent_id, verb)
        assert action["status"] == "done", action
        latencies.append((ts(action["processed_at"]) - ts(action["created_at"])).total_seconds() * 1000)
    latencies.sort()
    return {"n": n, "median_ms": round(statistics.median(latencies), 1),
            "p90_ms": round(latencies[int(0.9 * (n - 1))], 1), "max_ms": round(latencies[-1], 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--busy", type=int, default=20, help="agents stepping in the background")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:
        svc = Service(f"{root}/data", root).start()
        try:
            target = svc.create("joke", "cats", config={"interval_s": 0.5})
            svc.action(target["action_id"])
            result = {"benchmark": "control_latency", "idle": measure(svc, target["agent_id"], args.n)}
            busy = [svc.create("joke", f"subject {i}", config={"interval_s": 0.05}) for i in range(args.busy)]
            wait_for(lambda: all(svc.steps(b["session_id"]) for b in busy), timeout=60, what="busy agents")
            result[f"busy_{args.busy}_agents"] = measure(svc, target["agent_id"], args.n)
        finally:
            svc.stop()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
