"""runtime/base/stepcall.py's wait on a moniker's step: the fast path of a step that
never waits, the timeout, the heartbeats, and cancellation from outside."""
import asyncio

import pytest

from runtime.base.stepcall import _with_heartbeats


async def _no_beat(started: float) -> None:
    raise AssertionError("no heartbeat expected")


async def _hangs(cancelled: list) -> None:
    """A step that never ends by itself; notes its cancellation."""
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        cancelled.append(True)
        raise


def test_a_step_that_never_waits_returns_without_a_timer():
    async def scenario():
        loop = asyncio.get_running_loop()
        timers = []
        call_at = loop.call_at
        loop.call_at = lambda *a, **k: timers.append(a) or call_at(*a, **k)

        async def immediate():
            return {"step": "x"}
        result = await _with_heartbeats(immediate(), timeout_s=5, heartbeat_s=1, on_long_step=_no_beat)
        return result, timers
    result, timers = asyncio.run(scenario())
    assert result == {"step": "x"} and timers == []


def test_a_step_past_its_timeout_is_cancelled_and_raises_timeout():
    cancelled = []

    async def scenario():
        await _with_heartbeats(_hangs(cancelled), timeout_s=0.2, heartbeat_s=10, on_long_step=_no_beat)
    with pytest.raises(TimeoutError):
        asyncio.run(scenario())
    assert cancelled == [True]


def test_heartbeats_fire_while_a_step_runs_and_its_result_comes_back():
    beats = []

    async def scenario():
        async def slow():
            await asyncio.sleep(0.35)
            return "late"

        async def beat(started: float) -> None:
            beats.append(started)
        return await _with_heartbeats(slow(), timeout_s=10, heartbeat_s=0.1, on_long_step=beat)
    assert asyncio.run(scenario()) == "late"
    assert len(beats) >= 2 and len(set(beats)) == 1  # every beat names the step's start


@pytest.mark.parametrize("cancel_after_yields", [1, 2, 4])
def test_cancelling_the_waiter_cancels_the_step_even_during_the_first_yield(cancel_after_yields):
    cancelled = []

    async def scenario():
        waiter = asyncio.ensure_future(_with_heartbeats(_hangs(cancelled), timeout_s=30, heartbeat_s=10,
                                                        on_long_step=_no_beat))
        for _ in range(cancel_after_yields):
            await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await asyncio.sleep(0)
        assert cancelled == [True]  # here, not after asyncio.run, which cancels every task left over
    asyncio.run(scenario())
