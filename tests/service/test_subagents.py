"""Sub-agents through the real service (agents.py and app.py as subprocesses):
``spawn_agent`` / ``message_agent`` called by ``scripted`` sessions, and every
assertion made on persisted rows (steps' inputs, snapshots, tool calls, actions)."""
from tests.harness import wait_for
from tests.subagent_api import parent, spawned_ids, tool_rows, working


def child_spec(frames, name=None, wait=False, **config) -> dict:
    args = {"task": "help your parent", "moniker": "scripted",
            "config": {"interval_s": 0, "frames": frames, "tools": ["human"], **config}, "wait": wait}
    if name:
        args["name"] = name
    return {"name": "spawn_agent", "args": args}


def child_results(steps) -> list[tuple[int, dict]]:
    """(iteration, item) of every child_result item any step consumed."""
    return [(s["iteration"], item) for s in steps for item in (s.get("inputs") or {}).get("inbox") or []
            if item["kind"] == "child_result"]


def children_of(svc, session_id) -> list[dict]:
    r = svc.get(f"/api/sessions/{session_id}/children")
    assert r.status_code == 200, r.text
    return r.json()["children"]


def wait_one_result(svc, session_id, child, timeout=45):
    def found():
        got = [(i, item) for i, item in child_results(svc.steps(session_id))
               if item["data"]["child_session_id"] == child]
        return got or None
    return wait_for(found, timeout=timeout, what=f"child {child}'s result in a step of {session_id}")


# ---- 1. the outcome reaches a stepping, a paused and a finished parent once ----

def test_child_result_reaches_a_stepping_parent_once(shared_service):
    svc = shared_service
    made = parent(svc, [{"text": "spawning", "tool_calls": [
        child_spec([{"text": "the answer is 42", "done": True}], name="solver")]}]
        + working(400), interval_s=0.1)
    sid = made["session_id"]
    (child,) = spawned_ids(svc, sid)
    svc.wait_status(child, "done", timeout=60)
    (consumed, _), = wait_one_result(svc, sid, child)
    svc.wait_steps(sid, consumed + 4, timeout=60)  # it keeps stepping, and nothing comes twice
    assert svc.control(made["agent_id"], "destroy")["status"] == "done"
    got = [(i, item) for i, item in child_results(svc.steps(sid)) if item["data"]["child_session_id"] == child]
    assert len(got) == 1, got
    iteration, item = got[0]
    assert iteration >= 1  # a later step than the one that spawned it
    assert item["data"]["status"] == "done" and item["data"]["text"] == "the answer is 42"
    assert item["data"]["name"] == "solver" and item["source"]["session_id"] == child
    assert "the answer is 42" in item["text"]
    snap = svc.session(child)
    assert snap["parent_session_id"] == sid and snap["parent_agent_id"] == made["agent_id"]
    assert snap["root_session_id"] == sid and snap["reported_generation"] == 1
    assert [c["session_id"] for c in children_of(svc, sid)] == [child]


HUMAN_FIRST = [{"text": "asking", "tool_calls": [{"name": "human", "args": {"question": "go on?"}}]}]


def answer_human(svc, session_id, text="yes"):
    """Post the result of a session's waiting ``human`` call (the child goes on)."""
    row = wait_for(lambda: next((r for r in tool_rows(svc, session_id) if r["name"] == "human"
                                 and r["status"] == "waiting_result"), None), what=f"{session_id} to ask")
    r = svc.post(f"/api/tool-calls/{row['id']}/result", json={"result": text})
    assert r.status_code == 202, r.text
    assert svc.action(r.json()["action_id"])["status"] == "done"


def child_result_actions(svc, parent_id) -> list[dict]:
    found = svc.get("/api/actions", session_id=parent_id, order="oldest", limit=1000).json()["actions"]
    return [a for a in found if a["type"] == "child_result"]


