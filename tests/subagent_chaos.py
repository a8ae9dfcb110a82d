"""Sub-agent trees for the crash harness: children finish while agents.py is
killed, and afterwards every child's outcome must have reached its parent
exactly once (runtime/session/child_sessions.py).

Three parents, all ``scripted``:
- a *stepping* parent spawns two children every 9 steps (4 waves) and keeps working;
- a *finishing* parent spawns three children and is done at once, so each
  result has to wake it; woken, it sends a follow-up to one of them, which
  reactivates it if it had finished (a second generation, reported again);
- a *waiting* parent spawns one child with ``wait: true``: the call ends with
  the child's result, and no inbox item comes for it.
"""
import random
from collections import Counter

from tests.chaos_client import assert_contiguous
from tests.harness import wait_for

WAVES = 4


def _child(rng: random.Random, name: str, wait: bool = False) -> dict:
    steps = [{"text": f"{name} step {i}"} for i in range(rng.randint(2, 6))]
    return {"name": "spawn_agent", "args": {
        "task": f"work as {name}", "moniker": "scripted", "name": name, "wait": wait,
        "config": {"interval_s": round(rng.uniform(0.15, 0.5), 2),
                   "frames": steps + [{"text": f"{name} result", "done": True},
                                      {"text": f"{name} follow-up result", "done": True}]}}}


def start_trees(svc, seed: int) -> dict:
    """Create the three parents; returns their session ids and how many children each spawns."""
    rng = random.Random(seed)
    tools = {"interval_s": 0.2, "tools": ["spawn_agent", "message_agent"]}
    stepping = []
    for wave in range(WAVES):  # spread over ~WAVES * 1.6 s, so children finish across the kills
        stepping.append({"text": f"wave {wave}", "tool_calls": [_child(rng, f"s{wave}{k}") for k in range(2)]})
        stepping += [{"text": f"working after wave {wave} ({i})"} for i in range(8)]
    stepping += [{"text": f"working {i}"} for i in range(2000)]
    parents = {
        "stepping": svc.create("scripted", task="delegate in waves", config={**tools, "frames": stepping}),
        "finishing": svc.create("scripted", task="delegate and finish", config={**tools, "frames": [
            {"text": "three at once", "tool_calls": [_child(rng, f"f{k}") for k in range(3)]},
            {"text": "nothing left to do", "done": True},
            {"text": "one more thing", "tool_calls": [{"name": "message_agent",
                                                       "args": {"name": "f0", "text": "one more thing"}}]},
            {"text": "asked f0 again", "done": True}]}),
        "waiting": svc.create("scripted", task="delegate and wait", config={**tools, "frames": [
            {"text": "one, waited for", "tool_calls": [_child(rng, "w0", wait=True)]},
            {"text": "got the result", "done": True}]}),
    }
    return {"parents": {k: v["session_id"] for k, v in parents.items()},
            "expected": {"stepping": 2 * WAVES, "finishing": 3, "waiting": 1}}


def _children(svc, session_id: str) -> list[dict]:
    return svc.get(f"/api/sessions/{session_id}/children").json()["children"]


def _consumed(steps: list[dict]) -> Counter:
    """(child session, generation) of every child_result item a completed step consumed."""
    return Counter((item["data"]["child_session_id"], item["data"]["generation"])
                   for s in steps if s["status"] in ("ok", "done")
                   for item in (s.get("inputs") or {}).get("inbox") or [] if item["kind"] == "child_result")


def assert_child_outcomes_exactly_once(svc, trees: dict, timeout: float = 120) -> dict:
    """Every child finished, reported once, and its outcome reached its parent
    exactly once (the waited-for one as the call's result, never in the inbox)."""
    parents, expected = trees["parents"], trees["expected"]
    for role, sid in parents.items():
        wait_for(lambda: len(_children(svc, sid)) == expected[role], timeout=timeout,
                 what=f"the {role} parent's {expected[role]} children")
    children = {role: _children(svc, sid) for role, sid in parents.items()}
    wait_for(lambda: any(c["name"] == "message_agent" and c["status"] in ("success", "failed") for c in
                         svc.get("/api/tool-calls", session_id=parents["finishing"]).json()["tool_calls"]),
             timeout=timeout, what="the finishing parent's follow-up")
    generations = {}
    for role, kids in children.items():
        for kid in kids:
            sid = kid["session_id"]
            wait_for(lambda: all(a["status"] in ("done", "failed") for a in _actions(svc, sid, "child_message")),
                     timeout=timeout, what=f"follow-ups of {sid} applied")
            snap = svc.wait_status(sid, "done", timeout=timeout)
            snap = wait_for(lambda: (s := svc.session(sid))["status"] == "done"
                            and s["reported_generation"] == s["generation"] and s, timeout=timeout,
                            what=f"{sid}'s last generation reported")
            generations[sid] = snap["generation"]
            assert_contiguous(svc.steps(sid), f"child {sid}")
    delivered = 0
    for role in ("stepping", "finishing"):
        sid = parents[role]
        want = Counter({(k["session_id"], g): 1 for k in children[role]
                        for g in range(1, generations[k["session_id"]] + 1)})
        got = wait_for(lambda: (c := _consumed(svc.steps(sid))) and sum(c.values()) >= len(want) and c,
                       timeout=timeout, what=f"the {role} parent to consume {len(want)} child results")
        assert got == want, f"{role} parent: child results consumed {dict(got)}, expected each once {dict(want)}"
        assert_contiguous(svc.steps(sid), f"{role} parent")
        # the snapshot is saved behind the steps (about a second at most), so it is waited for
        wait_for(lambda: not [g for g in svc.session(sid).get("pending_guidance") or []
                              if g.get("kind") == "child_result"],
                 timeout=30, what=f"the {role} parent's snapshot to let go of the child results its steps used")
        delivered += sum(got.values())
    svc.wait_status(parents["finishing"], "done", timeout=timeout)
    waiting = parents["waiting"]
    svc.wait_status(waiting, "done", timeout=timeout)
    (call,) = svc.get("/api/tool-calls", session_id=waiting).json()["tool_calls"]
    assert call["status"] == "success" and call["result"]["text"] == "w0 result", call
    assert generations[call["result"]["session_id"]] == 1
    assert not _consumed(svc.steps(waiting)), "a waited-for child's outcome also reached the inbox"
    actions = [a for sid in parents.values() for a in _actions(svc, sid, "child_result")]
    return {"children": sum(len(k) for k in children.values()), "child_results_delivered": delivered + 1,
            "child_result_actions": len(actions), "child_results_retried": sum(a["attempts"] > 1 for a in actions),
            "reactivated": sum(g > 1 for g in generations.values())}


def _actions(svc, session_id: str, type_: str) -> list[dict]:
    return [a for a in svc.get("/api/actions", session_id=session_id, limit=1000).json()["actions"]
            if a["type"] == type_]
