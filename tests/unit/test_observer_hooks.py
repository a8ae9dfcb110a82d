"""Observer hooks are declared once (runtime/base/fanout.py ``Observer``): a
misspelt hook fails when the observer is added or the hook is notified,
instead of never being called."""
import asyncio

import pytest

from runtime.base.fanout import HOOKS, Observer, Observers


class Heard:
    def __init__(self):
        self.steps = []

    async def step_persisted(self, snapshot, step):
        self.steps.append(step["iteration"])

    async def close(self):  # not a hook, nor near one: fine
        pass


def test_a_hook_is_called_and_the_hooks_are_the_protocols():
    heard = Heard()
    observers = Observers(heard)
    asyncio.run(observers.notify("step_persisted", {}, {"iteration": 3}))
    assert heard.steps == [3]
    assert "step_persisted" in HOOKS and "step_delta" in HOOKS and set(HOOKS) <= set(vars(Observer))


def test_an_observer_with_a_misspelt_hook_is_refused():
    class Misspelt(Heard):
        async def snapshot_saveed(self, snapshot):
            pass

    with pytest.raises(TypeError, match="snapshot_saveed is not an observer hook; did you mean snapshot_saved"):
        Observers().add(Misspelt())


def test_an_observer_with_no_hook_is_refused():
    class Nothing:
        async def on_step(self, snapshot, step):
            pass

    with pytest.raises(TypeError, match="none of the observer hooks"):
        Observers().add(Nothing())


def test_notifying_a_hook_that_is_not_declared_fails():
    observers = Observers(Heard())
    with pytest.raises(ValueError, match="step_persistd"):
        asyncio.run(observers.notify("step_persistd", {}, {}))
    with pytest.raises(ValueError, match="live-only"):
        observers.notify_now("step_persisted", {})
