"""Limits, budgets, retries and the health monitor, in one process."""
import asyncio
from datetime import datetime, timezone

import pytest

from monikers import FrameOut, Moniker, default_registry
from store import Store
from tests.harness import finished, run_in_process, until


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "db"))


async def spend_step(frame, ctx):
    """Reports 100 tokens (60 in, 40 out) per step, like an LLM call would."""
    ctx.record_usage(model="m", input_tokens=60, output_tokens=40, duration_ms=1, cost=0.01)
    n = int(frame.state.get("n", 0)) + 1
    return FrameOut(step=frame.step, next_step=str(n), state={"n": n}, text=f"step {n}")


async def same_step(frame, ctx):
    return FrameOut(step=frame.step, next_step=frame.step, text="all work and no play")


async def stubborn_step(frame, ctx):
    """Ignores cancellation: the runner's timeout cannot end it."""
    while True:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            continue


def registry():
    reg = default_registry()
    for moniker in (Moniker("spend", spend_step), Moniker("same", same_step), Moniker("stubborn", stubborn_step)):
        reg.register(moniker)
    return reg


def run(store, scenario, **options):
    return run_in_process(store, scenario, monikers=registry(), watch_s=0.01, **options)


def create(store, session_id, moniker, **config):
    return store.actions.enqueue("create", agent_id="a", session_id=session_id,
                                 payload={"moniker": moniker, "config": {"interval_s": 0, **config}})


def status(store, session_id):
    snap = store.states.get(session_id)
    return snap and (snap["status"], snap["status_reason"])


def test_token_budget_pauses_before_it_is_crossed_and_resume_can_raise_it(store):
    create(store, "b", "spend", budget_tokens=350)

    async def scenario(service):
        await until(lambda: status(store, "b") == ("paused", "budget"), what="budget pause")
        assert store.steps.count("b") == 3  # 300 used; a 4th step (~100) would pass 350
        snap = store.states.get("b")
        assert snap["usage"]["input_tokens"] + snap["usage"]["output_tokens"] == 300
        assert "budget" in snap["last_error"]
        same = store.actions.enqueue("resume", agent_id="a", session_id="b")
        await until(lambda: finished(store, same["id"]), what="resume")
        await until(lambda: status(store, "b") == ("paused", "budget"), what="paused again")
        assert store.steps.count("b") == 3  # without a higher budget it stays put
        raised = store.actions.enqueue("resume", agent_id="a", session_id="b", payload={"budget_tokens": 650})
        await until(lambda: finished(store, raised["id"]), what="resume with budget")
        await until(lambda: store.steps.count("b") == 6 and status(store, "b") == ("paused", "budget"),
                    what="three more steps, then pause")
        assert store.states.get("b")["config"]["budget_tokens"] == 650  # the snapshot holds the raised budget

    run(store, scenario)


def test_cost_budget_pauses_too(store):
    create(store, "c", "spend", budget_cost=0.025)
    run(store, lambda service: until(lambda: status(store, "c") == ("paused", "budget"), what="cost pause"))
    assert store.steps.count("c") == 2


def test_the_same_output_n_times_in_a_row_stops_the_session(store):
    create(store, "r", "same", repeat_limit=3)
    run(store, lambda service: until(lambda: status(store, "r") == ("stopped", "repetition"), what="stop"))
    assert store.steps.count("r") == 3
    assert "3 times" in store.states.get("r")["last_error"]


def test_transient_errors_are_retried_with_backoff_then_succeed(store):
    fast = {"transient": 3, "base_delay_s": 0.01, "max_delay_s": 0.05}
    create(store, "t", "chaos", mode="transient", fail_at=2, failures=2, retries=fast, max_steps=3)
    create(store, "t2", "chaos", mode="transient", fail_at=1, failures=5, retries=fast)
    create(store, "e", "chaos", mode="raise", fail_at=1, retries=fast)

    async def scenario(service):
        for sid in ("t", "t2", "e"):
            await until(lambda: status(store, sid) and status(store, sid)[0] in ("done", "error"), what=sid)

    run(store, scenario)
    steps = store.steps.search(session_id="t")
    assert [s["status"] for s in steps] == ["ok", "ok", "ok"] and status(store, "t") == ("done", "max_steps")
    assert steps[1]["attempts"] == 3 and "retried 2x" in steps[1]["notes"]
    gave_up = store.steps.search(session_id="t2")[-1]
    assert gave_up["status"] == "error" and gave_up["attempts"] == 4  # 1 + 3 retries
    assert status(store, "t2") == ("error", "step_failed:transient")
    assert store.steps.search(session_id="e")[-1]["attempts"] == 1  # plain errors are not retried
    assert status(store, "e") == ("error", "step_failed:error")


