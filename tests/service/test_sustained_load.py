"""Storage under sustained load: maintenance keeps up with the fastest
commit stream this process can produce, and a session's latest page costs the
same whatever the length of its history.

Not timed: the assertions are on what the tables look like, sampled while the
writers run, and on query plans.
"""
import os
import threading
import time

import pytest

from store import Store
from store import codec
from store.maintenance import Maintainer, table_shape

WRITERS = 16          # concurrent callers, each waiting for its commit like a runner does
SECONDS = 30          # an earlier store passed 2,000 versions in ~20 s of this
MAX_SECONDS = 120
MAX_FRAGMENTS = 200   # the bounds, at every sample
MAX_VERSIONS = 2000


def _step(session: str, iteration: int) -> dict:
    return {"agent_id": "a-" + session, "session_id": session, "iteration": iteration, "step_token": str(iteration),
            "next_step_token": str(iteration + 1), "status": "ok", "text": f"step {iteration} " + "x" * 200,
            "state": {"n": iteration, "pad": "y" * 300}}


def _snapshot(session: str, iteration: int) -> dict:
    now = codec.utcnow()
    return {"session_id": session, "agent_id": "a-" + session, "moniker": "joke", "status": "running",
            "iteration": iteration, "next_step_token": str(iteration + 1), "state": {"n": iteration},
            "created_at": now, "updated_at": now}


def test_maintenance_keeps_tables_bounded_under_the_fastest_commit_stream(tmp_path):
    store = Store(str(tmp_path / "db"))
    maintainer = Maintainer(store)  # the service's defaults
    stop = threading.Event()
    written = [0] * WRITERS
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        session = f"s{i}"
        try:
            while not stop.is_set():
                store.steps.append(_step(session, written[i]))
                store.states.submit(_snapshot(session, written[i]))  # like the runner: not awaited
                written[i] += 1
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    def maintain() -> None:
        while not stop.wait(2.0):  # the service's maintenance round
            maintainer.run_due()

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(WRITERS)]
    threads.append(threading.Thread(target=maintain, daemon=True))
    for t in threads:
        t.start()
    samples = []
    started = time.monotonic()
    try:
        # At least SECONDS, and until maintenance has run a few times (a busy
        # machine commits less per second); never past MAX_SECONDS.
        while time.monotonic() - started < SECONDS or (maintainer.runs < 3 and
                                                       time.monotonic() - started < MAX_SECONDS):
            time.sleep(1.0)
            for name in ("agent_steps", "agent_state"):
                shape = table_shape(store.tables[name])
                samples.append((name, shape["fragments"], shape["versions"]))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not errors, errors[:3]
    worst_fragments = max(f for _, f, _ in samples)
    worst_versions = max(v for _, _, v in samples)
    commits = store.writer.stats.by_table.get("agent_steps", 0)
    summary = (f"{sum(written)} steps in {commits} commits of agent_steps; worst sample {worst_fragments} "
               f"fragments, {worst_versions} versions; {maintainer.runs} maintenance runs")
    assert worst_fragments <= MAX_FRAGMENTS, summary
    assert worst_versions <= MAX_VERSIONS, summary
    assert getattr(maintainer, "abandoned", maintainer.failures) == 0, summary
    assert maintainer.runs >= 3, summary
    # Nothing was lost on the way: every session's iterations are all there, in order.
    for i in range(WRITERS):
        got = store.steps.search(session_id=f"s{i}", limit=1000, offset=max(written[i] - 1000, 0))
        assert [s["iteration"] for s in got] == list(range(max(written[i] - 1000, 0), written[i]))
    store.close()


def _bulk_steps(store, session: str, n: int, batch: int = 20_000) -> None:
    for lo in range(0, n, batch):
        now = codec.utcnow()
        store.writer.append("agent_steps", [
            {"id": f"{session}-{i}", "created_at": now, "agent_id": "a-" + session, "session_id": session,
             "iteration": i, "status": "ok", "text": f"step {i}"} for i in range(lo, min(lo + batch, n))])


