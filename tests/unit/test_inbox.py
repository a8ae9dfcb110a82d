"""The inbox's order: by priority per kind, stable in arrival order within one."""
from runtime.base import inbox


def test_items_come_by_kind_priority_and_keep_arrival_order_within_a_kind():
    arrived = [{"action_id": "1", "text": "user one"},
               {"action_id": "2", "kind": "child_result", "text": "child a"},
               {"action_id": "3", "kind": "observer_note", "text": "note"},
               {"action_id": "4", "kind": "interrupted_step", "text": "died"},
               {"action_id": "5", "kind": "child_result", "text": "child b"},
               {"action_id": "6", "kind": "message", "text": "user two"}]
    assert [i["action_id"] for i in inbox.ordered(arrived)] == ["2", "5", "3", "4", "1", "6"]
    assert inbox.guidance_text(inbox.ordered(arrived)) == "user one\nuser two"


def test_a_profile_may_reorder_kinds_and_unknown_kinds_sort_with_users():
    arrived = [{"action_id": "1", "kind": "child_result"}, {"action_id": "2", "kind": "novel"},
               {"action_id": "3", "kind": "guidance"}]
    assert [i["action_id"] for i in inbox.ordered(arrived, {"guidance": 0})] == ["3", "1", "2"]


def test_a_frame_item_drops_the_queue_bookkeeping():
    item = {"action_id": "a1", "kind": "child_result", "text": "blue", "data": {"session_id": "s"}, "source": {"x": 1}}
    assert inbox.frame_item(item) == {"kind": "child_result", "text": "blue", "data": {"session_id": "s"},
                                      "source": {"x": 1}}
    assert inbox.frame_item({"action_id": "a2", "text": "hi"}) == {"kind": "guidance", "text": "hi"}
