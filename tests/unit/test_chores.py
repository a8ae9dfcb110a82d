"""agents.py's chores (runtime/worker/chores.py): started in an order that
gives each what it needs, the list's order otherwise, closed in reverse; a
need nothing provides or a circle of needs fails before anything starts."""
import asyncio

import pytest

from agents import declared_chores, parse_args
from runtime.worker.chores import Chore, Chores, ordered


def names(chores):
    return [c.name for c in chores]


def test_the_order_is_the_lists_but_each_comes_after_what_it_needs():
    chores = [Chore("b", start=None, needs=("c",)), Chore("a", start=None), Chore("c", start=None, needs=("given",))]
    assert names(ordered(chores, {"given": 1})) == ["a", "c", "b"]
    assert names(ordered([Chore("x", start=None), Chore("y", start=None)], {})) == ["x", "y"]


def test_an_unknown_need_or_a_circle_fails_before_anything_starts():
    with pytest.raises(ValueError, match="nothing provides"):
        ordered([Chore("a", start=None, needs=("nowhere",))], {})
    with pytest.raises(ValueError, match="circle"):
        ordered([Chore("a", start=None, needs=("b",)), Chore("b", start=None, needs=("a",))], {})


def test_parts_start_in_order_run_and_close_in_reverse_and_an_unwanted_one_is_skipped():
    events = []

    async def work(part, stopping):
        events.append(("run", part))
        await stopping.wait()

    async def close(part):
        events.append(("close", part))

    chores = Chores([Chore("late", start=lambda p: p["early"] + "+late", needs=("early",), close=close),
                     Chore("early", start=lambda p: p["seed"] + ":early", run=work, close=close),
                     Chore("off", start=lambda p: None, close=close)], {"seed": "s"})

    async def scenario():
        parts = chores.start()
        assert parts["late"] == "s:early+late" and parts["off"] is None
        chores.run(asyncio.Event())
        await asyncio.sleep(0)
        await chores.close()

    asyncio.run(scenario())
    assert events == [("run", "s:early"), ("close", "s:early+late"), ("close", "s:early")]


def test_agents_py_declares_chores_whose_needs_are_met_and_keeps_the_relay_before_the_questions():
    given = {"store", "tools", "worker_id", "limiter", "embedder"}
    order = names(ordered(declared_chores(parse_args([]), monikers=None, maintainer=None), given))
    assert order.index("relay") < order.index("questions")
    assert order.index("service") < order.index("archive-observer") < order.index("turns") < order.index("metrics")
