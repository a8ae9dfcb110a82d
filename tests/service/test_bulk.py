"""Fleet controls against the real service: ``POST /api/agents/bulk``.

A bulk pause by filter reaches exactly the matching sessions, each through its
own queued action applied at a step boundary (its steps stop, contiguous and
whole; its snapshot says paused; its action is done) while every other session
keeps stepping.  A preview queues nothing, bad filters are 400s, and a destroy
by ids ends only the agents named.
"""
import pytest
from ulid import ULID

from tests.harness import wait_for

FRAMES = [{"text": f"frame {i}"} for i in range(2000)]  # scripted: ~3 minutes of steps at 0.1 s


def scripted(svc, model: str, name: str) -> dict:
    """A session that steps until told otherwise, on a given (never called) LLM model."""
    return svc.create("scripted", name=name, config={"interval_s": 0.1, "frames": FRAMES, "llm": {"model": model}})


def bulk(svc, **body):
    return svc.post("/api/agents/bulk", json=body)


def actions_of(svc, session_id: str, type_: str) -> list[dict]:
    return svc.get("/api/actions", session_id=session_id, type=type_).json()["actions"]


def test_a_bulk_pause_by_model_pauses_each_match_at_a_step_boundary_and_no_other(shared_service):
    svc = shared_service
    model = f"bulk-model-{ULID()}"
    matched = [scripted(svc, model, f"fleet {i}") for i in range(3)]
    others = [scripted(svc, f"other-{ULID()}", "not in the fleet"), svc.create("joke", "owls", config={"interval_s": 0.1})]
    for made in matched + others:
        svc.wait_steps(made["session_id"], 2, timeout=60)
    ids = {m["session_id"] for m in matched}

    preview = bulk(svc, filter={"model": model}, action="pause", dry_run=True)
    assert preview.status_code == 200, preview.text
    seen = preview.json()
    assert seen["matched"] == seen["applies"] == 3 and not seen["truncated"]
    assert {s["session_id"] for s in seen["sessions"]} == ids
    assert all(s["applies"] and s["status"] == "running" for s in seen["sessions"])
    assert not any(actions_of(svc, sid, "pause") for sid in ids)  # a preview queues nothing

    r = bulk(svc, filter={"model": model, "status": "running"}, action="pause")
    assert r.status_code == 202, r.text
    answer = r.json()
    assert answer["matched"] == 3 and answer["skipped"] == 0 and answer["remaining"] == 0
    assert {a["session_id"] for a in answer["actions"]} == ids
    assert {a["agent_id"] for a in answer["actions"]} == {m["agent_id"] for m in matched}

    for a in answer["actions"]:
        assert svc.action(a["action_id"], timeout=60)["status"] == "done"
        assert svc.wait_status(a["session_id"], "paused", timeout=60)["status_reason"] == "user"
    settled = {sid: svc.settled_step_count(sid, timeout=60) for sid in ids}
    before = {m["session_id"]: len(svc.steps(m["session_id"])) for m in others}
    for made in others:  # the others go on stepping...
        svc.wait_steps(made["session_id"], before[made["session_id"]] + 5, timeout=60)
        assert svc.session(made["session_id"])["status"] == "running"
        assert not actions_of(svc, made["session_id"], "pause")
    for sid in ids:  # ...while the paused ones took no step since, and stopped between two whole steps
        steps = svc.steps(sid)
        assert len(steps) == settled[sid]
        assert [s["iteration"] for s in steps] == list(range(len(steps)))
        assert all(s["status"] == "ok" for s in steps)
        snapshot = wait_for(lambda: (s := svc.session(sid))["iteration"] == len(steps) - 1 and s, timeout=90,
                            what="the paused snapshot to hold every step")
        assert snapshot["status"] == "paused"

    # Paused now, they are skipped by another pause; a resume by the same filter reaches them again.
    again = bulk(svc, filter={"model": model}, action="pause").json()
    assert again["matched"] == 3 and again["skipped"] == 3 and again["actions"] == []
    resumed = bulk(svc, filter={"model": model}, action="resume")
    assert resumed.status_code == 202 and len(resumed.json()["actions"]) == 3
    for a in resumed.json()["actions"]:
        assert svc.action(a["action_id"], timeout=60)["status"] == "done"
    for sid in ids:
        svc.wait_steps(sid, settled[sid] + 2, timeout=60)
    for made in matched + others:
        svc.control(made["agent_id"], "destroy")