def test_latest_page_of_a_100k_step_session_uses_the_same_plan_and_reads_as_few_rows_as_a_small_one(tmp_path):
    import re

    store = Store(str(tmp_path / "db"))
    _bulk_steps(store, "big", 100_000)
    _bulk_steps(store, "small", 100)
    Maintainer(store, keep_versions_s=0.001).optimize("agent_steps")  # fold the rows into the indexes

    def plan(session: str, last: int) -> str:
        text = store.steps.session_page_plan(session, last - 99, last)
        return re.sub(r"\d+", "N", text.replace(session, "S"))

    big, small = plan("big", 99_999), plan("small", 99)
    assert big == small
    assert "Sort" not in big, big  # no sort of the session's rows, not even a top-k
    assert "session_iteration_idx" in big, big  # the page is one range of one index

    # The work, not only the plan's shape: filtering on session_id and iteration
    # (two indexes) read every row of the session (rows_scanned=100000 here).
    def rows_scanned(session: str, last: int) -> list[int]:
        text = store.steps.session_page_plan(session, last - 99, last, analyze=True)
        scale = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9}  # Lance writes 100000 as "100.00 K"
        return [round(float(n) * scale[unit]) for n, unit in re.findall(r"rows_scanned=([\d.]+) ?([KMB]?)", text)]

    assert rows_scanned("big", 99_999) == rows_scanned("small", 99) == [100]

    newest = store.steps.search(session_id="big", limit=100, newest_first=True, last_iteration=99_999)
    assert [s["iteration"] for s in newest] == list(range(99_999, 99_899, -1))
    assert all("session_iteration" not in s for s in newest)  # internal: never handed back
    page = store.steps.search(session_id="big", limit=50, offset=50_000)
    assert [s["iteration"] for s in page] == list(range(50_000, 50_050))
    assert store.steps.latest(session_id="big", after_iteration=99_990)["iteration"] == 99_999
    store.close()


def test_a_settled_page_is_read_from_the_indexed_rows_alone_and_a_page_with_new_rows_reads_them_too(
        tmp_path, monkeypatch):
    """Every commit between two upkeeps adds a small fragment that no index
    covers yet, and a filtered read scans each of them.  A page of a session's
    older steps is read from the indexed rows first (iterations have no gaps,
    so a complete answer shows itself); the newest page, a live catch-up and a
    page some of whose rows are not indexed yet read the whole table."""
    import re

    from store import query

    store = Store(str(tmp_path / "db"))
    _bulk_steps(store, "s", 300)
    Maintainer(store, keep_versions_s=0.001).optimize("agent_steps")  # iterations 0..299 indexed
    for i in range(300, 330):  # one small, unindexed fragment per commit
        store.steps.append(_step("s", i))
    reads = []
    for name in ("rows", "indexed_rows"):
        real = getattr(query, name)
        monkeypatch.setattr(query, name, lambda *a, _real=real, _name=name, **kw: reads.append(_name) or _real(*a, **kw))

    def page(**kw) -> tuple[list[int], list[str]]:
        reads.clear()
        return [s["iteration"] for s in store.steps.search(session_id="s", **kw)], list(reads)

    assert page(limit=100) == (list(range(100)), ["indexed_rows"])
    assert page(limit=100, newest_first=True, last_iteration=329, max_iteration=199) == (
        list(range(199, 99, -1)), ["indexed_rows"])
    # Some rows of the window are not indexed yet: the indexed read comes short, the full one has them.
    assert page(min_iteration=250, limit=100) == (list(range(250, 330)), ["indexed_rows", "rows"])
    # The newest page and a live catch-up lie where rows are fresh: straight to the full read (the
    # newest page first reads the iterations past the snapshot's: the snapshot is saved behind the steps).
    assert page(limit=50, newest_first=True, last_iteration=329) == (list(range(329, 279, -1)), ["rows", "rows"])
    assert page(limit=50, newest_first=True, last_iteration=320) == (list(range(329, 279, -1)), ["rows", "rows"])
    reads.clear()
    assert [s["iteration"] for s in store.steps.since_iteration("s", 310)] == list(range(311, 330))
    assert reads == ["rows"]

    # What it spares: the indexed read touches the page's own fragment, the full one every new one.
    def fragments_scanned(indexed_only: bool) -> int:
        text = store.steps.session_page_plan("s", 0, 99, analyze=True, indexed_only=indexed_only)
        return sum(int(n) for n in re.findall(r"fragments_scanned=(\d+)", text))

    assert fragments_scanned(indexed_only=True) == 1
    assert fragments_scanned(indexed_only=False) >= 30
    Maintainer(store, keep_versions_s=0.001).optimize("agent_steps")  # now every row is indexed
    assert page(min_iteration=250, limit=100) == (list(range(250, 330)), ["indexed_rows", "rows"])  # past the end
    assert page(min_iteration=230, limit=100) == (list(range(230, 330)), ["indexed_rows"])
    store.close()