def test_child_result_waits_for_a_paused_parent_and_wakes_a_finished_one(shared_service):
    svc = shared_service
    # paused: the result is kept until resume, then reaches one step
    paused = parent(svc, [{"text": "spawning", "tool_calls": [child_spec(HUMAN_FIRST + [
        {"text": "done while you were paused", "done": True}])]}] + [{"text": f"w{i}"} for i in range(200)],
        interval_s=0.05)
    sid = paused["session_id"]
    (child,) = spawned_ids(svc, sid)
    assert svc.control(paused["agent_id"], "pause")["status"] == "done"
    answer_human(svc, child)
    svc.wait_status(child, "done", timeout=60)
    wait_for(lambda: (a := child_result_actions(svc, sid)) and a[0]["status"] == "done", what="delivery")
    before = svc.settled_step_count(sid)
    assert not child_results(svc.steps(sid)), "a paused parent stepped"
    assert svc.control(paused["agent_id"], "resume")["status"] == "done"
    (iteration, item), = wait_one_result(svc, sid, child)
    assert iteration == before and item["data"]["text"] == "done while you were paused"
    svc.control(paused["agent_id"], "destroy")

    # finished: the parent is woken, continues its iterations, and is done again
    done = parent(svc, [{"text": "spawning", "tool_calls": [child_spec(HUMAN_FIRST + [
        {"text": "late answer", "done": True}])]}, {"text": "nothing to do", "done": True}])
    sid = done["session_id"]
    (child,) = spawned_ids(svc, sid)
    svc.wait_status(sid, "done", timeout=60)
    assert len(svc.steps(sid)) == 2
    answer_human(svc, child)
    steps = wait_for(lambda: (s := svc.steps(sid)) and len(s) >= 3 and s, what="the woken parent's step")
    svc.wait_status(sid, "done", timeout=60)
    got = child_results(svc.steps(sid))
    assert [(i, item["data"]["text"]) for i, item in got] == [(2, "late answer")]
    assert steps[2]["iteration"] == 2 and svc.session(sid)["status_reason"] == "done"


def test_three_children_finishing_between_two_steps_arrive_in_one_step_in_finish_order(shared_service):
    svc = shared_service
    made = parent(svc, [{"text": "spawning three", "tool_calls": [
        child_spec(HUMAN_FIRST + [{"text": f"result {n}", "done": True}], name=f"c{n}") for n in range(3)]}]
        + [{"text": f"w{i}"} for i in range(200)], interval_s=0.05)
    sid = made["session_id"]
    kids = spawned_ids(svc, sid, 3)
    assert svc.control(made["agent_id"], "pause")["status"] == "done"
    for n in (2, 0, 1):  # finish in this order
        answer_human(svc, kids[n])
        svc.wait_status(kids[n], "done", timeout=60)
    actions = wait_for(lambda: (a := child_result_actions(svc, sid)) and len(a) == 3
                       and all(x["status"] == "done" for x in a) and a, what="three deliveries")
    assert [a["payload"]["child_session_id"] for a in actions] == [kids[2], kids[0], kids[1]]
    assert svc.control(made["agent_id"], "resume")["status"] == "done"
    wait_for(lambda: len(child_results(svc.steps(sid))) >= 3, what="the results in a step")
    got = child_results(svc.steps(sid))
    assert len({i for i, _ in got}) == 1, f"spread over steps: {got}"
    assert [item["data"]["text"] for _, item in got] == ["result 2", "result 0", "result 1"]
    svc.control(made["agent_id"], "destroy")


def test_wait_true_ends_the_call_with_the_childs_result_and_no_step_meanwhile(shared_service):
    svc = shared_service
    made = parent(svc, [{"text": "delegating", "tool_calls": [child_spec(HUMAN_FIRST + [
        {"text": "waited for", "data": {"n": 7}, "done": True}], name="inner", wait=True)]},
        {"text": "got it", "done": True}])
    sid = made["session_id"]
    call = wait_for(lambda: next((r for r in tool_rows(svc, sid) if r["status"] == "waiting_result"), None),
                    what="the spawn call to wait")
    child = call["result"]["session_id"]
    assert svc.wait_status(sid, "waiting", timeout=60)["status_reason"] == "tool_result"
    svc.wait_status(child, "waiting", timeout=60)
    assert svc.settled_step_count(sid) == 1  # no step (so no model call) while the child works
    answer_human(svc, child)
    svc.wait_status(sid, "done", timeout=60)
    (row,) = tool_rows(svc, sid)
    assert row["status"] == "success" and row["result"]["text"] == "waited for"
    assert row["result"]["data"] == {"n": 7} and row["result"]["session_id"] == child
    steps = svc.steps(sid)
    assert steps[1]["inputs"]["tool_results"][0]["result"]["text"] == "waited for"
    assert not child_results(steps), "a waited-for child's result must not arrive twice"


