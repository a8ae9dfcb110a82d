"""Overhead of one ``baml`` moniker step over the LLM server's own response time.

    python bench/bench_baml_step.py [--steps 50]

A scripted OpenAI-compatible server (tests/fake_openai.py) answers instantly.
Each round times (a) a bare stdlib HTTP POST of the same request body to that
server, which is the server's own response time as any client sees it, and
(b) one full moniker step: settings, ClientRegistry, BAML prompt rendering,
the HTTP call, parsing, usage recording.  The two are interleaved so drift
hits both alike; overhead = (b) - (a) per round.  Prints one JSON object.
"""
import argparse
import asyncio
import http.client
import json
import os
import statistics
import sys
import time
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from monikers.baml_moniker import baml_step  # noqa: E402
from monikers.frame import FrameIn, StepContext  # noqa: E402
from tests.fake_openai import FakeOpenAI, Reply, scripted  # noqa: E402

STATE = {"n": 1, "ratio": 0.5, "items": [1, 2, {"deep": None}], "flag": True}
REPLY = json.dumps({"step": "0", "next_step": "1", "state": STATE, "text": "ok", "data": {"k": 1}, "done": False})


def post(base_url: str, body: bytes) -> float:
    """One bare POST on a fresh connection (as BAML gets from this HTTP/1.0 server); seconds."""
    url = urlsplit(base_url)
    started = time.perf_counter()
    conn = http.client.HTTPConnection(url.hostname, url.port)
    conn.request("POST", url.path + "/chat/completions", body, {"Content-Type": "application/json"})
    conn.getresponse().read()
    conn.close()
    return time.perf_counter() - started


async def one_step(ctx_config: dict) -> float:
    ctx = StepContext(task="benchmark task", agent_id="a", session_id="s", iteration=0, config=ctx_config)
    started = time.perf_counter()
    await baml_step(FrameIn(step="0", state=STATE), ctx)
    return time.perf_counter() - started


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(seconds: list[float]) -> dict:
    ms = [s * 1000 for s in seconds]
    return {"median_ms": round(statistics.median(ms), 3), "p95_ms": round(percentile(ms, 95), 3),
            "min_ms": round(min(ms), 3)}


async def run(steps: int, warmup: int) -> dict:
    with FakeOpenAI(scripted(then=Reply(REPLY, prompt_tokens=50, completion_tokens=20))) as server:
        os.environ["AGENTSVC_LLM_BASE_URL"] = server.base_url  # the default endpoint of this process's steps
        config = {"llm": {"model": "bench-model"}}
        for _ in range(warmup):
            await one_step(config)
        body = json.dumps(server.requests[-1].body).encode()
        direct, step = [], []
        for _ in range(steps):
            direct.append(await asyncio.to_thread(post, server.base_url, body))
            step.append(await one_step(config))
    overhead = [s - d for s, d in zip(step, direct)]
    return {"benchmark": "baml_step", "steps": steps, "server_response": summary(direct),
            "moniker_step": summary(step), "overhead": summary(overhead)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.steps, args.warmup)), indent=2))


if __name__ == "__main__":
    main()
