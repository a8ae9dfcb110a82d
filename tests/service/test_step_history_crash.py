"""kill -9 of a process writing a session whose step rows hold deltas
(store/state_delta.py): whatever instant it dies at, every row that is there
reads back its exact state, the rows are 0..n without a gap, and every row
the writer was told was durable is among them.  Each restart goes on from the
newest row, as a resumed session does (its first row then holds the whole
state: the new process has stored no base yet)."""
import hashlib
import json
import os
import random
import subprocess
import sys
import time

from store import Store

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROUNDS = 4

WRITER = """
import hashlib, sys
from store import Store
store = Store(sys.argv[1])
latest = store.steps.latest(session_id="s1")
start = 0 if latest is None else latest["iteration"] + 1
notes = [] if latest is None else list(latest["state"]["notes"])
for i in range(start, start + 100_000):
    notes = [*notes, hashlib.sha256(str(i).encode()).hexdigest() * 16]
    store.steps.append({"agent_id": "a1", "session_id": "s1", "iteration": i, "status": "ok",
                        "state": {"notes": notes, "i": i, "ratio": i / 7}})
    print(i, flush=True)  # durable: append returned after the commit
"""


def expected(i: int) -> dict:
    notes = [hashlib.sha256(str(j).encode()).hexdigest() * 16 for j in range(i + 1)]
    return {"notes": notes, "i": i, "ratio": i / 7}


def text(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def run_until_killed(path: str, rng: random.Random) -> int:
    """Start the writer, let it write some rows, kill -9 it at a random instant;
    the last iteration it reported durable (-1: none)."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path], cwd=ROOT, text=True, stdout=subprocess.PIPE)
    acked, wanted = -1, rng.randint(5, 40)
    deadline = time.monotonic() + 120
    try:
        while wanted > 0 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked, wanted = int(line), wanted - 1
        time.sleep(rng.uniform(0, 0.05))  # anywhere in the next step: its encoding, its commit, after it
    finally:
        proc.kill()
        rest, _ = proc.communicate(timeout=30)
    for line in rest.split():
        acked = max(acked, int(line))
    assert proc.returncode != 0, "the writer ended on its own"
    return acked


def test_a_kill_at_any_instant_leaves_every_row_reading_its_exact_state(tmp_path):
    path, rng = str(tmp_path / "db"), random.Random(2811)
    acked = -1
    for round_ in range(ROUNDS):
        acked = max(acked, run_until_killed(path, rng))
        store = Store(path)
        rows = store.steps.search(session_id="s1", limit=100_000)
        iterations = [r["iteration"] for r in rows]
        assert iterations == list(range(len(rows))), "a gap or a repeat"
        assert len(rows) - 1 >= acked, f"round {round_}: step {acked} was durable and is gone"
        for row in rows:
            assert text(row["state"]) == text(expected(row["iteration"])), f"step {row['iteration']}"
        assert text(store.steps.latest(session_id="s1")["state"]) == text(expected(len(rows) - 1))
        bases = {r["iteration"]: r["state_base"] for r in store.tables["agent_steps"].search()
                 .select(["iteration", "state_base"]).limit(100_000).to_list()}
        store.close()
    assert sum(base is not None for base in bases.values()) > len(bases) / 2, "the rows should mostly be deltas"