def test_message_agent_reactivates_a_finished_child_and_its_next_result_arrives(shared_service):
    svc = shared_service
    made = parent(svc, [
        {"text": "spawning", "tool_calls": [child_spec(HUMAN_FIRST + [
            {"text": "first answer", "done": True}, {"text": "second answer", "done": True}], name="helper")]},
        {"text": "waiting for helper", "done": True},
        {"text": "asking again", "tool_calls": [{"name": "message_agent",
                                                 "args": {"name": "helper", "text": "and once more?"}}]},
        {"text": "thanks", "done": True}])
    sid = made["session_id"]
    (child,) = spawned_ids(svc, sid)
    svc.wait_status(sid, "done", timeout=60)
    answer_human(svc, child)
    wait_for(lambda: len(child_results(svc.steps(sid))) == 2, timeout=60, what="both results")
    svc.wait_status(sid, "done", timeout=60)
    svc.wait_status(child, "done", timeout=60)
    got = child_results(svc.steps(sid))
    assert [(item["data"]["generation"], item["data"]["text"]) for _, item in got] == [
        (1, "first answer"), (2, "second answer")]
    steps = svc.steps(child)
    assert [s["iteration"] for s in steps] == [0, 1, 2]  # history continues
    assert steps[2]["text"] == "second answer"
    messages = [i for i in steps[2]["inputs"]["inbox"] if i["kind"] == "message"]
    assert [m["text"] for m in messages] == ["and once more?"] and messages[0]["source"]["session_id"] == sid
    snap = svc.session(child)
    assert snap["generation"] == 2 and snap["reported_generation"] == 2
    assert len(child_result_actions(svc, sid)) == 2


def test_inherit_transcript_gives_the_child_its_parents_context(shared_service):
    svc = shared_service
    made = parent(svc, [{"text": "thinking about zebras"}, {"text": "and about giraffes", "tool_calls": [
        child_spec([{"text": "seen", "done": True}], inherit={"transcript": 2})]}, {"text": "ok", "done": True}])
    (child,) = spawned_ids(svc, made["session_id"])
    svc.wait_status(child, "done", timeout=60)
    first = svc.steps(child)[0]
    (item,) = [i for i in first["inputs"]["inbox"] if i["kind"] == "parent_context"]
    assert "zebras" in item["text"] and "giraffes" in item["text"]
    assert [s["iteration"] for s in item["data"]["steps"]] == [0, 1]
    assert item["source"]["session_id"] == made["session_id"]


def test_max_children_and_max_depth_are_clear_tool_errors(shared_service):
    svc = shared_service
    made = parent(svc, [{"text": "three", "tool_calls": [
        child_spec([{"text": "x", "done": True}]) for _ in range(3)]}, {"text": "ok", "done": True}],
        max_children=2)
    svc.wait_status(made["session_id"], "done", timeout=60)
    rows = tool_rows(svc, made["session_id"])
    assert sorted(r["status"] for r in rows) == ["failed", "success", "success"]
    (failed,) = [r for r in rows if r["status"] == "failed"]
    assert "max_children reached" in failed["error"]

    deep = parent(svc, [{"text": "one level", "tool_calls": [
        child_spec([{"text": "nesting", "tool_calls": [child_spec([{"text": "x", "done": True}])]},
                    {"text": "ok", "done": True}], tools=["spawn_agent", "human"])]}, {"text": "ok", "done": True}],
        max_depth=1)
    (child,) = spawned_ids(svc, deep["session_id"])
    svc.wait_status(child, "done", timeout=60)
    (row,) = tool_rows(svc, child)
    assert row["status"] == "failed" and "max_depth reached" in row["error"]
    assert children_of(svc, child) == []


def test_spawn_by_profile_uses_the_profile_library(shared_service):
    """``profile`` resolves through agents.py's profile library (the shipped
    ``researcher``), with the call's config as a create's overrides; an unknown
    profile or an override it forbids is a clear tool error."""
    svc = shared_service
    spawn = lambda profile, **config: {"name": "spawn_agent", "args": {  # noqa: E731
        "task": "look it up", "profile": profile, "name": profile, "config": config}}
    made = parent(svc, [{"text": "x", "tool_calls": [
        spawn("researcher", max_steps=1), spawn("no-such-profile"), spawn("researcher", tools=["wait"])]},
        {"text": "ok", "done": True}], tools=["spawn_agent", "http_fetch"])  # researcher's tool: the parent's too
    svc.wait_status(made["session_id"], "done", timeout=60)
    rows = sorted(tool_rows(svc, made["session_id"]), key=lambda r: r["seq"])
    assert [r["status"] for r in rows] == ["success", "failed", "failed"], rows
    assert "no profile 'no-such-profile'" in rows[1]["error"]
    assert "not allowed by profile 'researcher'" in rows[2]["error"]
    child = svc.session(rows[0]["result"]["session_id"])
    assert child["moniker"] == "baml" and child["config"]["profile"]["name"] == "researcher"
    assert child["config"]["max_steps"] == 1 and child["config"]["tools"] == ["http_fetch"]
    svc.control(child["agent_id"], "destroy")


