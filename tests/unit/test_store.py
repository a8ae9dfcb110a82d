"""store/: filters, upserts, claims under races, and no empty commits."""
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from store import InvalidId, Store, check_id
from store import codec, filters


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "db"))


def snapshot(session_id="s1", **fields):
    return {"session_id": session_id, "agent_id": "a1", "moniker": "joke", "status": "running", "iteration": -1,
            "created_at": datetime.now(timezone.utc), **fields}


def step(iteration, session_id="s1", status="ok"):
    return {"agent_id": "a1", "session_id": session_id, "iteration": iteration, "status": status,
            "step_token": str(iteration), "next_step_token": str(iteration + 1), "state": {"i": iteration}}


@pytest.mark.parametrize("bad", ["x' OR '1'='1", "a'b", "", " a", "a b", "a;b", "é", "x" * 129, None, 5, "a\nb"])
def test_check_id_rejects_anything_outside_the_pattern(bad):
    with pytest.raises(InvalidId):
        check_id(bad)
    with pytest.raises(InvalidId):
        filters.eq_id("session_id", bad)


def test_quote_doubles_quotes_and_words_are_closed_sets():
    assert filters.quote("it's") == "'it''s'"
    with pytest.raises(ValueError):
        filters.eq_word("status", "pending' OR '1'='1", {"pending"})
    with pytest.raises(ValueError):
        filters.int_cmp("iteration", "; DROP", 1)


