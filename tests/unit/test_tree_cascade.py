"""A tree's control reaches each child exactly once, also when the parent's
action is applied again after a crash (runtime/session/session_tree.py
``cascade`` with its ``cause``; store/actions.py ``cascaded``)."""
import asyncio

from runtime.session import session_tree
from store import Store


class FakePersist:
    """The three calls cascade makes, over a list of children and of queued actions."""

    def __init__(self, children):
        self._children = children
        self.queued = []

    async def children(self, session_id):
        return self._children

    async def cascaded(self, cause, type_, session_ids):
        return {a["session_id"] for a in self.queued
                if a["type"] == type_ and a["payload"].get("cascaded_from") == cause and a["session_id"] in session_ids}

    async def enqueue(self, type_, *, agent_id, session_id, payload):
        self.queued.append({"type": type_, "agent_id": agent_id, "session_id": session_id, "payload": payload})


def child(n, status="running", **config):
    return {"agent_id": f"A{n}", "session_id": f"S{n}", "status": status, "config": config}


def test_a_cascade_applied_again_sends_each_child_its_control_once():
    persist = FakePersist([child(1), child(2), child(3, "done"), child(4, "paused")])
    run = lambda: asyncio.run(session_tree.cascade(persist, "P", "pause", {"tree": True}, cause="ACT1"))  # noqa: E731
    assert run() == 2  # the finished and the paused child are passed over
    assert run() == 0  # applied again (a crash before it was marked done): nothing twice
    assert [(a["session_id"], a["payload"]) for a in persist.queued] == [
        ("S1", {"tree": True, "cascaded_from": "ACT1"}), ("S2", {"tree": True, "cascaded_from": "ACT1"})]
    # a crash in the middle of a cascade: the child it had not reached yet gets it on the second run
    persist.queued.pop()
    assert run() == 1 and sorted(a["session_id"] for a in persist.queued) == ["S1", "S2"]
    # another action of the same kind is another cause: it reaches them again
    assert asyncio.run(session_tree.cascade(persist, "P", "pause", {"tree": True}, cause="ACT2")) == 2


def test_a_cascade_with_no_cause_is_sent_every_time():
    persist = FakePersist([child(1)])
    for _ in range(2):
        asyncio.run(session_tree.cascade(persist, "P", "interrupt", {"guidance": "g", "tree": True}))
    assert len(persist.queued) == 2


def test_the_store_finds_the_children_a_cause_reached(tmp_path):
    store = Store(str(tmp_path / "db"))
    store.actions.enqueue("pause", agent_id="A1", session_id="S1", payload={"tree": True, "cascaded_from": "ACT1"})
    store.actions.enqueue("pause", agent_id="A2", session_id="S2", payload={"tree": True, "cascaded_from": "ACT9"})
    store.actions.enqueue("resume", agent_id="A3", session_id="S3", payload={"tree": True, "cascaded_from": "ACT1"})
    store.actions.enqueue("pause", agent_id="A4", session_id="S4", payload={"tree": True})
    assert store.actions.cascaded("ACT1", "pause", ["S1", "S2", "S3", "S4"]) == {"S1"}
    assert store.actions.cascaded("ACT1", "pause", []) == set()
