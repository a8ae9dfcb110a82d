"""A session's history when its state grows: its rows hold deltas
(store/state_delta.py), the disk grows with what changed, and every read of
store/steps.py hands back the whole states, exactly as written; rows written
before deltas existed still read; a failed or unfinished commit is never a base."""
import json
import os
import random
from datetime import datetime, timezone

import pytest

from store import Store, codec
from store.maintenance import Maintainer
from store.schemas import AGENT_STEPS
from store.state_delta import MAX_CHAIN_ROWS
from store.writer import Fenced

STEPS = 600  # past the first run of MAX_CHAIN_ROWS deltas (bench/bench_history.py measures 1,000)
NOTE_CHARS = 1000
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/"  # ~6 bits a character


def states(count: int, seed: int = 28):
    """A model keeping notes: each step adds ~1 KB of text that does not compress away."""
    rng, notes = random.Random(seed), []
    for i in range(count):
        notes = [*notes, "".join(rng.choices(ALPHABET, k=NOTE_CHARS))]
        yield {"notes": notes, "steps": i, "score": i / 3}


def step(iteration, state, session_id="s1"):
    return {"agent_id": "a1", "session_id": session_id, "iteration": iteration, "status": "ok",
            "step_token": str(iteration), "next_step_token": str(iteration + 1), "state": state}