def test_upsert_keeps_one_row_per_session_even_when_racing(store):
    def save(n):
        store.states.save(snapshot(iteration=n))
    threads = [threading.Thread(target=save, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.states.save(snapshot(iteration=42, state={"nested": {"a": [1, 2.5, None, True]}}))
    assert store.tables["agent_state"].count_rows() == 1
    got = store.states.get("s1")
    assert got["iteration"] == 42 and got["state"] == {"nested": {"a": [1, 2.5, None, True]}}


def test_step_queries_filter_order_and_page(store):
    for i in [3, 0, 4, 2, 1]:
        store.steps.append(step(i, status="error" if i == 4 else "ok"))
    store.steps.append(step(0, session_id="other"))
    assert [s["iteration"] for s in store.steps.search(session_id="s1")] == [0, 1, 2, 3, 4]
    assert [s["iteration"] for s in store.steps.search(session_id="s1", min_iteration=1, max_iteration=3)] == [1, 2, 3]
    assert [s["iteration"] for s in store.steps.search(session_id="s1", limit=2, offset=2)] == [2, 3]
    assert [s["iteration"] for s in store.steps.search(session_id="s1", status="error")] == [4]
    assert [s["iteration"] for s in store.steps.since_iteration("s1", 2)] == [3, 4]
    assert store.steps.latest(session_id="s1")["iteration"] == 4  # highest iteration, not last appended
    assert store.steps.latest(agent_id="a1")["session_id"] == "other"  # across sessions: newest by time
    future = datetime.now(timezone.utc) + timedelta(minutes=1)
    assert store.steps.search(session_id="s1", since=future) == []
    assert len(store.steps.search(agent_id="a1")) == 6


def test_iterations_past_what_the_page_key_holds_find_nothing_instead_of_failing(store):
    # The API accepts iterations up to 2**62; the page key has 12 digits (schemas.py).
    # Found by the fuzz test: a fork from iteration 301165683434333888 was a 500.
    from store.steps import LAST_ITERATION

    for i in range(3):
        store.steps.append(step(i))
    huge = 2 ** 62
    assert store.steps.search(session_id="s1", min_iteration=huge) == []
    assert store.steps.search(session_id="s1", min_iteration=huge, max_iteration=huge, limit=1) == []
    assert store.steps.search(session_id="s1", min_iteration=LAST_ITERATION + 1) == []
    assert store.steps.search(session_id="s1", offset=huge) == []
    assert [s["iteration"] for s in store.steps.search(session_id="s1", max_iteration=huge)] == [0, 1, 2]
    assert [s["iteration"] for s in store.steps.search(session_id="s1", newest_first=True, last_iteration=2,
                                                       max_iteration=huge)] == [2, 1, 0]
    assert store.steps.search(session_id="s1", newest_first=True, last_iteration=2, offset=huge) == []
    assert store.steps.latest(session_id="s1", after_iteration=huge) is None
    assert store.steps.latest(session_id="s1", after_iteration=LAST_ITERATION) is None
    assert store.steps.latest(session_id="s1", after_iteration=0)["iteration"] == 2


def test_a_session_page_holds_no_step_of_a_session_whose_id_shares_its_prefix(store):
    # ids may hold ":" "." "-" "_": the page key's "/" cannot, so "s1"'s range ends before "s1:2"'s
    for session in ("s1", "s1x", "s1:2", "s1.3", "s1-4", "s1_5"):
        for i in range(3):
            store.steps.append(step(i, session_id=session))
    for session in ("s1", "s1:2", "s1_5"):
        page = store.steps.search(session_id=session)
        assert [(s["session_id"], s["iteration"]) for s in page] == [(session, i) for i in range(3)]
        newest = store.steps.search(session_id=session, newest_first=True, last_iteration=2, limit=2)
        assert [(s["session_id"], s["iteration"]) for s in newest] == [(session, 2), (session, 1)]
        assert store.steps.latest(session_id=session, after_iteration=0)["session_id"] == session
        assert "session_iteration" not in page[0]


def test_a_step_log_written_before_its_page_key_gets_the_key_computed_for_every_row(tmp_path):
    import lancedb
    import pyarrow as pa

    from store.schemas import AGENT_STEPS, session_iteration

    # the table as an older version of the service created and filled it
    old_schema = pa.schema([f for f in AGENT_STEPS if f.name != "session_iteration"])
    table = lancedb.connect(str(tmp_path / "db")).create_table("agent_steps", schema=old_schema)
    now = datetime.now(timezone.utc)
    rows = [{"id": f"{sess}-{i}", "created_at": now, "agent_id": "a1", "session_id": sess, "iteration": i,
             "status": "ok"} for sess in ("s1", "s1:x", "a.b-c_d") for i in (0, 7, 12, 345_678_901)]
    table.add(pa.Table.from_pylist(rows, schema=old_schema))

    store = Store(str(tmp_path / "db"))
    stored = store.tables["agent_steps"].search().select(["session_id", "iteration", "session_iteration"]) \
        .limit(100).to_list()
    assert len(stored) == len(rows)
    for row in stored:  # SQL's key for the old rows = Python's key for new ones
        assert row["session_iteration"] == session_iteration(row["session_id"], row["iteration"])
    assert "session_iteration" in {ix.columns[0] for ix in store.tables["agent_steps"].list_indices()}
    store.steps.append(step(345_678_902, session_id="s1:x"))
    newest = store.steps.search(session_id="s1:x", newest_first=True, last_iteration=345_678_902, limit=2)
    assert [s["iteration"] for s in newest] == [345_678_902, 345_678_901]
    assert [s["iteration"] for s in store.steps.search(session_id="s1", max_iteration=20)] == [0, 7, 12]


def test_the_index_cache_can_be_sized_apart_from_the_metadata_cache(tmp_path):
    """app.py keeps more of the step index than the metadata cache's size (store/db.py)."""
    import random

    from store.maintenance import Maintainer

    MIB = 2 ** 20
    writer = Store(str(tmp_path / "db"))
    now = datetime.now(timezone.utc)
    writer.writer.append("agent_steps", [{"id": f"s{s}-{i}", "created_at": now, "agent_id": "a1", "session_id": f"s{s}",
                                          "iteration": i, "status": "ok", "text": "x"}
                                         for s in range(20) for i in range(10_000)])
    Maintainer(writer, keep_versions_s=0.001).optimize("agent_steps")  # one BTREE over 200k keys (~4.5 MiB read)

    def cache_after_reading_pages(**sizes) -> int:
        reader, rng = Store(str(tmp_path / "db"), **sizes), random.Random(7)
        for _ in range(300):
            page = reader.steps.search(session_id=f"s{rng.randrange(20)}", min_iteration=rng.randrange(9_980), limit=20)
            assert len(page) == 20
        return reader.cache_bytes()

    both_1 = cache_after_reading_pages(cache_mb=1)
    index_3 = cache_after_reading_pages(cache_mb=1, index_cache_mb=3)
    assert both_1 <= 2 * MIB + MIB // 4  # each cache at its cap (LanceDB's own accounting)
    assert 2 * MIB + MIB // 4 < index_3 <= 4 * MIB + MIB // 4


def test_app_keeps_a_larger_index_cache_and_serve_passes_one_only_when_given(monkeypatch):
    import agents
    import app
    import serve
    import settings

    monkeypatch.delenv("AGENTSVC_LANCE_INDEX_CACHE_MB", raising=False)
    assert app.parse_args([]).index_cache_mb == settings.APP_INDEX_CACHE_MB
    assert agents.parse_args([]).index_cache_mb is None  # = --cache-mb
    assert settings.store_kwargs(agents.parse_args(["--cache-mb", "3"]))["index_cache_mb"] is None
    assert "--index-cache-mb" not in serve.child_args(serve.parse_args([]))  # each child keeps its default
    passed = serve.child_args(serve.parse_args(["--index-cache-mb", "32"]))
    assert passed[passed.index("--index-cache-mb") + 1] == "32"
    monkeypatch.setenv("AGENTSVC_LANCE_INDEX_CACHE_MB", "8")
    assert app.parse_args([]).index_cache_mb == 8 and agents.parse_args([]).index_cache_mb == 8


def test_json_columns_decode_defensively(store):
    store.writer.append("agent_steps", [{**step(0), "id": "x1", "created_at": datetime.now(timezone.utc),
                                         "data": "not json {", "state": '{"ok": 1}'}])
    row = store.steps.search(session_id="s1")[0]
    assert row["data"] == "not json {" and row["state"] == {"ok": 1}


def test_nothing_to_write_commits_nothing(store):
    table = store.tables["actions"]
    version = table.version
    store.writer.append("actions", [])
    assert store.actions.release_expired() == 0
    assert store.actions.release_claims_of(["dead-worker"]) == 0
    assert store.actions.claim([], "w1", 10) == []
    table.checkout_latest()
    assert table.version == version


def test_expired_leases_return_actions_to_pending(store):
    action = store.actions.enqueue("pause", agent_id="a1", session_id="s1")
    # The clock is passed in rather than slept on: a short real lease can run
    # out before the first check on a slow, shared CI machine.
    assert store.actions.claim([action["id"]], "w1", lease_s=60) == [action["id"]]
    assert store.actions.get(action["id"])["status"] == "processing"
    assert store.actions.release_expired(now=codec.utcnow()) == 0
    assert store.actions.release_expired(now=codec.utcnow() + timedelta(seconds=61)) == 1
    got = store.actions.get(action["id"])
    # Claimed but never started: not an attempt (store/actions.py); a claim that starts it counts one.
    assert got["status"] == "pending" and got["claimed_by"] is None and got["attempts"] == 0
    assert store.actions.claim([action["id"]], "w2", lease_s=60, starting=[action["id"]]) == [action["id"]]
    got = store.actions.get(action["id"])
    assert got["attempts"] == 1 and got["error"].startswith("started by w2 at ")


def test_group_commit_coalesces_concurrent_writes_and_survives_cancelled_callers(store):
    commits_before = store.writer.stats.commits
    futures = [store.steps.submit(step(i, session_id=f"g{i % 7}"))[1] for i in range(300)]
    futures[5].cancel()  # a caller that gave up (e.g. a cancelled runner)
    for i, f in enumerate(futures):
        if i != 5:
            f.result(timeout=30)
    commits = store.writer.stats.commits - commits_before
    assert commits < 100, f"{commits} commits for 300 queued rows: not coalesced"
    rows = store.tables["agent_steps"].count_rows()
    assert rows in (299, 300)  # the cancelled one may have been taken before its cancel
    store.steps.append(step(0, session_id="after"))  # the committer is still alive
    assert store.steps.count("after") == 1


def test_writes_from_an_event_loop_settle_its_futures_in_one_wake_up_each_commit(store):
    """``loop=``: the futures are the loop's own, a commit resolves all of
    them, a fenced write raises there, and a waiter that gave up breaks nothing."""
    import asyncio
    from store.writer import Fenced

    async def scenario():
        loop = asyncio.get_running_loop()
        def row(i):
            return {"id": f"aio-{i}", "created_at": codec.utcnow(), **step(i, session_id="aio")}

        futures = [store.writer.submit_append("agent_steps", [row(i)], loop=loop) for i in range(50)]
        assert all(isinstance(f, asyncio.Future) for f in futures)
        futures[3].cancel()
        fenced = store.writer.submit_append("agent_steps", [row(99)], guard=lambda: False, loop=loop)
        outcomes = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 30)
        assert [o for n, o in enumerate(outcomes) if n != 3] == [None] * 49
        with pytest.raises(Fenced):
            await asyncio.wait_for(fenced, 30)
        assert await store.writer.submit_append("agent_steps", [], loop=loop) is None  # nothing to write

    asyncio.run(scenario())
    assert store.steps.count("aio") == 50  # the cancelled waiter's row was written all the same


def test_a_lone_writer_is_never_paced(tmp_path):
    """Adaptive group commit: one writer at a time commits at once, however long
    the interval that spaces commits out under contention."""
    paced = Store(str(tmp_path / "db"), min_commit_interval_s=3600)
    done = threading.Event()

    def write():
        for i in range(5):
            paced.steps.append(step(i, session_id="lone"))
        done.set()

    threading.Thread(target=write, daemon=True).start()
    assert done.wait(600), "a lone writer waited for the interval between commits"
    assert paced.steps.count("lone") == 5


def test_upserts_in_one_batch_keep_the_last_row_per_key(store):
    futures = [store.states.submit(snapshot(session_id=f"s{i % 3}", iteration=i)) for i in range(30)]
    for f in futures:
        f.result(timeout=30)
    assert store.tables["agent_state"].count_rows() == 3
    assert sorted(store.states.get(f"s{k}")["iteration"] for k in range(3)) == [27, 28, 29]


def test_change_token_moves_on_every_commit_from_any_process(tmp_path):
    uri = str(tmp_path / "db")
    watcher, writer = Store(uri), Store(uri)
    token = watcher.actions.change_token()
    assert watcher.actions.change_token() == token  # reading changes nothing
    writer.actions.enqueue("pause", agent_id="a", session_id="s")
    assert watcher.actions.change_token() != token


def test_maintenance_keeps_fragments_and_versions_bounded_under_writes(store):
    from store.maintenance import Maintainer
    maintainer = Maintainer(store, every_versions=50, min_interval_s=0, keep_versions_s=0)
    for i in range(300):
        store.steps.append(step(i))
        if i % 25 == 0:
            store.states.save(snapshot(iteration=i))
        maintainer.run_due()
    shape = store.tables["agent_steps"].stats()["fragment_stats"]["num_fragments"]
    assert shape <= 60, f"{shape} fragments: compaction is not keeping up"
    assert len(store.tables["agent_steps"].list_versions()) <= 60
    assert maintainer.runs >= 5 and maintainer.failures == 0
    assert [s["iteration"] for s in store.steps.search(session_id="s1", limit=1000)] == list(range(300))
    assert store.states.get("s1")["iteration"] == 275


def test_finishes_with_the_same_outcome_share_commits_and_keep_their_errors(store):
    ids = [store.actions.enqueue("pause", agent_id="a", session_id=f"s{i}")["id"] for i in range(40)]
    commits = store.writer.stats.commits
    futures = [store.actions.submit_finish(i, ok=n % 10 != 0, error=None if n % 10 else f"it's broken #{n}")
               for n, i in enumerate(ids)]
    for f in futures:
        f.result(timeout=30)
    assert store.writer.stats.commits - commits < 40
    for n, action_id in enumerate(ids):
        got = store.actions.get(action_id)
        assert got["processed"] is True and got["processed_at"]
        if n % 10:
            assert got["status"] == "done" and got["error"] is None
        else:
            assert got["status"] == "failed" and got["error"] == f"it's broken #{n}"


def test_timestamps_before_year_1000_make_valid_filters(store):
    store.steps.append(step(0))
    assert len(store.steps.search(session_id="s1", since=datetime(152, 9, 28, tzinfo=timezone.utc))) == 1
    assert filters.ts_cmp("created_at", ">=", datetime(5, 1, 1)).count("0005-01-01") == 1


def test_resumable_can_skip_the_sessions_of_live_workers(store):
    for sid, owner in (("s1", "w-alive"), ("s2", "w-dead"), ("s3", None)):
        store.states.save(snapshot(session_id=sid, owner=owner))
    store.states.save(snapshot(session_id="s4", owner="w-dead", status="done"))
    assert sorted(s["session_id"] for s in store.states.resumable()) == ["s1", "s2", "s3"]
    assert sorted(s["session_id"] for s in store.states.resumable(skip_owners={"w-alive"})) == ["s2", "s3"]


def test_resumable_leaves_out_the_sessions_the_caller_runs_and_keeps_whole_rows_oldest_first(store):
    from store import state
    base = datetime(2026, 11, 26, 18, 0, tzinfo=timezone.utc)
    for n in range(7):  # created_at with and without a fraction of a second
        store.states.save(snapshot(session_id=f"s{n}", owner="w-me", state={"n": n},
                                   created_at=base.replace(second=6 - n, microsecond=500 if n % 2 else 0)))
    whole = store.states.resumable()
    old_chunk, state.RESUMABLE_CHUNK = state.RESUMABLE_CHUNK, 2  # several reads by ids
    try:
        left = store.states.resumable(skip_sessions=frozenset({"s0", "s3"}))
    finally:
        state.RESUMABLE_CHUNK = old_chunk
    assert [r["session_id"] for r in left] == ["s6", "s5", "s4", "s2", "s1"]  # oldest first
    assert left == [r for r in whole if r["session_id"] not in ("s0", "s3")]  # the same whole rows
    assert store.states.resumable(skip_sessions=frozenset(f"s{n}" for n in range(7))) == []


class _LosesRacesWithCleanup:
    """A table whose first ``failures`` reads fail the way LanceDB does when
    cleanup removed a file the read had resolved; everything else is real."""

    def __init__(self, table, failures, message="lance error: LanceError(IO): Not found: /x/data/1.lance"):
        self.table, self.failures, self.message, self.checkouts = table, failures, message, 0

    def _maybe_fail(self):
        if self.failures:
            self.failures -= 1
            raise RuntimeError(self.message)

    def count_rows(self, *args):
        self._maybe_fail()
        return self.table.count_rows(*args)

    def search(self):
        self._maybe_fail()
        return self.table.search()

    def stats(self):
        return self.table.stats()

    def list_versions(self):
        self._maybe_fail()
        return self.table.list_versions()

    def checkout_latest(self):
        self.checkouts += 1
        self.table.checkout_latest()


def test_reads_that_lose_a_race_with_cleanup_read_again(store):
    from store import query
    store.steps.append(step(0, session_id="s1"))
    real = store.tables["agent_steps"]
    flaky = _LosesRacesWithCleanup(real, failures=2)
    assert [r["iteration"] for r in query.rows(flaky, "agent_steps", filters.eq_id("session_id", "s1"))] == [0]
    assert flaky.checkouts == 2
    assert query.count(_LosesRacesWithCleanup(real, failures=1)) == 1
    with pytest.raises(RuntimeError, match="Not found"):  # a file that stays gone is an error, not a hang
        query.count(_LosesRacesWithCleanup(real, failures=query.VANISHED_FILE_RETRIES + 1))
    with pytest.raises(RuntimeError, match="boom"):  # other errors are not retried
        query.count(_LosesRacesWithCleanup(real, failures=1, message="boom"))


def test_a_table_shape_outlasts_a_cleanup_that_removes_manifests_while_they_are_listed(store):
    # CI met a listing of versions that lost the race four times in a row
    # (cleanup was deleting hundreds of manifests); the shape reads on.
    from store import maintenance, query
    store.steps.append(step(0, session_id="s1"))
    real = store.tables["agent_steps"]
    flaky = _LosesRacesWithCleanup(real, failures=query.VANISHED_FILE_RETRIES + 3,
                                   message="lance error: Not found: /x/_versions/18446744073709551253.manifest")
    shape = maintenance.table_shape(flaky)
    assert shape["rows"] == 1 and shape["versions"] == len(real.list_versions())
    assert flaky.checkouts == query.VANISHED_FILE_RETRIES + 3
    with pytest.raises(RuntimeError, match="Not found"):  # still bounded
        maintenance.table_shape(_LosesRacesWithCleanup(real, failures=maintenance.SHAPE_RETRIES + 1))


def test_the_commit_watch_fires_on_a_commit_from_another_connection(tmp_path):
    import select
    uri = str(tmp_path / "db")
    watching = Store(uri)
    watch = watching.actions.watch()
    assert watch is not None, "a local queue on Linux can be watched"
    try:
        assert select.select([watch], [], [], 0.2)[0] == []  # quiet until someone commits
        Store(uri).actions.enqueue("pause", agent_id="a1", session_id="s1")
        assert select.select([watch], [], [], 10)[0] == [watch]
        assert watch.drain() >= 1
        assert select.select([watch], [], [], 0.2)[0] == []  # drained
    finally:
        watch.close()


def test_upkeep_holds_the_commits_of_a_table_committing_fast_from_its_first_try(store):
    """An append-only table's upkeep races its commits unless they come fast:
    then it holds them back at once (a compaction racing a lone agent's ~100
    commits a second lost every rebase for 45 s)."""
    from store.maintenance import BUSY_COMMITS_PER_S, Maintainer
    maintainer = Maintainer(store, min_interval_s=0)
    maintainer.run_due()  # the first round marks where each table's commit count stands
    assert not maintainer._hold_from_first_try("agent_steps")
    assert maintainer._hold_from_first_try("agent_state")  # takes upserts: always held
    started = time.monotonic()
    by_table = store.writer.stats.by_table
    by_table["agent_steps"] = by_table.get("agent_steps", 0) + int(BUSY_COMMITS_PER_S * 1000)  # committed meanwhile
    while time.monotonic() - started < 0.05:
        time.sleep(0.01)
    maintainer.run_due()
    assert maintainer._hold_from_first_try("agent_steps")
    assert not maintainer._hold_from_first_try("conversation_messages")


def test_newest_first_pages_start_at_the_newest_step_past_the_snapshot(store):
    """The snapshot is saved behind the steps: a page counted back from its
    iteration starts at the newest persisted step all the same."""
    for i in range(12):
        store.steps.append(step(i, session_id="behind"))
    page = store.steps.search(session_id="behind", newest_first=True, limit=3, last_iteration=7)
    assert [s["iteration"] for s in page] == [11, 10, 9]
    page = store.steps.search(session_id="behind", newest_first=True, limit=3, offset=3, last_iteration=7)
    assert [s["iteration"] for s in page] == [8, 7, 6]


def test_an_unheld_compaction_commits_at_once_while_steps_append_as_fast_as_they_can(store):
    """The rewrite runs beside the appends and only its commit holds them
    (store/maintenance.py ``_compact``): racing every append, the whole
    compaction lost its rebase for 30 s at a time (Lance's "Too many
    concurrent writers") and the fragments piled up."""
    from store.maintenance import COMPACT_TARGET_ROWS, Maintainer
    for i in range(120):  # 120 small fragments to compact
        store.steps.append(step(i))
    stop, appended = threading.Event(), []

    def appender():
        i = 1000
        while not stop.is_set():
            store.steps.submit(step(i))[1].result(timeout=30)
            appended.append(i)
            i += 1
    thread = threading.Thread(target=appender)
    thread.start()
    try:
        while len(appended) < 20:  # the stream is going
            time.sleep(0.01)
        table = store.tables["agent_steps"]
        before = table.stats()["fragment_stats"]["num_fragments"]
        started = time.monotonic()
        # The compaction alone: the index commit after it (in _optimize_once) is not
        # held, may lose its race to the appends, and is then retried held (optimize).
        Maintainer(store)._compact("agent_steps", table, COMPACT_TARGET_ROWS, held=False)
        took = time.monotonic() - started
        during = len(appended)
    finally:
        stop.set()
        thread.join()
    after = table.stats()["fragment_stats"]["num_fragments"]
    assert took < 25, f"the compaction took {took:.1f} s"  # Lance gives up a race after 30 s
    assert after < before / 2, (before, after)
    assert during > 20  # the appends went on around it
    assert len(store.steps.search(session_id="s1", limit=100_000)) == 120 + len(appended)


def test_a_store_opening_while_another_process_creates_its_tables_gets_them(tmp_path, monkeypatch):
    """Two processes bootstrapping one directory: this one found no table, the
    other created it and declared its primary key before this one's create, so
    the schemas differ in that key's metadata and create(exist_ok) refuses."""
    import lancedb.db
    from store.schemas import PRIMARY_KEYS
    Store(str(tmp_path / "db")).close()  # "the other process": every table made, primary keys declared
    opened = lancedb.db.LanceDBConnection.open_table
    missed = set()

    def not_there_yet(self, name, *args, **kwargs):
        if name in PRIMARY_KEYS and name not in missed:
            missed.add(name)
            raise ValueError(f"Table '{name}' was not found")
        return opened(self, name, *args, **kwargs)
    monkeypatch.setattr(lancedb.db.LanceDBConnection, "open_table", not_there_yet)
    store = Store(str(tmp_path / "db"))
    assert missed == set(PRIMARY_KEYS)
    assert all(store.tables[name].schema.field(key).metadata for name, key in PRIMARY_KEYS.items())
    store.close()
