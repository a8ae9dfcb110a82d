"""Where a process's memory goes while the store is written to all the time.

    python -m bench.bench_memory [--quick] [--seconds 300] [--cache-mb 16] [--writers 20]

A writer process appends steps and upserts snapshots for ``--writers``
sessions (one every 0.1 s each, like agents stepping) with the service's
maintenance, on a fresh database.  This process reads like app.py does (a
session's newest page, the queue's pending actions, one snapshot) in a loop,
and every ``--sample-s`` records its RSS, the bytes in LanceDB's caches
(``Store.cache_bytes``) and the Python heap (tracemalloc).  Run it with
``--cache-mb 0`` (LanceDB's own defaults) and with the service's default to see
which part grows: in the sustained-load soaks it was the caches, not Python objects (BENCHMARKS.md §4d).
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc

import psutil

from bench.common import emit, machine, progress

WRITER = """
import sys, threading, time
from store import Store, codec
from store.maintenance import Maintainer
store = Store(sys.argv[1]); maintainer = Maintainer(store)
def agent(i):
    n = 0
    while True:
        row = {'agent_id': f'a{i}', 'session_id': f's{i}', 'iteration': n, 'step_token': str(n),
               'next_step_token': str(n + 1), 'status': 'ok', 'text': 'x' * 200, 'state': {'pad': 'y' * 300}}
        store.steps.submit(row)[1].result()
        now = codec.utcnow()
        store.states.submit({'session_id': f's{i}', 'agent_id': f'a{i}', 'moniker': 'joke', 'status': 'running',
                             'iteration': n, 'created_at': now, 'updated_at': now})
        n += 1
        time.sleep(0.1)
for i in range(int(sys.argv[2])):
    threading.Thread(target=agent, args=(i,), daemon=True).start()
while True:
    time.sleep(2)
    maintainer.run_due()
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--sample-s", type=float, default=20.0)
    parser.add_argument("--cache-mb", type=int, default=16, help="this reader's LanceDB caches; 0 = LanceDB's")
    parser.add_argument("--writers", type=int, default=20)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.sample_s, args.writers = 8.0, 2.0, 2
    tracemalloc.start()
    from store import Store  # after tracemalloc, so the heap figure covers the store's objects

    root = tempfile.mkdtemp(prefix="bench-memory-")
    uri = os.path.join(root, "db")
    Store(uri).close()  # create the tables before two processes open them
    writer = subprocess.Popen([sys.executable, "-c", WRITER, uri, str(args.writers)],
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    samples = []
    try:
        store = Store(uri, cache_mb=args.cache_mb)
        me = psutil.Process()
        started = time.monotonic()
        next_sample = 0.0
        queries = 0
        while time.monotonic() - started < args.seconds:
            store.steps.search(session_id=f"s{random.randrange(args.writers)}", limit=100)
            store.actions.pending(100)
            store.states.get(f"s{random.randrange(args.writers)}")
            queries += 1
            if time.monotonic() - started >= next_sample:
                next_sample += args.sample_s
                samples.append({"t_s": round(time.monotonic() - started, 1), "queries": queries,
                                "rss_mb": round(me.memory_info().rss / 2**20, 1),
                                "lance_cache_mb": round(store.cache_bytes() / 2**20, 1),
                                "python_heap_mb": round(tracemalloc.get_traced_memory()[0] / 2**20, 1)})
                progress(str(samples[-1]))
    finally:
        writer.kill()
        writer.wait()
    emit({"benchmark": "memory", "machine": machine(), "cache_mb": args.cache_mb, "writers": args.writers,
          "samples": samples,
          "growth_after_first_minute_mb": _growth(samples)})
    return 0


def _growth(samples: list[dict]) -> dict | None:
    later = [s for s in samples if s["t_s"] >= 60]
    if len(later) < 2:
        return None
    first, last = later[0], later[-1]
    return {key: round(last[key] - first[key], 1) for key in ("rss_mb", "lance_cache_mb", "python_heap_mb")}


if __name__ == "__main__":
    sys.exit(main())
