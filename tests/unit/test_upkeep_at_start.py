"""Storage upkeep starts with the worker, beside the adoption
(runtime/worker/service.py), not after it.

Found by the kill loop (tests/kill_loop.py): with agents.py killed a few
seconds after each start, upkeep (which began only once adoption was over)
never ran; fragments piled up (agent_steps past 2,000), every read slowed,
and each start took longer than the last, from 0.8 s to polling at the first
restart to 46 s at the tenth, so upkeep was reached less and less."""
import asyncio
import threading

import pytest

from runtime.worker.service import AgentService
from monikers import default_registry
from runtime.base.aio import run_bounded
from store import Store


class Upkeep:
    """A maintainer that only notes that a round ran."""

    def __init__(self):
        self.ran = threading.Event()

    def run_due(self):
        self.ran.set()
        return []

    def health(self):
        return {}


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def test_upkeep_runs_while_the_adoption_is_still_reading(store):
    upkeep = Upkeep()
    seen = {}

    async def main():
        service = AgentService(store, default_registry(), maintainer=upkeep, maintain_every_s=0.05)
        reading = service.persist.resumable_snapshots

        async def slow_adoption(*args, **kwargs):  # a fragmented store: the adoption's reads take long
            seen["upkeep before adoption read"] = await asyncio.to_thread(upkeep.ran.wait, 10)
            return await reading(*args, **kwargs)

        service.persist.resumable_snapshots = slow_adoption
        stopping = asyncio.Event()
        task = asyncio.create_task(service.run(stopping))
        while "upkeep before adoption read" not in seen and not task.done():
            await asyncio.sleep(0.01)
        stopping.set()
        await task

    run_bounded(main(), grace_s=1.0)
    assert seen == {"upkeep before adoption read": True}
