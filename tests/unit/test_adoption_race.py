"""The adoption round does not start a second runner for a session this
worker's own create registered while the round was reading the store
(runtime/worker/service.py ``_runs_already``).

Found in the suite: a replay created just as an adoption round read the store
was run by the create's runner and by the adoption's (two "finished" lines,
its recorded tool calls served twice, 6 step rows for 3), and the diff of it
against its recording showed a divergence that was not there."""
import pytest

from store import Store
from tests.harness import run_in_process, until


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def test_a_session_registered_while_the_adoption_reads_is_not_started_again(store):
    store.actions.enqueue("create", agent_id="a", session_id="s",
                          payload={"moniker": "echo", "config": {"interval_s": 0.05}})

    async def scenario(service):
        await until(lambda: store.steps.count("s") >= 1, timeout=120, what="a first step")
        running = service.sessions.get("s")
        snapshot = store.states.get("s")
        # The round read the session before its create registered it ...
        service.sessions.remove("s")
        settle = service.factory.tools.settle_after_restart

        async def registered_meanwhile(agent, newer_steps):
            await settle(agent, newer_steps)
            service.sessions.add(running)  # ... and the create registers it during the round's awaits
        service.factory.tools.settle_after_restart = registered_meanwhile
        started = await service._resume_one(snapshot, [])
        return started, service.sessions.get("s") is running, len(service.sessions.running())

    started, same, runners = run_in_process(store, scenario, watch_s=0.01)
    assert (started, same, runners) == (False, True, 1)