def text(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def table_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def stored_bases(store, session_id="s1") -> dict[int, int | None]:
    rows = store.tables["agent_steps"].search().where(f"session_id = '{session_id}'") \
        .select(["iteration", "state_base"]).limit(100_000).to_list()
    return {r["iteration"]: r["state_base"] for r in rows}


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """600 steps of +1 KB each, and the service's upkeep run over them."""
    path = str(tmp_path_factory.mktemp("grown") / "db")
    store = Store(path)
    written = []
    for i, state in enumerate(states(STEPS)):
        store.steps.append(step(i, state))
        written.append(text(state))
    Maintainer(store, keep_versions_s=0.001).optimize("agent_steps")
    yield store, written, path
    store.close()


def test_growing_state_stays_within_three_times_what_changed_on_disk(grown):
    store, written, path = grown
    new_information = len(written[-1])  # every step added its note; nothing was removed
    disk = table_bytes(os.path.join(path, "agent_steps.lance"))
    print(f"{STEPS} steps of +{NOTE_CHARS} B: {disk / 1e6:.2f} MB on disk for {new_information / 1e6:.2f} MB "
          f"of new information ({disk / new_information:.2f}x)")
    assert disk <= 3 * new_information
    bases = stored_bases(store)
    assert sum(base is not None for base in bases.values()) > 0.9 * STEPS  # nearly every row is a delta
    chain, longest = 0, 0
    for i in range(STEPS):
        chain = chain + 1 if bases[i] is not None else 0
        longest = max(longest, chain)
    assert longest <= MAX_CHAIN_ROWS


def test_every_read_gives_back_the_whole_states(grown):
    store, written, _ = grown
    def same(rows, iterations):
        assert [r["iteration"] for r in rows] == list(iterations)
        assert [text(r["state"]) for r in rows] == [written[i] for i in iterations]
        assert all("state_base" not in r for r in rows)
        assert all("_rowid" not in r for r in rows)  # the indexed read once added Lance's row ids
    pages = [store.steps.search(session_id="s1", offset=o, limit=100) for o in range(0, STEPS, 100)]
    same([r for page in pages for r in page], range(STEPS))
    same(store.steps.search(session_id="s1", newest_first=True, last_iteration=STEPS - 1, limit=50),
         range(STEPS - 1, STEPS - 51, -1))
    same(store.steps.search(session_id="s1", min_iteration=450, max_iteration=450, limit=1), [450])  # a fork's step
    same(store.steps.since_iteration("s1", STEPS - 30), range(STEPS - 29, STEPS))
    same(store.steps.search(session_id="s1", status="ok", min_iteration=510, limit=20), range(510, 530))  # filtered
    same(store.steps.search(agent_id="a1", since=datetime(2000, 1, 1, tzinfo=timezone.utc), limit=5), range(5))
    same([store.steps.latest(session_id="s1")], [STEPS - 1])
    same([store.steps.latest(session_id="s1", after_iteration=STEPS - 10)], [STEPS - 1])
    same([store.steps.latest(agent_id="a1")], [STEPS - 1])
    same(store.steps.after_many({"s1": STEPS - 4, "nobody": 0})["s1"], range(STEPS - 3, STEPS))


def test_rows_written_before_deltas_existed_still_read(tmp_path):
    import lancedb
    import pyarrow as pa

    old_schema = pa.schema([f for f in AGENT_STEPS if f.name not in ("state_base", "state_prev")])
    table = lancedb.connect(str(tmp_path / "db")).create_table("agent_steps", schema=old_schema)
    now = datetime.now(timezone.utc)
    grown = list(states(60))
    rows = [{**step(i, None), "id": f"old-{i}", "created_at": now, "state": codec.dumps(grown[i]),
             "session_iteration": f"s1/{i:012d}"} for i in range(40)]
    table.add(pa.Table.from_pylist(rows, schema=old_schema))

    store = Store(str(tmp_path / "db"))  # adds the column: the old rows hold whole states
    assert {"state_base", "state_prev"} <= set(store.tables["agent_steps"].schema.names)
    for i in range(40, 60):  # the service goes on; its first row has no base it wrote, then deltas
        store.steps.append(step(i, grown[i]))
    bases = stored_bases(store)
    assert bases[40] is None and all(bases[i] == 40 for i in range(41, 60))
    got = store.steps.search(session_id="s1", limit=100)
    assert [text(r["state"]) for r in got] == [text(s) for s in grown]
    store.close()


def test_a_commit_that_failed_or_has_not_landed_is_never_a_base(tmp_path):
    store = Store(str(tmp_path / "db"))
    grown = list(states(8))
    store.steps.append(step(0, grown[0]))
    store.steps.append(step(1, grown[1]))
    _, refused = store.steps.submit(step(2, grown[2]), guard=lambda: False)  # a fenced commit
    with pytest.raises(Fenced):
        refused.result()
    store.steps.append(step(2, grown[2]))  # sent again, as persistence does once ownership is confirmed
    store.steps.append(step(3, grown[3]))
    _, pending = store.steps.submit(step(4, grown[4]))  # not waited for: no base for the next
    store.steps.submit(step(5, grown[5]))[1].result()
    pending.result()
    bases = stored_bases(store)
    assert bases[2] is None and bases[3] == 2 and bases[5] is None
    assert [text(r["state"]) for r in store.steps.search(session_id="s1")] == [text(s) for s in grown[:6]]
    store.close()


def test_small_and_odd_states_are_stored_as_before(tmp_path):
    store = Store(str(tmp_path / "db"))
    for i, state in enumerate([{"i": 0}, {"i": 1}, "plain text", None, [1, 2], {"a": 1}, {"a": 1.0}, {"a": True}]):
        store.steps.append(step(i, state))
    got = store.steps.search(session_id="s1")
    assert [r["state"] for r in got] == [{"i": 0}, {"i": 1}, "plain text", None, [1, 2], {"a": 1}, {"a": 1.0},
                                         {"a": True}]
    assert [type(r["state"]["a"]) for r in got[5:]] == [int, float, bool]
    assert set(stored_bases(store).values()) == {None}
    store.close()


def test_a_delta_made_against_a_row_that_is_gone_reads_as_no_state_never_a_wrong_one(tmp_path):
    """A worker remembers the newest row it wrote for a session; the session is
    deleted (retention, by another worker) and made again under the same id,
    and reaches that iteration elsewhere: a delta the first worker then writes
    names a row that is not there, so its state reads as None (and is logged),
    not as a state built on the new session's row."""
    path = str(tmp_path / "db")
    first, other = Store(path), Store(path)
    grown = list(states(6))
    for i in range(3):
        first.steps.append(step(i, grown[i]))
    other.steps.delete_sessions(["s1"])
    again = list(states(6, seed=99))
    for i in range(3):
        other.steps.append(step(i, again[i]))
    first.steps.append(step(3, grown[3]))  # a delta against first's own row 2, which is gone
    assert stored_bases(first)[3] is not None
    got = first.steps.search(session_id="s1")
    assert [text(r["state"]) for r in got[:3]] == [text(s) for s in again[:3]]
    assert got[3]["state"] is None
    first.close()
    other.close()