# ---- trees: destroy, abandon, pause/resume, budgets ---------------------------

def test_destroy_cascades_down_the_tree_and_abandon_keeps_a_child(shared_service):
    svc = shared_service
    grandchild = child_spec(working(400), name="grandchild", interval_s=0.1)
    made = parent(svc, [{"text": "spawning", "tool_calls": [
        child_spec([{"text": "spawning below", "tool_calls": [grandchild]}] + working(400), name="child",
                   tools=["spawn_agent", "human"], interval_s=0.1),
        child_spec(working(400), name="loner", interval_s=0.1, on_parent_destroy="abandon")]}]
        + working(400), interval_s=0.1)
    root = made["session_id"]
    child, loner = spawned_ids(svc, root, 2)
    (grand,) = spawned_ids(svc, child)
    for sid in (child, loner, grand):
        svc.wait_steps(sid, 2, timeout=60)
    tree = svc.get(f"/api/sessions/{root}/children", descendants="true").json()
    assert {(r["session_id"], r["depth"]) for r in tree["children"]} == {(child, 1), (loner, 1), (grand, 2)}
    assert svc.get(f"/api/sessions/{grand}/children").json()["parent"]["session_id"] == child

    # pause and resume the whole tree
    assert svc.control(made["agent_id"], "pause", tree=True)["status"] == "done"
    for sid in (root, child, loner, grand):
        svc.wait_status(sid, "paused", timeout=60)
    # guidance: to the session alone, then to the whole tree (paused: it stays pending)
    assert svc.control(made["agent_id"], "interrupt", guidance="only the root")["status"] == "done"
    assert svc.control(made["agent_id"], "interrupt", guidance="everyone", tree=True)["status"] == "done"
    for sid in (root, child, loner, grand):
        wait_for(lambda: "everyone" in pending_texts(svc, sid), what=f"the tree's guidance at {sid}")
    assert "only the root" in pending_texts(svc, root)
    assert not [sid for sid in (child, loner, grand) if "only the root" in pending_texts(svc, sid)]
    counts = {sid: svc.settled_step_count(sid) for sid in (child, grand)}
    assert svc.control(made["agent_id"], "resume", tree=True)["status"] == "done"
    for sid in (child, grand):
        svc.wait_steps(sid, counts[sid] + 2, timeout=60)

    assert svc.control(made["agent_id"], "destroy")["status"] == "done"
    for sid in (root, child, grand):
        svc.wait_status(sid, "stopped", timeout=60)
    settled = {sid: svc.settled_step_count(sid) for sid in (child, grand)}
    loner_steps = len(svc.steps(loner))
    svc.wait_steps(loner, loner_steps + 3, timeout=60)  # the abandoned child works on
    assert svc.session(loner)["status"] == "running"
    assert {sid: len(svc.steps(sid)) for sid in settled} == settled
    loner_agent = svc.session(loner)["agent_id"]
    assert svc.control(loner_agent, "destroy")["status"] == "done"


def pending_texts(svc, session_id) -> list[str]:
    return [g.get("text") for g in svc.session(session_id).get("pending_guidance") or []]


def test_guidance_to_a_finished_parents_tree_reaches_its_children_at_work(shared_service):
    svc = shared_service
    made = parent(svc, [{"text": "spawning", "tool_calls": [child_spec(working(400), name="worker", interval_s=0.1)]},
                        {"text": "over to you", "done": True}])
    (child,) = spawned_ids(svc, made["session_id"])
    svc.wait_status(made["session_id"], "done", timeout=60)
    assert svc.control(svc.session(child)["agent_id"], "pause")["status"] == "done"
    svc.wait_status(child, "paused", timeout=60)
    assert svc.control(made["agent_id"], "interrupt", guidance="wrap it up", tree=True)["status"] == "done"
    wait_for(lambda: "wrap it up" in pending_texts(svc, child), what="the finished parent's guidance at its child")
    assert svc.session(made["session_id"])["status"] == "done"
    assert svc.control(svc.session(child)["agent_id"], "destroy")["status"] == "done"


