"""evals/diff.py: two records paired by iteration, the first divergence, state
as JSON Pointer operations, a served call counted as its recorded status."""
from evals import diff


def step(i, text="t", status="ok", state=None, tokens=(10, 5), cost=0.01, calls=None):
    return {"iteration": i, "text": text, "status": status, "state": state if state is not None else {"n": i},
            "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1], "cost": cost},
            "tool_calls": calls}


def call(i, seq, name="search", args=None, status="success", **extra):
    return {"iteration": i, "seq": seq, "name": name, "args": args or {"q": "x"}, "status": status, **extra}


def record(sid, steps, calls=(), **snap):
    return {"snapshot": {"session_id": sid, "status": "done", **snap}, "steps": list(steps),
            "tool_calls": list(calls)}


def test_identical_records_have_no_divergence_and_pair_every_iteration():
    a = record("a", [step(i) for i in range(4)], [call(1, 0)])
    b = record("b", [step(i) for i in range(4)], [call(1, 0, status="replayed", replayed_status="success")])
    out = diff.diff_records(a, b)
    assert [r["iteration"] for r in out["iterations"]] == [0, 1, 2, 3]
    assert out["first_divergence"] is None and diff.first_divergence(a, b) is None
    assert all(r["differs"] == [] and r["state"] == [] for r in out["iterations"])
    assert out["a"]["tokens"] == 60 and abs(out["a"]["cost"] - 0.04) < 1e-9 and out["a"]["tool_calls"] == 1


def test_the_first_differing_text_is_the_divergence():
    a = record("a", [step(i, text=f"s{i}") for i in range(5)])
    b = record("b", [step(i, text=f"s{i}" if i < 3 else "other") for i in range(5)])
    first = diff.first_divergence(a, b)
    assert first["iteration"] == 3 and first["what"] == ["text"]
    assert first["detail"] == 'text "s3" vs "other"'
    assert diff.diff_records(a, b)["summary"]["differing"] == 2


def test_a_served_call_counts_as_its_recorded_status_and_a_diverging_call_differs():
    a = record("a", [step(0), step(1)], [call(0, 0), call(1, 0, status="failed")])
    served = call(0, 0, status="replayed", replayed_status="success", replay_of="c1")
    diverged = call(1, 0, name="fetch", args={"url": "u"}, status="failed")
    b = record("b", [step(0), step(1)], [served, diverged])
    first = diff.first_divergence(a, b)
    assert first["iteration"] == 1 and first["what"] == ["tool_calls"]
    assert first["detail"].startswith('tool call 0: search({"q": "x"}) failed vs fetch({"url": "u"}) failed')
    wrong_status = record("b", [step(0), step(1)], [call(0, 0, status="replayed", replayed_status="failed"),
                                                      call(1, 0, status="failed")])
    assert diff.first_divergence(a, wrong_status)["iteration"] == 0


def test_shared_history_is_skipped_and_a_step_only_one_took_diverges():
    source = record("src", [step(i) for i in range(6)])
    fork = record("f", [step(i) for i in range(3, 5)], forked_from={"session_id": "src", "iteration": 2})
    out = diff.diff_records(source, fork)
    assert [r["iteration"] for r in out["iterations"]] == [3, 4, 5]
    assert out["summary"]["shared_before"] == 3
    assert out["first_divergence"]["iteration"] == 5 and out["first_divergence"]["what"] == ["step"]
    assert out["first_divergence"]["detail"] == "only a took this step"
    assert out["iterations"][2]["b"] is None


def test_a_replay_told_to_stop_is_compared_up_to_its_end_only():
    source = record("src", [step(i) for i in range(6)])
    replay = record("r", [step(i) for i in range(1, 4)], replay={"to_iteration": 3})
    out = diff.diff_records(source, replay)
    assert [r["iteration"] for r in out["iterations"]] == [1, 2, 3] and out["first_divergence"] is None


def test_status_differs_and_the_state_diff_is_json_pointer_operations():
    a = record("a", [step(0, state={"n": 1, "items": [1, 2], "a/b": "x", "gone": True})])
    b = record("b", [step(0, status="error", state={"n": 2, "items": [1, 2, 3], "a/b": "x", "new": {"k": 1}})])
    row = diff.diff_records(a, b)["iterations"][0]
    assert row["differs"] == ["status"]
    assert row["state"] == [
        {"path": "/gone", "op": "remove", "before": True, "after": None},
        {"path": "/items/2", "op": "add", "before": None, "after": 3},
        {"path": "/n", "op": "replace", "before": 1, "after": 2},
        {"path": "/new", "op": "add", "before": None, "after": {"k": 1}},
    ]
    assert diff.state_diff({"a/b": 1, "t~": 0}, {"a/b": 2, "t~": "0"}) == [
        {"path": "/a~1b", "op": "replace", "before": 1, "after": 2},
        {"path": "/t~0", "op": "replace", "before": 0, "after": "0"}]


def test_caps_cut_iterations_state_ops_and_long_text():
    a = record("a", [step(i, text="x" * 5000, state={str(k): k for k in range(300)}) for i in range(10)])
    b = record("b", [step(i, text="y" * 5000, state={}) for i in range(10)])
    out = diff.diff_records(a, b, limit=4)
    assert out["summary"]["truncated"] is True and len(out["iterations"]) == 4
    row = out["iterations"][0]
    assert len(row["state"]) == diff.MAX_STATE_OPS + 1 and row["state"][-1]["op"] == "truncated"
    assert row["a"]["text_clipped"] is True and len(row["a"]["text"]) == diff.MAX_TEXT + 1
    big = diff.state_diff({"k": "z" * 5000}, {"k": 1})[0]
    assert set(big["before"]) == {"clipped"}


def test_calls_asked_for_stand_in_when_no_rows_were_stored():
    asked = [{"id": "1", "call_id": "c", "name": "search", "args": '{"q": "x"}'}]
    a = record("a", [step(0, calls=asked)])
    b = record("b", [step(0, calls=[{**asked[0], "args": {"q": "y"}}])])
    first = diff.first_divergence(a, b)
    assert first["what"] == ["tool_calls"] and first["a"]["tool_calls"] == [
        {"name": "search", "args": {"q": "x"}, "status": None}]


def test_an_unfinished_session_is_compared_up_to_its_newest_step_only():
    source = record("src", [step(i) for i in range(6)])
    running = record("r", [step(i) for i in range(1, 3)], status="running")
    out = diff.diff_records(source, running)
    assert [r["iteration"] for r in out["iterations"]] == [1, 2] and out["first_divergence"] is None
    assert out["summary"]["unfinished"] == ["b"]
    assert diff.diff_records(source, record("p", [], status="pending"))["iterations"] == []
    for ended in ("stopped", "waiting"):  # waiting for input counts as ended, as the eval runner counts it
        assert diff.first_divergence(source, record("s", [step(1)], status=ended))["iteration"] == 2