def test_timeouts_have_their_own_retry_count(store):
    create(store, "h", "chaos", mode="hang", fail_at=1, step_timeout_s=0.2,
           retries={"timeout": 1, "base_delay_s": 0.01})
    run(store, lambda service: until(lambda: status(store, "h") == ("error", "step_failed:timeout"), what="h"))
    step = store.steps.search(session_id="h")[-1]
    assert step["attempts"] == 2 and "timed out" in step["error"]


def test_a_moniker_that_ignores_cancellation_ends_as_a_timeout_and_shutdown_still_finishes(store):
    create(store, "stubborn", "stubborn", step_timeout_s=0.3)
    run(store, lambda service: until(lambda: status(store, "stubborn") == ("error", "step_failed:timeout"),
                                     what="timeout"))
    assert "timed out" in store.steps.search(session_id="stubborn")[-1]["error"]


def test_monitor_fails_a_session_stuck_in_a_step_past_its_timeout():
    """Defense in depth: a runner that hangs outside the moniker's timeout (say,
    on storage that never answers) is cancelled and its session failed."""
    from datetime import timedelta

    from domain.session_config import SessionConfig
    from runtime.worker.monitor import HealthMonitor

    saved = []

    class Agent:
        session_id, agent_id, status, finished = "s", "a", "running", False
        config = SessionConfig(step_timeout_s=1)
        step_started_at = datetime.now(timezone.utc) - timedelta(seconds=60)

        async def set_status(self, status, reason):
            saved.append((status, reason, self.last_error))

    class Sessions:
        sessions = {"s": Agent()}

    class Persist:
        async def finished_sessions_before(self, when):
            return []

    async def main():
        agent = Sessions.sessions["s"]
        agent.runner = asyncio.create_task(asyncio.sleep(3600))
        await HealthMonitor(Sessions(), Persist(), stuck_grace_s=5).check()
        await asyncio.sleep(0)
        return agent.runner.cancelled()

    assert asyncio.run(main())
    assert saved[0][:2] == ("error", "stuck") and "60s" in saved[0][2]


def test_monitor_stops_long_pauses_and_removes_old_finished_sessions(store):
    create(store, "p", "joke", interval_s=0.05, pause_expiry_s=0.5)
    create(store, "old", "countdown", n=1)

    async def scenario(service):
        await until(lambda: store.steps.count("p") >= 1, what="a step")
        store.actions.enqueue("pause", agent_id="a", session_id="p")
        await until(lambda: status(store, "p") == ("paused", "user"), what="paused")
        await until(lambda: status(store, "p") == ("stopped", "pause_expired"), what="expired", timeout=10)
        await until(lambda: store.states.get("old") is None, what="retention", timeout=10)

    run(store, scenario, monitor_options={"every_s": 0.1, "retention_s": 1.0})
    assert store.steps.count("old") == 0
    assert store.states.get("p") is not None  # stopped just now: kept until its retention passes


def test_an_action_tried_too_often_is_parked_as_failed(store):
    tried = "".join(f"started alone by w{n} at 2026-11-27T10:00:0{n}.000000000\n" for n in range(5))
    poison = {"id": "poison1", "created_at": datetime.now(timezone.utc), "type": "pause", "agent_id": "a",
              "session_id": "nowhere", "priority": 0, "payload": "{}", "status": "pending", "processed": False,
              "attempts": 5, "error": tried}
    store.writer.append("actions", [poison])
    run(store, lambda service: until(lambda: finished(store, "poison1"), what="parked"), max_attempts=5)
    action = store.actions.get("poison1")
    assert action["status"] == "failed" and "parked after 5 attempts" in action["error"]