def test_a_budget_covers_the_whole_tree(shared_service):
    svc = shared_service
    costly = [{"text": f"spent {i}", "usage": {"input_tokens": 20, "output_tokens": 10}} for i in range(10)]
    made = parent(svc, [{"text": "spawning", "tool_calls": [child_spec(costly + [{"text": "all done", "done": True}],
                                                                      name="spender")]}]
                  + working(400), interval_s=0.1, budget_tokens=100)
    root = made["session_id"]
    (child,) = spawned_ids(svc, root)
    snap = svc.wait_status(child, "paused", timeout=60)
    assert snap["status_reason"] == "budget" and "budget" in snap["last_error"]
    assert svc.wait_status(root, "paused", timeout=60)["status_reason"] == "budget"
    steps = svc.steps(child)
    assert len(steps) == 3  # 90 tokens; a fourth step (~30 more) would have crossed 100
    assert sum(s["usage"]["input_tokens"] + s["usage"]["output_tokens"] for s in steps) == 90
    assert svc.settled_step_count(child) == 3

    # the dashboard's "raise budget and resume" (no tree flag): the tree its budget paused resumes with it
    assert svc.control(made["agent_id"], "resume", budget_tokens=1000)["status"] == "done"
    svc.wait_status(child, "done", timeout=60)
    assert len(svc.steps(child)) == 11
    assert svc.session(root)["config"]["budget_tokens"] == 1000
    svc.wait_status(root, "running", timeout=60)
    svc.control(made["agent_id"], "destroy")


def test_a_failed_or_destroyed_child_reports_too(shared_service):
    svc = shared_service
    made = parent(svc, [{"text": "spawning", "tool_calls": [
        {"name": "spawn_agent", "args": {"task": "fail", "moniker": "chaos", "name": "failing",
                                         "config": {"interval_s": 0, "fail_at": 1}}},
        child_spec(working(400), name="doomed", interval_s=0.1)]}] + working(400), interval_s=0.05)
    sid = made["session_id"]
    failing, doomed = spawned_ids(svc, sid, 2)
    svc.wait_status(failing, "error", timeout=60)
    svc.wait_steps(doomed, 1, timeout=60)
    assert svc.control(svc.session(doomed)["agent_id"], "destroy")["status"] == "done"
    both = wait_for(lambda: (r := child_results(svc.steps(sid))) and len(r) == 2 and r, what="both outcomes")
    got = {item["data"]["child_session_id"]: item for _, item in both}
    assert got[failing]["data"]["status"] == "error" and got[failing]["data"]["last_error"]
    assert "failed" in got[failing]["text"]
    assert got[doomed]["data"]["status"] == "stopped" and got[doomed]["data"]["status_reason"] == "destroyed"
    svc.control(made["agent_id"], "destroy")


def test_the_recovery_scan_reports_an_outcome_a_crash_left_unreported(shared_service):
    """A child's final snapshot written without its report (what a path that
    bypasses the session's save, or a crash of an older version, leaves) is
    found by the scan when agents.py starts, and reaches the parent once.
    (Last in this module: it restarts the shared service's agents.py.)"""
    import os

    from store import Store

    svc = shared_service
    made = parent(svc, [{"text": "spawning", "tool_calls": [child_spec(HUMAN_FIRST + [
        {"text": "never reached", "done": True}], name="cut")]}] + working(400), interval_s=0.2)
    sid = made["session_id"]
    (child,) = spawned_ids(svc, sid)
    svc.wait_status(child, "waiting", timeout=60)
    assert svc.stop_agents() == 0
    store = Store(os.path.join(svc.data_dir, "lancedb"))
    try:
        snap = store.states.get(child)
        store.states.save(dict(snap, status="done", status_reason="done", result={"text": "recovered", "data": None},
                               reported_generation=0))
    finally:
        store.close()
    svc.start_agents()
    (iteration, item), = wait_one_result(svc, sid, child)
    assert item["data"]["text"] == "recovered" and item["data"]["status"] == "done"
    assert svc.session(child)["reported_generation"] == 1
    svc.wait_steps(sid, iteration + 3, timeout=60)
    assert len([i for i, it in child_results(svc.steps(sid)) if it["data"]["child_session_id"] == child]) == 1
    svc.control(made["agent_id"], "destroy")
