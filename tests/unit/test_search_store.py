"""The store side of search, in process: rows appended after the FTS index
was built are found at once (scanned), refresh folds them into the index,
tool calls are searched by name, args, result and error, and snippets mark
the matched words."""

from store import Store
from store import search as store_search
from store.maintenance import Maintainer


def step(store, i, text, session="s1"):
    store.steps.append({"agent_id": "a1", "session_id": session, "iteration": i, "status": "ok", "text": text,
                        "step_token": str(i), "next_step_token": str(i + 1)})


def query(*words, **filters):
    return store_search.SearchQuery(terms=list(words), **filters)


def test_new_rows_are_found_before_and_after_the_index_refresh(tmp_path):
    store = Store(str(tmp_path / "db"))
    try:
        for i in range(30):
            step(store, i, f"routine step number {i}")
        step(store, 30, "the okapi appeared at dawn")
        assert store_search.unindexed_rows(store.tables)["agent_steps"] == 31
        hits = store_search.fts(store.tables, query("okapi"))
        assert [(h["kind"], h["iteration"]) for h in hits] == [("step", 30)]

        maintainer = Maintainer(store, every_versions=1, min_interval_s=0)
        assert store_search.refresh_search_indexes(store, maintainer.optimize, min_unindexed=10) == ["agent_steps"]
        assert store_search.unindexed_rows(store.tables)["agent_steps"] == 0
        assert store_search.refresh_search_indexes(store, maintainer.optimize, min_unindexed=10) == []
        step(store, 31, "a second okapi")
        assert {h["iteration"] for h in store_search.fts(store.tables, query("okapi"))} == {30, 31}
        assert store_search.fts(store.tables, query("okapi", session_ids=[])) == []
        assert store_search.fts(store.tables, query("okapi", session_ids=["other"])) == []
    finally:
        store.close()


def test_tool_calls_are_searchable_by_name_args_result_and_error(tmp_path):
    from store.codec import utcnow

    store = Store(str(tmp_path / "db"))
    try:
        store.writer.append("tool_calls", [{
            "id": "tc1", "created_at": utcnow(), "agent_id": "a1", "session_id": "s1", "iteration": 2, "seq": 0,
            "name": "add", "args": {"a": 1}, "status": "success", "result": {"sum": "pangolin"}, "error": None,
            "attempts": 1}])
        hit = store_search.fts(store.tables, query("pangolin"))[0]
        assert (hit["kind"], hit["id"], hit["field"], hit["name"], hit["status"], hit["iteration"]) == (
            "tool_call", "tc1", "result", "add", "success", 2)
        assert store_search.fts(store.tables, query("pangolin", status="failed")) == []
        assert store_search.fts(store.tables, query("pangolin", kinds=frozenset({"step"}))) == []
        assert store_search.fts(store.tables, query("add", kinds=frozenset({"tool_call"})))[0]["field"] == "name"
    finally:
        store.close()


def test_terms_and_snippets():
    assert store_search.terms_of("' OR 1=1; DROP \"x\" text:foo*") == ["or", "1", "drop", "x", "text", "foo"]
    assert len(store_search.terms_of(" ".join(f"w{i}" for i in range(100)))) == store_search.MAX_TERMS
    text = "x" * 500 + " the Okapis came " + "y" * 500
    snippet, marks = store_search.snippet_of(text, ["okapi"])
    assert snippet.startswith("…") and snippet.endswith("…") and len(snippet) <= store_search.SNIPPET_CHARS + 2
    assert [snippet[a:b] for a, b in marks] == ["Okapis"]


def test_vectors_get_an_index_once_large_enough_and_filters_apply(tmp_path):
    import random
    from datetime import datetime, timezone

    dim = 16
    store = Store(str(tmp_path / "db"), embedding={"dim": dim, "model": "m1", "index_after": 600})
    try:
        rng = random.Random(7)
        now = datetime.now(timezone.utc)
        rows = [{"kind": "step", "source_id": f"r{i}", "created_at": now, "agent_id": "a1" if i % 2 else "a2",
                 "session_id": "s1", "conversation_id": None, "status": "ok",
                 "vector": [rng.random() for _ in range(dim)]} for i in range(599)]
        store.vectors.submit(rows).result()
        store.vectors.submit(rows[:10]).result()  # embedding again replaces, never duplicates
        assert store.vectors.count() == 599
        assert store.vectors.ensure_vector_index() is False  # not large enough yet
        store.vectors.submit([{**rows[0], "source_id": "r599"}]).result()
        assert store.vectors.ensure_vector_index() is True
        assert store.vectors.ensure_vector_index() is False  # built once
        target = rows[5]["vector"]
        where = store_search.vector_where(query("x", agent_id="a1"))
        near = store.vectors.nearest(target, where, 5)
        assert near and near[0]["source_id"] == "r5"
        assert store.vectors.nearest(target, store_search.vector_where(query("x", agent_id="a2")), 5)[0][
            "source_id"] != "r5"
        assert store.vectors.embedded("step", ["r1", "r5", "nope"]) == {"r1", "r5"}
    finally:
        store.close()
