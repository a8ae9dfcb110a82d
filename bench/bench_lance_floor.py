"""LanceDB's floor: LanceDB alone doing the writes of the service's step path,
on this machine, in one process: the physical limit of this design.

    python -m bench.bench_lance_floor [--quick] [--steps 300] [--batches 20]

No runtime, no writer thread, no asyncio: the bench calls the table methods
the store's committer calls (store/writer.py ``_write``), with the real table
schemas (store/schemas.py) and the rows the service really writes.  Those rows
are captured first from a few steps of one no-op session run by AgentService
in this process (``captured``), then replayed with a new id, iteration and
state per step, so the figures follow what runtime/session/agent.py writes.

Figures, each on a fresh database directory (each commit adds a fragment and
a version, so a longer run gets slower; ``fragments_after`` says how many):

- ``lone``: one single-row append to agent_steps per step, serially: ms per
  append (p50/p99), for five ways: LanceDB's ``add`` with LanceDB's defaults,
  with ``read_consistency_interval=0`` alone, with that and the store's capped
  ``lancedb.Session`` (``session``), and on the tables as store/db.py opens
  them (both, plus the scalar indexes and the primary key: ``store_add``); and
  as store/writer.py appends now, through the table's Lance dataset
  (``LanceDataset.insert``, the dataset kept between commits: ``store``).
- ``with_snapshot``: the same plus one ``merge_insert`` upsert of the
  session's snapshot row into agent_state (the store's conditional upsert),
  ``serial`` (add, then upsert) and ``concurrent`` (the two in two threads
  at once, the step waits for both): ms per step; ``upsert_only`` is the
  upsert alone.
- ``batched``: as store/db.py opens it, one ``add`` of 100 and of 1,000 step
  rows (what a group commit holds with that many agents), alone and with one
  upsert of as many snapshots, serial and concurrent: rows (steps) per second.
- ``encode``: CPU per row of turning the dicts into a pyarrow batch
  (``codec.encode`` then ``pa.Table.from_pylist``), step rows and snapshots,
  in batches of 1, 100 and 1,000: microseconds per row.
"""
import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import lancedb
import pyarrow as pa
from ulid import ULID

from bench.common import emit, machine, progress, run_in_process, summary, wait_until
from store import Store, codec
from store.db import DEFAULT_CACHE_MB, lance_session
from store.schemas import AGENT_STATE, AGENT_STEPS
from store.state import TIME_COLUMNS
from store.writer import UPSERT_CONDITIONS

STEPS, STATE = "agent_steps", "agent_state"

# ---- the rows the service writes ------------------------------------------------


def capture_rows(steps: int = 3) -> dict:
    """One step row and one snapshot row as the service hands them to the store,
    from a no-op session run in this process (the Persistence object is wrapped)."""
    from bench.common import enqueue_creates

    seen = {"step": [], "snapshot": []}
    with tempfile.TemporaryDirectory() as root:
        store = Store(f"{root}/db")
        enqueue_creates(store, 1, "noop", {"interval_s": 0})

        async def scenario(service):
            persist = service.persist
            for name, sink in (("append_step", seen["step"]), ("save_snapshot", seen["snapshot"])):
                original = getattr(persist, name)

                async def keep(row, _original=original, _sink=sink):
                    _sink.append(dict(row))
                    return await _original(row)
                setattr(persist, name, keep)
            await wait_until(lambda: len(seen["step"]) >= steps and seen["snapshot"], timeout=120,
                             what="a few steps of a no-op session")
        try:
            run_in_process(store, scenario)
        finally:
            store.close()
    return {"step": seen["step"][-1], "snapshot": seen["snapshot"][-1]}


class Rows:
    """New rows of one session, shaped like the captured ones (what StepLog.submit
    and StateTable.submit add: id, created_at, updated_at, times as datetimes)."""

    def __init__(self, captured: dict):
        self.step, self.snapshot = captured["step"], captured["snapshot"]

    def step_row(self, session_id: str, iteration: int) -> dict:
        return {"id": str(ULID()), "created_at": codec.utcnow(), **self.step, "session_id": session_id,
                "iteration": iteration, "state": {"n": iteration}, "step_token": str(iteration - 1),
                "next_step_token": str(iteration)}

    def snapshot_row(self, session_id: str, iteration: int) -> dict:
        row = {k: _as_time(v) if k in TIME_COLUMNS else v for k, v in self.snapshot.items()}
        return {**row, "session_id": session_id, "iteration": iteration, "state": {"n": iteration},
                "step_token": str(iteration - 1), "next_step_token": str(iteration), "updated_at": codec.utcnow()}


