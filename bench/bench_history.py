"""History when the state grows: disk against the information the steps added,
with step rows holding deltas (store/state_delta.py) and with every row
holding the whole state (as before), in one run.

    python -m bench.bench_history [--quick] [--steps 1000] [--note-bytes 1000]

One session, in this process, through the store (``StepLog.append``, each step
waiting for its commit as a session does): each step adds a note of
``--note-bytes`` random characters (64 symbols, ~6 bits each, so compression
cannot hide the size) to a list kept in the state.  Then the service's upkeep
runs over the table (``Maintainer.optimize("agent_steps")`` with a cleanup
window of 1 ms: compaction, index update, old versions removed), and
``disk_bytes`` is every file under ``<db>/agent_steps.lance`` (data, indexes,
manifests).  ``new_information_bytes`` is the JSON length of the last state
(every step added to it, none removed).  ``disk_over_new`` is their ratio
(target ≤ 3).

The ``whole`` run sets ``state_delta.MIN_STATE_BYTES`` out of reach, so every
row holds the whole state: the design before deltas.

Costs, per run: ``submit_cpu_us`` is the CPU of the writing thread per step
row (encoding the state, the diff, the delta's check), the committer thread
apart; ``process_cpu_ms_per_step`` all of the process's CPU per step (the
commits included: less to write when the row is smaller); ``small_state`` repeats that for a 300-byte state (below
``MIN_STATE_BYTES``: no delta work), as the throughput benchmarks write; and
reads: the newest page of 100 steps, a page in the middle, and ``latest``
(ms, p50 of a few).
"""
import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from bench.common import dir_bytes, emit, machine, progress
from store import Store, state_delta
from store.maintenance import Maintainer

ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/"
READ_REPEATS = 5


def states(steps: int, note_bytes: int, seed: int = 28):
    rng, notes = random.Random(seed), []
    for i in range(steps):
        notes = [*notes, "".join(rng.choices(ALPHABET, k=note_bytes))]
        yield {"notes": notes, "steps": i}


def step(iteration: int, state, session_id: str = "s1") -> dict:
    return {"agent_id": "a1", "session_id": session_id, "iteration": iteration, "status": "ok",
            "step_token": str(iteration), "next_step_token": str(iteration + 1), "state": state}


def write(store: Store, rows) -> tuple[float, float, float]:
    """Append the rows one by one, each waiting for its commit: (writing-thread
    CPU µs per row, the process's CPU ms per row (the commits' included), wall seconds)."""
    cpu, started, process_started = 0.0, time.perf_counter(), time.process_time()
    for row in rows:
        before = time.thread_time()
        _, committed = store.steps.submit(row)
        cpu += time.thread_time() - before
        committed.result()
    count = max(len(rows), 1)
    return cpu / count * 1e6, (time.process_time() - process_started) / count * 1e3, time.perf_counter() - started


def p50_ms(read) -> float:
    times = []
    for _ in range(READ_REPEATS):
        started = time.perf_counter()
        read()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


def one_run(steps: int, note_bytes: int, whole: bool) -> dict:
    saved = state_delta.MIN_STATE_BYTES
    if whole:
        state_delta.MIN_STATE_BYTES = 1 << 62
    folder = tempfile.mkdtemp(prefix="bench_history_")
    try:
        store = Store(os.path.join(folder, "db"))
        grown = list(states(steps, note_bytes))
        cpu_us, process_ms, wall_s = write(store, [step(i, s) for i, s in enumerate(grown)])
        small_us, _, _ = write(store, [step(i, {"pad": "x" * 280, "i": i}, "small") for i in range(min(steps, 200))])
        before = dir_bytes(os.path.join(folder, "db", "agent_steps.lance"))
        Maintainer(store, keep_versions_s=0.001).optimize("agent_steps")
        disk = dir_bytes(os.path.join(folder, "db", "agent_steps.lance"))
        new_information = len(json.dumps(grown[-1], sort_keys=True, separators=(",", ":")))
        last = steps - 1
        reads = {"newest_page_ms": p50_ms(lambda: store.steps.search(session_id="s1", newest_first=True,
                                                                      last_iteration=last, limit=100)),
                 "middle_page_ms": p50_ms(lambda: store.steps.search(session_id="s1", offset=steps // 2, limit=100)),
                 "latest_ms": p50_ms(lambda: store.steps.latest(session_id="s1", after_iteration=last - 1))}
        check = store.steps.search(session_id="s1", newest_first=True, last_iteration=last, limit=3)
        assert [r["state"] for r in check] == grown[::-1][:3], "a read gave back another state"
        store.close()
        return {"disk_bytes": disk, "disk_bytes_before_upkeep": before, "new_information_bytes": new_information,
                "disk_over_new": round(disk / new_information, 2), "write_s": round(wall_s, 2),
                "submit_cpu_us": round(cpu_us), "process_cpu_ms_per_step": round(process_ms, 2),
                "small_state": {"submit_cpu_us": round(small_us, 1)}, **reads}
    finally:
        state_delta.MIN_STATE_BYTES = saved
        shutil.rmtree(folder, ignore_errors=True)


def run(steps: int = 1000, note_bytes: int = 1000, quick: bool = False) -> dict:
    if quick:
        steps = min(steps, 60)
    result = {"benchmark": "history", "machine": machine(), "steps": steps, "note_bytes": note_bytes}
    progress(f"{steps} steps of +{note_bytes} B, rows holding deltas")
    delta = one_run(steps, note_bytes, whole=False)
    progress(f"the same, every row holding the whole state ({steps} steps)")
    whole = one_run(steps, note_bytes, whole=True)
    result.update(disk_over_new=delta["disk_over_new"], delta=delta, whole=whole,
                  disk_whole_over_delta=round(whole["disk_bytes"] / delta["disk_bytes"], 1),
                  submit_cpu_delta_over_whole=round(delta["submit_cpu_us"] / max(whole["submit_cpu_us"], 1), 2),
                  target={"disk_over_new": "<= 3"})
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="60 steps, for the smoke test")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--note-bytes", type=int, default=1000, help="what each step adds to the state")
    args = parser.parse_args(argv)
    emit(run(args.steps, args.note_bytes, quick=args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
