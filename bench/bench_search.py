"""Search: latency over HTTP at scale, the cost of keeping the FTS index fresh
under a steady write rate, and the CPU per step that indexing adds.

    python -m bench.bench_search [--quick] [--steps 1000000] [--messages 100000]

1. **Latency.** ``--steps`` step rows and ``--messages`` messages with
   12-word texts from a 5,000-word vocabulary (plus one rare word per 1,000
   rows) are bulk-loaded with batched appends, the store's maintenance runs
   (compaction, scalar and FTS indexes), app.py starts on the directory and
   ``GET /api/search`` is asked ``--queries`` times: one common word, two
   words, a rare word, and a word filtered to one session.
2. **Refresh under writes.** A writer appends step rows at ``--write-rate``
   rows/s (the soak's order of magnitude) for ``--write-s`` seconds; search
   latency is sampled meanwhile (the new rows are unindexed, so scanned), then
   ``refresh_search_indexes`` folds them in and its time is reported.
3. **CPU per step.** The same in-process workload (agents whose steps write
   30-word texts, with background maintenance as agents.py runs it) once with
   the FTS indexes and once without; process CPU seconds per step, and the ratio.
"""
import argparse
import random
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone

from ulid import ULID

from bench.common import (emit, enqueue_creates, machine, new_maintainer, progress, run_in_process,
                          run_maintenance, summary, table_health, wait_until)
from monikers import default_registry
from monikers.frame import FrameIn, FrameOut, Moniker, StepContext
from store import Store
from store import search as store_search
from tests.harness import Service

TARGET_P50_MS = 50
TARGET_CPU_RATIO = 1.10
BATCH = 50_000
VOCAB = [f"w{i:04d}" for i in range(5000)]
RARE_EVERY = 1000


def text_for(rng: random.Random, i: int, words: int = 12) -> str:
    text = " ".join(rng.choice(VOCAB) for _ in range(words))
    return text + (f" rare{i // RARE_EVERY:05d}" if i % RARE_EVERY == 0 else "")