def test_every_round_merges_the_small_fragments_commits_add_and_leaves_full_ones_alone(tmp_path):
    """Each group commit adds a small fragment and a read scans every fragment
    the indexes do not cover yet; between two upkeeps of agent_steps they
    piled up and every page read paid for each.  A round merges them first."""
    import re

    from store import maintenance

    store = Store(str(tmp_path / "db"))
    maintainer = Maintainer(store, every_versions=10_000)  # the full upkeep is not due in this test
    _bulk_steps(store, "base", 15_000, batch=15_000)  # one full fragment (past TAIL_TARGET_ROWS)
    full = {f.fragment_id for f in store.tables["agent_steps"].to_lance().get_fragments()}
    for i in range(40):  # paced commits: one small fragment each
        store.steps.append(_step("s", i))
    fragments = lambda: store.tables["agent_steps"].to_lance().get_fragments()  # noqa: E731

    def fragments_scanned() -> int:
        text = store.steps.session_page_plan("s", 0, 39, analyze=True)
        return sum(int(n) for n in re.findall(r"fragments_scanned=(\d+)", text))

    assert len(fragments()) == 41 and fragments_scanned() >= 40
    assert maintainer.run_due() == []  # nothing due but the merge, which is not a run
    after = fragments()
    assert full <= {f.fragment_id for f in after}  # the full fragment is kept as it is
    assert len(after) == 2 and fragments_scanned() <= 3  # (the plan reads in two steps)
    assert [s["iteration"] for s in store.steps.search(session_id="s", limit=100)] == list(range(40))
    assert maintainer.health()["agent_steps"]["tail_compactions"] == 1
    assert maintainer.health()["agent_steps"]["runs"] == 0

    for i in range(40, 40 + maintenance.TAIL_EVERY_VERSIONS - 1):  # too few new versions: left for later
        store.steps.append(_step("s", i))
    maintainer.run_due()
    assert maintainer.health()["agent_steps"]["tail_compactions"] == 1
    store.close()


def test_every_round_merges_the_small_fragments_of_the_action_queue_while_claims_go_on(tmp_path):
    """Each enqueue, claim and finish adds a fragment to the queue that every
    dispatcher polls, and the poll scans each one the index does not cover
    yet.  A round merges them, holding the queue's commit lock so that a claim
    waits instead of preempting the merge; nothing is lost or claimed twice."""
    store = Store(str(tmp_path / "db"))
    maintainer = Maintainer(store, every_versions=10_000)  # the full upkeep is not due in this test
    queue = store.actions
    waiting = [queue.enqueue("pause", agent_id="a1", session_id=f"w{i}")["id"] for i in range(5)]

    def serve(n: int, tag: str) -> list[str]:
        done = []
        for i in range(n):
            action_id = queue.enqueue("resume", agent_id="a2", session_id=f"{tag}{i}")["id"]
            assert queue.claim([action_id], "worker-1", 30) == [action_id]
            queue.finish(action_id, ok=True)
            done.append(action_id)
        return done

    served = serve(15, "s")  # 3 commits each, most adding a small fragment
    fragments = lambda: len(store.tables["actions"].to_lance().get_fragments())  # noqa: E731
    assert fragments() >= 15
    assert maintainer.run_due() == []  # nothing due but the merge, which is not a run
    assert fragments() <= 3
    assert maintainer.health()["actions"]["tail_compactions"] == 1 and maintainer.health()["actions"]["runs"] == 0

    during = []  # claims and finishes keep coming while rounds merge
    worker = threading.Thread(target=lambda: during.extend(serve(30, "d")))
    worker.start()
    while worker.is_alive():
        maintainer.run_due()
        time.sleep(0.05)
    worker.join()
    maintainer.run_due()
    assert maintainer.health()["actions"]["tail_compactions"] >= 2
    assert [a["id"] for a in queue.pending()] == waiting  # still pending, in order
    for action_id in served + during:
        assert queue.get(action_id)["status"] == "done", action_id
    assert store.tables["actions"].count_rows() == len(waiting) + len(served) + len(during)
    store.close()


