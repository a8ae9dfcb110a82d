"""The write load of shared model rate limits: two limiters (two workers' worth,
in one process, with different worker ids) on one LanceDB share one model's
budget while many callers hammer it; how many ledger commits does that cost per
request, and does the limit hold?

    python bench/bench_rate_limits.py [--seconds 30] [--window 10] [--limit 300] [--callers 16]

Each caller loops: take a permit, "call the model" for ``--call-ms``, release.
Prints one JSON object: requests let through, ledger commits (table versions,
failed compare-and-swaps included: an update that matches nothing still
commits), commits per 1,000 requests and per minute, and the most requests
that started in any sliding window (must be <= the limit).
"""
import argparse
import asyncio
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import emit, machine, progress  # noqa: E402
from runtime.base.rate_limits import ModelLimit, ModelLimiter  # noqa: E402
from store import Store  # noqa: E402


def most_in_window(starts: list[float], window: float) -> int:
    starts = sorted(starts)
    best, j = 0, 0
    for i, t in enumerate(starts):
        while starts[j] <= t - window:
            j += 1
        best = max(best, i - j + 1)
    return best


async def run(args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(os.path.join(tmp, "db"))
        lease = max(5.0, args.window / 2)
        stats = [{"requests": 0, "waited_s": 0.0, "throttled": 0, "ledger_writes": 0} for _ in range(2)]
        limiters = [ModelLimiter("bench-model", ModelLimit(requests_per_minute=args.limit), store.rate_ledger,
                                 f"worker-{i}", args.window, lease, stats[i]) for i in range(2)]
        starts: list[float] = []
        stop_at = time.monotonic() + args.seconds

        async def caller(limiter):
            while time.monotonic() < stop_at:
                permit = await limiter.acquire(100)
                starts.append(time.monotonic())
                await asyncio.sleep(args.call_ms / 1000)
                limiter.release(permit, 100, 200, None)

        before = store.rate_ledger.versions()
        progress(f"{args.callers} callers on 2 limiters for {args.seconds} s, {args.limit} per {args.window} s")
        await asyncio.wait_for(asyncio.gather(*(caller(limiters[i % 2]) for i in range(args.callers))),
                               timeout=args.seconds + args.window * 3 + 30)
        commits = store.rate_ledger.versions() - before
        for limiter in limiters:
            await limiter.close()
        store.close()
    requests = len(starts)
    return {"machine": machine(), "seconds": args.seconds, "window_s": args.window, "limit": args.limit,
            "callers": args.callers, "requests": requests, "ledger_commits": commits,
            "successful_swaps": sum(s["ledger_writes"] for s in stats),
            "commits_per_1000_requests": round(commits * 1000 / max(requests, 1), 1),
            "commits_per_minute": round(commits * 60 / args.seconds, 1),
            "most_in_any_window": most_in_window(starts, args.window),
            "requests_per_worker": [s["requests"] for s in stats],
            "wait_s_per_request": round(sum(s["waited_s"] for s in stats) / max(requests, 1), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--call-ms", type=float, default=50.0)
    emit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
