"""The timeline's step filters in the store (store/step_filters.py through
StepLog.matching): each keeps exactly the steps it names, pages them without
skipping or repeating one, counts them, and a 2,000-step session stays quick."""

import pytest

from store import Store, step_filters

SESSION = "s1"


def attempts(*outcomes):
    return {"input_tokens": 1, "output_tokens": 1, "duration_ms": 1.0, "cost": None,
            "attempts": len(outcomes), "failed_attempts": sum(o != "ok" for o in outcomes),
            "calls": [{"model": "m", "attempts": [{"n": n + 1, "outcome": o} for n, o in enumerate(outcomes)]}]}


def kind_of_step(i: int) -> dict:
    """Iteration i's columns: a pattern that gives each filter its own iterations."""
    row: dict = {"status": "ok"}
    if i % 7 == 3:
        row["status"] = "error"
        row["error"] = "boom"
    if i % 11 == 5:
        row["status"] = "interrupted"
    if i % 5 == 1:
        row["tool_calls"] = [{"id": f"c{i}", "call_id": "x", "name": "add", "args": {}}]
    if i % 6 == 2:
        row["guidance"] = [{"action_id": f"a{i}", "kind": "guidance", "text": "go on"}] if i % 12 == 8 \
            else [{"action_id": f"a{i}", "text": "go on"}]  # what POST .../interrupt queues: no kind, so "guidance"
    elif i % 6 == 4:  # inbox items that are not a person's guidance
        row["guidance"] = [{"action_id": f"a{i}", "kind": "child_result", "text": "\"kind\":\"guidance\""},
                           {"action_id": f"b{i}", "kind": "observer_note", "text": "a note",
                            "source": {"kind": "guidance"}}]
    elif i % 6 == 0 and i % 4 == 0:
        row["guidance"] = [{"action_id": f"m{i}", "kind": "message", "text": "hi", "source": {"conversation_id": "c"}}]
    if i % 4 == 1:
        row["usage"] = attempts("timeout", "ok")
    elif i % 4 == 2:
        row["usage"] = attempts("ok")
    elif i % 9 == 0:
        row["usage"] = attempts("429", "5xx", "unparseable")
    return row


def expected(count: int, only=None, outcome=None) -> list[int]:
    keep = []
    for i in range(count):
        row = kind_of_step(i)
        if only == "errors" and row["status"] != "error":
            continue
        if only == "interrupted" and row["status"] != "interrupted":
            continue
        if only == "tool_calls" and not row.get("tool_calls"):
            continue
        if only == "guided" and not any(g.get("kind", "guidance") in ("guidance", "message") for g in row.get("guidance") or []):
            continue
        if outcome and outcome not in {a["outcome"] for c in (row.get("usage") or {}).get("calls", [])
                                       for a in c["attempts"]}:
            continue
        keep.append(i)
    return keep


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = Store(str(tmp_path_factory.mktemp("filters") / "db"))
    for i in range(200):
        store.steps.append({"agent_id": "a1", "session_id": SESSION, "iteration": i, "step_token": str(i),
                            "next_step_token": str(i + 1), "state": {"i": i}, **kind_of_step(i)})
    # another session's matching steps never leak in
    store.steps.append({"agent_id": "a2", "session_id": "s2", "iteration": 3, "status": "error",
                        "guidance": [{"kind": "guidance", "text": "x"}], "usage": attempts("timeout")})
    return store


CASES = [(only, None) for only in step_filters.ONLY] + [
    (None, "timeout"), (None, "ok"), (None, "429"), (None, "cancelled"), ("tool_calls", "timeout"), ("guided", "ok")]


@pytest.mark.parametrize("only,outcome", CASES)
def test_each_filter_keeps_exactly_its_steps(store, only, outcome):
    want = expected(200, only, outcome)
    assert only is None or outcome is not None or 0 < len(want) < 200  # the pattern makes every filter choose
    found, matched = store.steps.matching(only=only, attempt_outcome=outcome, session_id=SESSION, limit=1000)
    assert [s["iteration"] for s in found] == want
    assert matched == len(want)
    assert all(s["state"] == {"i": s["iteration"]} for s in found)  # whole rows, states and all


@pytest.mark.parametrize("only,outcome", [("errors", None), ("guided", None), (None, "timeout")])
def test_pages_newest_first_cover_every_match_once(store, only, outcome):
    want = expected(200, only, outcome)[::-1]
    seen, offset = [], 0
    while True:
        page, matched = store.steps.matching(only=only, attempt_outcome=outcome, session_id=SESSION,
                                             limit=7, offset=offset, newest_first=True)
        assert matched == len(want)
        if not page:
            break
        seen += [s["iteration"] for s in page]
        offset += len(page)
    assert seen == want


def test_filters_take_the_other_filters_too(store):
    found, matched = store.steps.matching(only="errors", session_id=SESSION, min_iteration=50, max_iteration=100)
    assert [s["iteration"] for s in found] == [i for i in expected(200, "errors") if 50 <= i <= 100]
    found, _ = store.steps.matching(only="errors", limit=1000)  # every session
    assert {s["session_id"] for s in found} == {SESSION, "s2"}


def test_unknown_words_never_reach_a_filter():
    for only, outcome in [("bogus", None), (None, "x' OR 1=1 --"), (None, "%")]:
        with pytest.raises(ValueError):
            step_filters.where(only, outcome)


def test_a_long_session_is_filtered_and_paged_right(tmp_path):
    """2,000 steps: the newest page of each kind of filter is exact.  (How long
    it takes is no assertion here: the suite runs beside other work.)"""
    store = Store(str(tmp_path / "db"))
    committed = [store.steps.submit({"agent_id": "a1", "session_id": "long", "iteration": i, "state": {"i": i},
                                     **kind_of_step(i)})[1] for i in range(2000)]
    for future in committed:
        future.result()
    for only, outcome in [("errors", None), ("guided", None), (None, "timeout")]:
        page, matched = store.steps.matching(only=only, attempt_outcome=outcome, session_id="long",
                                             limit=50, newest_first=True)
        assert matched == len(expected(2000, only, outcome))
        assert [s["iteration"] for s in page] == expected(2000, only, outcome)[::-1][:50]