def test_a_bulk_destroy_by_ids_and_an_interrupt_by_text(shared_service):
    svc = shared_service
    tag = str(ULID())
    doomed = [svc.create("echo", f"doomed {tag}", config={"interval_s": 0.1}) for _ in range(2)]
    spared = svc.create("echo", f"spared {tag}", config={"interval_s": 0.1})
    for made in doomed + [spared]:
        svc.wait_steps(made["session_id"], 1, timeout=60)

    preview = bulk(svc, filter={"q": f"spared {tag}"}, action="interrupt", dry_run=True)  # no guidance yet
    assert preview.status_code == 200 and preview.json()["matched"] == 1, preview.text
    heard = bulk(svc, filter={"q": f"spared {tag}"}, action="interrupt", guidance="a word for the spared")
    assert heard.status_code == 202, heard.text
    assert [a["session_id"] for a in heard.json()["actions"]] == [spared["session_id"]]
    assert svc.action(heard.json()["actions"][0]["action_id"], timeout=60)["status"] == "done"
    wait_for(lambda: any("a word for the spared" in (s.get("text") or "") for s in svc.steps(spared["session_id"])),
             timeout=60, what="the guidance to reach the spared echo")

    r = bulk(svc, filter={"ids": [m["agent_id"] for m in doomed]}, action="destroy")
    assert r.status_code == 202, r.text
    assert {a["session_id"] for a in r.json()["actions"]} == {m["session_id"] for m in doomed}
    for a in r.json()["actions"]:
        assert svc.action(a["action_id"], timeout=60)["status"] == "done"
        assert svc.wait_status(a["session_id"], "stopped", timeout=60)["status_reason"] == "destroyed"
    assert svc.session(spared["session_id"])["status"] == "running"
    assert not actions_of(svc, spared["session_id"], "destroy")
    svc.control(spared["agent_id"], "destroy")


BAD = [
    {"filter": {"status": "asleep"}, "action": "pause"},
    {"filter": {"ids": ["x' OR '1'='1"]}, "action": "pause"},
    {"filter": {"ids": []}, "action": "pause"},
    {"filter": {"ids": ["a"] * 1001}, "action": "pause"},
    {"filter": {"moniker": "two words"}, "action": "pause"},
    {"filter": {"profile": "Bad Name"}, "action": "pause"},
    {"filter": {"model": "m\u0000"}, "action": "pause"},
    {"filter": {"q": ""}, "action": "pause"},
    {"filter": {"q": "x" * 201}, "action": "pause"},
    {"filter": {"owner": "w1"}, "action": "pause"},
    {"filter": {}, "action": "explode"},
    {"filter": {}, "action": "interrupt"},
    {"filter": {}, "action": "interrupt", "guidance": "   "},
    {"filter": {}, "action": "pause", "guidance": "why"},
    {"filter": {}, "action": "pause", "limit": 0},
    {"filter": {}, "action": "pause", "dry_run": "yes"},
    {"action": "pause"},
    {"filter": "all", "action": "pause"},
]


@pytest.mark.parametrize("body", BAD, ids=range(len(BAD)))
def test_bad_bulk_requests_are_400s_and_queue_nothing(shared_service, body):
    svc = shared_service
    newest = svc.get("/api/actions", limit=1).json()["actions"]
    r = bulk(svc, **body)
    assert r.status_code == 400, r.text
    assert set(r.json()["error"]) == {"code", "message"}
    assert svc.get("/api/actions", limit=1).json()["actions"] == newest


def test_more_than_1000_matches_is_a_400_unless_limit_asks_for_the_oldest(shared_service):
    """1,001 finished agents of one moniker, written straight into the store (running
    them would take minutes): a destroy reaching them all is refused, and with
    ``limit`` it queues the two oldest and says how many were left."""
    from datetime import datetime, timedelta, timezone
    from store import Store
    svc = shared_service
    moniker = f"seeded-{ULID()}"
    start = datetime.now(timezone.utc) - timedelta(hours=1)
    rows = [{"session_id": str(ULID()), "agent_id": str(ULID()), "moniker": moniker, "name": f"seeded {i}",
             "task": "", "config": {}, "status": "done", "status_reason": "done", "iteration": 0,
             "created_at": start + timedelta(milliseconds=i), "updated_at": start, "status_changed_at": start}
            for i in range(1001)]
    rows[5]["config"] = {"profile": {"name": "seeded-profile"}, "llm": {"model": "seeded-model"}}
    store = Store(svc.data_dir + "/lancedb")
    try:
        store.writer.submit_upsert("agent_state", "session_id", rows).result()
    finally:
        store.close()

    seen = bulk(svc, filter={"moniker": moniker}, action="destroy", dry_run=True).json()
    assert seen["matched"] == seen["applies"] == 1001 and seen["truncated"] and len(seen["sessions"]) == 1000
    assert bulk(svc, filter={"moniker": moniker}, action="pause", dry_run=True).json()["applies"] == 0  # all done
    by_profile = bulk(svc, filter={"moniker": moniker, "profile": "seeded-profile"}, action="destroy", dry_run=True)
    assert [s["session_id"] for s in by_profile.json()["sessions"]] == [rows[5]["session_id"]]
    both = {"moniker": moniker, "profile": "seeded-profile", "model": "seeded-model"}
    assert bulk(svc, filter=both, action="destroy", dry_run=True).json()["matched"] == 1
    assert bulk(svc, filter={**both, "model": "another"}, action="destroy", dry_run=True).json()["matched"] == 0
    refused = bulk(svc, filter={"moniker": moniker}, action="destroy")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "too_many"
    r = bulk(svc, filter={"moniker": moniker}, action="destroy", limit=2)
    assert r.status_code == 202, r.text
    answer = r.json()
    assert answer["matched"] == 1001 and answer["remaining"] == 999
    assert [a["session_id"] for a in answer["actions"]] == [rows[0]["session_id"], rows[1]["session_id"]]
    for a in answer["actions"]:
        assert svc.action(a["action_id"], timeout=60)["status"] == "done"  # already over: nothing to stop