def _as_time(value):
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else value


def batch(table: str, rows: list[dict]) -> pa.Table:
    """As store/writer.py builds a commit's batch."""
    schema = AGENT_STEPS if table == STEPS else AGENT_STATE
    return pa.Table.from_pylist([codec.encode(table, r) for r in rows], schema=schema)


def upsert(table, rows: list[dict]) -> None:
    """The store's conditional upsert of snapshots (store/writer.py ``_write``)."""
    table.merge_insert("session_id").when_matched_update_all(where=UPSERT_CONDITIONS[STATE]) \
        .when_not_matched_insert_all().execute(batch(STATE, rows))


# ---- opening the tables -------------------------------------------------------------


class Opened:
    """agent_steps and agent_state in a fresh directory, opened one of five ways."""

    def __init__(self, root: str, how: str):
        self.store, self.dataset = None, None
        if how in ("store", "store_add"):  # exactly as store/db.py opens them
            self.store = Store(f"{root}/db")
            self.steps, self.state = self.store.tables[STEPS], self.store.tables[STATE]
            if how == "store":  # and appended to as store/writer.py does
                self.dataset = self.steps.to_lance()
            return
        interval = timedelta(0) if how in ("consistency", "session") else None
        session = lance_session(DEFAULT_CACHE_MB) if how == "session" else None
        db = lancedb.connect(f"{root}/db", read_consistency_interval=interval, session=session)
        self.steps = db.create_table(STEPS, schema=AGENT_STEPS)
        self.state = db.create_table(STATE, schema=AGENT_STATE)
        self.state.set_unenforced_primary_key("session_id")

    def append(self, rows: pa.Table) -> None:
        if self.dataset is not None:
            self.dataset.insert(rows)
        else:
            self.steps.add(rows)

    def fragments(self) -> int:
        return self.steps.stats()["fragment_stats"]["num_fragments"]

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def ms(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def commit(opened: Opened, pool, steps: list[dict], snaps: list[dict], snapshot: str | None) -> None:
    """One step's (or one group commit's) writes: the step rows' add, and the
    snapshots' upsert after it ("serial"), beside it in another thread
    ("concurrent"), alone ("upsert_only") or not at all (None)."""
    add = lambda: opened.append(batch(STEPS, steps))  # noqa: E731
    if snapshot is None:
        add()
    elif snapshot == "upsert_only":
        upsert(opened.state, snaps)
    elif snapshot == "serial":
        add()
        upsert(opened.state, snaps)
    else:
        for future in (pool.submit(add), pool.submit(upsert, opened.state, snaps)):
            future.result()


# ---- (a) and (b): one agent --------------------------------------------------------------


def lone(rows: Rows, how: str, steps: int, snapshot: str | None = None) -> dict:
    """``steps`` steps of one session: an add per step, plus an upsert of its
    snapshot as ``commit`` says for ``snapshot``; ms per step."""
    session_id = str(ULID())
    with tempfile.TemporaryDirectory() as root, ThreadPoolExecutor(2) as pool:
        opened = Opened(root, how)
        upsert(opened.state, [rows.snapshot_row(session_id, 0)])  # the row the create wrote
        per_step = []
        for i in range(1, steps + 1):
            step, snap = rows.step_row(session_id, i), rows.snapshot_row(session_id, i)
            per_step.append(ms(lambda: commit(opened, pool, [step], [snap], snapshot)))
        fragments = opened.fragments()
        opened.close()
    return {"how": how, "steps": steps, "per_step": summary(per_step),
            "steps_per_s": round(1000 * steps / sum(per_step), 1), "fragments_after": fragments}


# ---- (c) group commits ------------------------------------------------------------------


def batched(rows: Rows, size: int, batches: int, snapshot: str | None = None) -> dict:
    """``batches`` commits of ``size`` step rows (one per session), plus one upsert
    of the ``size`` snapshots per commit when ``snapshot`` is given; steps/s."""
    sessions = [str(ULID()) for _ in range(size)]
    with tempfile.TemporaryDirectory() as root, ThreadPoolExecutor(2) as pool:
        opened = Opened(root, "store")
        upsert(opened.state, [rows.snapshot_row(s, 0) for s in sessions])
        per_commit = []
        for i in range(1, batches + 1):
            steps = [rows.step_row(s, i) for s in sessions]
            snaps = [rows.snapshot_row(s, i) for s in sessions]
            per_commit.append(ms(lambda: commit(opened, pool, steps, snaps, snapshot)))
        opened.close()
    return {"rows_per_commit": size, "commits": batches, "snapshot": snapshot or "none",
            "per_commit": summary(per_commit), "steps_per_s": round(1000 * size * batches / sum(per_commit), 1)}


# ---- (d) building the batch -----------------------------------------------------------------


def encode_cost(rows: Rows, size: int, repeat: int) -> dict:
    """CPU microseconds per row of codec.encode + pa.Table.from_pylist."""
    session_id = str(ULID())
    out = {}
    for table, make in ((STEPS, rows.step_row), (STATE, rows.snapshot_row)):
        dicts = [make(session_id, i + 1) for i in range(size)]
        batch(table, dicts)  # warm
        started = time.process_time()
        for _ in range(repeat):
            batch(table, dicts)
        out[table] = round((time.process_time() - started) * 1e6 / (size * repeat), 1)
    return {"rows_per_batch": size, "cpu_us_per_row": out}


# ---- driver --------------------------------------------------------------------------------


def run(steps: int = 300, batches: int = 20, quick: bool = False) -> dict:
    result = {"benchmark": "lance_floor", "machine": machine(), "lancedb": lancedb.__version__,
              "pyarrow": pa.__version__}
    progress("capturing the rows a no-op step writes")
    rows = Rows(capture_rows())
    result["captured"] = {"step_row_columns": sorted(rows.step), "snapshot_row_columns": sorted(rows.snapshot)}
    result["lone"] = {}
    for how in ("defaults", "consistency", "session", "store_add", "store"):
        progress(f"lone writer, {steps} single-row appends, opened: {how}")
        result["lone"][how] = lone(rows, how, steps)
    result["with_snapshot"] = {}
    for mode in ("upsert_only", "serial", "concurrent"):
        progress(f"snapshot upsert per step, {mode}")
        result["with_snapshot"][mode] = lone(rows, "store", steps, snapshot=mode)
    result["batched"] = {}
    for size in (100, 1000):
        count = max(2, batches if size == 100 else batches // 2)
        for mode in (None, "serial", "concurrent"):
            progress(f"{count} commits of {size} rows, snapshots: {mode or 'none'}")
            result["batched"][f"{size}_{mode or 'steps_only'}"] = batched(rows, size, count, snapshot=mode)
    progress("encoding cost")
    result["encode"] = [encode_cost(rows, size, repeat) for size, repeat in
                        ((1, 50 if quick else 500), (100, 5 if quick else 50), (1000, 2 if quick else 10))]
    result["floor"] = {
        "one_agent_ms_per_step_add_only": result["lone"]["store"]["per_step"]["p50_ms"],
        "one_agent_ms_per_step_lancedb_add": result["lone"]["store_add"]["per_step"]["p50_ms"],
        "one_agent_ms_per_step_with_snapshot_concurrent": result["with_snapshot"]["concurrent"]["per_step"]["p50_ms"],
        "steps_per_s_100_rows_per_commit": result["batched"]["100_concurrent"]["steps_per_s"],
        "steps_per_s_1000_rows_per_commit": result["batched"]["1000_concurrent"]["steps_per_s"],
        "steps_per_s_1000_rows_per_commit_steps_only": result["batched"]["1000_steps_only"]["steps_per_s"]}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--steps", type=int, default=300, help="steps of the lone-writer runs")
    parser.add_argument("--batches", type=int, default=20, help="commits of 100 rows (half as many of 1,000)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.batches = 20, 2
    emit(run(args.steps, args.batches, quick=args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