def step_batches(n: int, sessions: list[tuple[str, str]], rng, start: int = 0, t0=None):
    t0 = t0 or datetime(2026, 1, 1, tzinfo=timezone.utc)
    batch = []
    for i in range(start, start + n):
        agent_id, session_id = sessions[i % len(sessions)]
        batch.append({"id": str(ULID()), "created_at": t0 + timedelta(milliseconds=i), "agent_id": agent_id,
                      "session_id": session_id, "iteration": i // len(sessions), "step_token": str(i),
                      "next_step_token": str(i + 1), "status": "ok", "text": text_for(rng, i), "data": None,
                      "state": {"n": i}, "guidance": None, "notes": None, "latency_ms": 0.1, "error": None,
                      "usage": None})
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def message_batches(n: int, conversations: list[str], rng):
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    batch = []
    for i in range(n):
        created = t0 + timedelta(milliseconds=i)
        batch.append({"message_id": str(ULID.from_datetime(created)), "conversation_id": conversations[i % len(conversations)],
                      "created_at": created, "sender_type": "user", "user_id": "bench", "agent_id": None,
                      "session_id": None, "text": text_for(rng, i), "data": None, "status": "posted",
                      "event_type": "message", "iteration": None, "step_token": None, "next_step_token": None,
                      "notes": None})
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def queries(rng, sessions, n_rows: int, count: int) -> list[dict]:
    rare_max = max(1, n_rows // RARE_EVERY)
    out = []
    for k in range(count):
        kind = k % 4
        if kind == 0:
            out.append({"q": rng.choice(VOCAB)})
        elif kind == 1:
            out.append({"q": f"{rng.choice(VOCAB)} {rng.choice(VOCAB)}"})
        elif kind == 2:
            out.append({"q": f"rare{rng.randrange(rare_max):05d}"})
        else:
            out.append({"q": rng.choice(VOCAB), "session_id": rng.choice(sessions)[1]})
    return out


def http_latency(svc: Service, asks: list[dict]) -> dict:
    times, empty = [], 0
    for params in asks:
        started = time.perf_counter()
        r = svc.get("/api/search", limit=20, **params)
        times.append((time.perf_counter() - started) * 1000)
        assert r.status_code == 200, r.text[:300]
        empty += not r.json()["hits"]
    return {**summary(times), "empty_answers": empty}


def latency(root: str, store: Store, rng, n_steps: int, n_messages: int, n_queries: int) -> dict:
    sessions = [(str(ULID()), str(ULID())) for _ in range(max(1, n_steps // 1000))]
    conversations = [str(ULID()) for _ in range(max(1, n_messages // 100))]
    started = time.perf_counter()
    for batch in step_batches(n_steps, sessions, rng):
        store.writer.append("agent_steps", batch)
    for batch in message_batches(n_messages, conversations, rng):
        store.writer.append("conversation_messages", batch)
    load_s = time.perf_counter() - started
    progress(f"loaded {n_steps} steps + {n_messages} messages in {load_s:.1f}s; maintenance")
    maintenance = run_maintenance(store)
    progress(f"maintenance {maintenance}")
    svc = Service(f"{root}/data", root)
    svc.start_app()
    try:
        asks = queries(rng, sessions, n_steps, n_queries)
        http_latency(svc, asks[:10])  # warm the caches, as a running service has them
        figures = http_latency(svc, asks)
    finally:
        svc.stop()
    return {"step_rows": n_steps, "message_rows": n_messages, "load_s": round(load_s, 1),
            "maintenance": maintenance, "search_http": figures, "sessions": sessions}


def refresh_under_writes(root: str, store: Store, rng, sessions, rate: int, seconds: float,
                         n_queries: int) -> dict:
    """Append ``rate`` rows/s in 10 small commits a second (as group commit
    leaves them) while searching, then fold the new rows into the index."""
    stop = threading.Event()
    written = [0]

    def writer():
        t0 = datetime.now(timezone.utc)
        per_tick = max(1, rate // 10)
        while not stop.is_set():
            tick = time.perf_counter()
            for batch in step_batches(per_tick, sessions, rng, start=10**9 + written[0], t0=t0):
                store.writer.append("agent_steps", batch)
            written[0] += per_tick
            stop.wait(max(0.0, 0.1 - (time.perf_counter() - tick)))

    svc = Service(f"{root}/data", root)
    svc.start_app()
    thread = threading.Thread(target=writer, daemon=True)
    try:
        thread.start()
        deadline = time.monotonic() + seconds
        during = []
        asks = queries(rng, sessions, 1000, n_queries)
        while time.monotonic() < deadline:
            for params in asks[:10]:
                started = time.perf_counter()
                assert svc.get("/api/search", limit=20, **params).status_code == 200
                during.append((time.perf_counter() - started) * 1000)
        stop.set()
        thread.join()
        unindexed = store_search.unindexed_rows(store.tables).get("agent_steps")
        maintainer = new_maintainer(store)
        started = time.perf_counter()
        refreshed = store_search.refresh_search_indexes(store, maintainer.optimize, min_unindexed=1)
        refresh_s = time.perf_counter() - started
        after = http_latency(svc, asks)
    finally:
        stop.set()
        svc.stop()
    return {"write_rate_rows_per_s": rate, "seconds": seconds, "rows_written": written[0],
            "search_while_writing": summary(during), "unindexed_before_refresh": unindexed,
            "refreshed": refreshed, "refresh_s": round(refresh_s, 2), "search_after_refresh": after}


async def chatty_step(frame: FrameIn, ctx: StepContext) -> FrameOut:
    n = int(frame.state.get("n", 0)) + 1
    rng = random.Random(hash((ctx.session_id, n)))
    return FrameOut(step=frame.step, next_step=str(n), state={"n": n}, text=text_for(rng, n, words=30))


def cpu_per_step(root: str, agents: int, steps: int, with_fts: bool) -> dict:
    store = Store(f"{root}/cpu-{'fts' if with_fts else 'plain'}/lancedb")
    if not with_fts:
        for source in store_search.present_sources(store.tables):
            for column in source.text_columns:
                store.tables[source.table].drop_index(f"{column}_idx")
    registry = default_registry()
    registry.register(Moniker("chatty", chatty_step, "bench: 30 words of text per step"))

    async def scenario(service):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        enqueue_creates(store, agents, "chatty", {"interval_s": 0, "max_steps": steps})
        await wait_until(lambda: store.steps.count() >= agents * steps, timeout=600, what="all steps")
        maintainer = service.maintainer
        if maintainer is not None:  # what is left to fold in is part of the cost
            maintainer.optimize("agent_steps")
        return time.process_time() - cpu0, time.perf_counter() - wall0

    cpu_s, wall_s = run_in_process(store, scenario, registry=registry, maintain_every_s=1.0)
    total = store.steps.count()
    health = table_health(store)["agent_steps"]
    store.close()
    return {"fts_indexes": with_fts, "steps": total, "cpu_s": round(cpu_s, 2), "wall_s": round(wall_s, 2),
            "cpu_ms_per_step": round(cpu_s * 1000 / total, 3), "agent_steps": health}


def run(args) -> dict:
    rng = random.Random(20261123)
    result = {"benchmark": "search", "machine": machine()}
    with tempfile.TemporaryDirectory() as root:
        store = Store(f"{root}/data/lancedb")
        lat = latency(root, store, rng, args.steps, args.messages, args.queries)
        sessions = lat.pop("sessions")
        result["latency"] = lat
        progress(f"search p50 {lat['search_http']['p50_ms']} ms; refresh under writes")
        result["refresh"] = refresh_under_writes(root, store, rng, sessions, args.write_rate, args.write_s,
                                                 args.queries)
        result["tables"] = table_health(store)
        store.close()
        progress("CPU per step, with and without FTS indexes")
        plain = cpu_per_step(root, args.cpu_agents, args.cpu_steps, with_fts=False)
        indexed = cpu_per_step(root, args.cpu_agents, args.cpu_steps, with_fts=True)
    ratio = indexed["cpu_ms_per_step"] / plain["cpu_ms_per_step"] if plain["cpu_ms_per_step"] else None
    result["cpu"] = {"without_fts": plain, "with_fts": indexed, "ratio": round(ratio, 3) if ratio else None}
    result["target"] = {"search_p50_ms": TARGET_P50_MS, "at": {"steps": args.steps, "messages": args.messages},
                        "p50_met": lat["search_http"]["p50_ms"] <= TARGET_P50_MS,
                        "cpu_ratio_max": TARGET_CPU_RATIO, "cpu_met": bool(ratio and ratio <= TARGET_CPU_RATIO)}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--write-rate", type=int, default=100, help="step rows per second while refreshing")
    parser.add_argument("--write-s", type=float, default=30)
    parser.add_argument("--cpu-agents", type=int, default=20)
    parser.add_argument("--cpu-steps", type=int, default=50, help="steps per agent in the CPU comparison")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.messages, args.queries = 3000, 300, 20
        args.write_rate, args.write_s, args.cpu_agents, args.cpu_steps = 50, 2, 4, 10
    emit(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