def test_upkeep_adds_index_deltas_leaves_full_fragments_alone_and_merges_before_segments_pile_up(
        tmp_path, monkeypatch):
    """A run's work follows what was written since the last run: new rows go
    into delta index segments, a full fragment is never rewritten, and deltas
    are merged before an index has more than MAX_INDEX_SEGMENTS segments."""
    from store import maintenance

    monkeypatch.setattr(maintenance, "COMPACT_TARGET_ROWS", 2_000)
    store = Store(str(tmp_path / "db"))
    maintainer = Maintainer(store, keep_versions_s=0.001)
    _bulk_steps(store, "base", 5_000, batch=5_000)  # one fragment, fuller than the target
    maintainer.optimize("agent_steps")
    full = {f.fragment_id for f in store.tables["agent_steps"].to_lance().get_fragments()}
    widths = []
    for round_ in range(3 * maintenance.MAX_INDEX_SEGMENTS):
        for i in range(5):  # small appends, each its own fragment, like paced commits
            store.steps.append(_step(f"r{round_}", i))
        maintainer.optimize("agent_steps")
        dataset = store.tables["agent_steps"].to_lance()
        widths.append(max(len(ix.segments) for ix in dataset.describe_indices()))
        assert full <= {f.fragment_id for f in dataset.get_fragments()}  # the full fragment is kept as it is
        assert len(store.steps.search(session_id=f"r{round_}", limit=10)) == 5
    assert max(widths) <= maintenance.MAX_INDEX_SEGMENTS, widths
    assert min(widths[1:]) < max(widths), widths  # deltas were added, then merged
    stats = store.tables["agent_steps"].index_stats("session_id_idx")
    assert stats.num_unindexed_rows == 0, stats
    assert "ScalarIndexQuery" in store.tables["agent_steps"].search().where("session_id = 'r7'").explain_plan(True)
    assert store.tables["agent_steps"].count_rows() == 5_000 + 5 * 3 * maintenance.MAX_INDEX_SEGMENTS
    store.close()


def _deleted_files_held_open(root) -> list[str]:
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith(str(root)) and target.endswith("(deleted)"):
            held.append(target)
    return held


def _fts_segments(store) -> set:
    return {seg.uuid for ix in store.tables["agent_steps"].to_lance().describe_indices()
            if ix.index_type.lower().startswith("inverted") for seg in ix.segments}


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc")
def test_upkeep_of_a_searchable_table_lets_go_of_the_index_files_it_replaces(tmp_path):
    """Rewriting an FTS index opens the old one; a run must not keep it.  One
    Lance session shared by every run kept each replaced FTS index open (its
    deleted files and its memory: agents.py grew ~3 MB a minute in the soak)."""
    from store.search import ensure_search_indexes

    store = Store(str(tmp_path / "db"))
    _bulk_steps(store, "base", 200, batch=200)
    ensure_search_indexes(store.tables)
    maintainer = Maintainer(store, keep_versions_s=0.001)
    replaced = 0
    for round_ in range(12):
        for i in range(5):
            store.steps.append(_step(f"r{round_}", i))
        before = _fts_segments(store)
        assert maintainer.optimize("agent_steps")["ok"]
        replaced += bool(before - _fts_segments(store))
    assert replaced, "no run replaced an index segment: the test would prove nothing"
    assert _deleted_files_held_open(tmp_path) == []
    store.close()


def test_pylance_is_the_lance_that_lancedb_is_built_on():
    """Maintenance writes through pylance and everything else through LanceDB:
    one Lance version, so both agree on the format and the commit protocol."""
    import glob
    import os

    import lance
    import lancedb

    (binary,) = glob.glob(os.path.join(os.path.dirname(lancedb.__file__), "_lancedb*.so"))
    with open(binary, "rb") as f:
        assert f"lance-table-{lance.__version__}".encode() in f.read()


def test_lance_log_lines_are_logged_at_their_level_under_their_module(caplog):
    import logging

    from store import lance_log

    with caplog.at_level(logging.DEBUG):
        lance_log.relay_line("[2026-11-23T04:20:00Z ERROR lance::io::commit] the disk is on fire")
        lance_log.relay_line("[2026-11-23T04:20:00Z WARN  lance::dataset::optimize] Compaction commit failed; "
                             "leaving 1 rewritten fragment(s) in place for GC")
        lance_log.relay_line("thread 'tokio-rt-worker' panicked at src/lib.rs:1:1")
        lance_log.relay_line("   ")
    got = [(r.name, r.levelname, r.getMessage()[:26]) for r in caplog.records]
    assert got == [("lance.io.commit", "ERROR", "the disk is on fire"),
                   ("lance.dataset.optimize", "INFO", "Compaction commit failed; "),  # handled by maintenance
                   ("native", "WARNING", "thread 'tokio-rt-worker' p")]


def test_what_native_code_writes_to_stderr_comes_out_in_our_log_format():
    import subprocess
    import sys

    from tests.harness import ROOT

    script = (
        "import logging, os, time\n"
        "from store import lance_log\n"
        "lance_log.route_to_logging()\n"
        "logging.basicConfig(level='INFO', format='OURS %(levelname)s %(name)s: %(message)s')\n"
        "os.write(2, b'[2026-11-23T04:20:00Z WARN  lance::io::commit] raw from native code\\n')\n"
        "logging.getLogger('agents').info('from python')\n"
        "time.sleep(0.5)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "OURS WARNING lance.io.commit: raw from native code" in lines, lines
    assert "OURS INFO agents: from python" in lines, lines
    assert not any(line.startswith("[2026") for line in lines), lines  # nothing raw got through
