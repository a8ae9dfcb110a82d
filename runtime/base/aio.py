"""Event-loop plumbing: periodic chores, and a loop whose shutdown always finishes.

``every`` runs a chore (heartbeat, maintenance, health checks) until the
service stops; a failing round is logged and the next one still runs.

``asyncio.run`` waits, at the end, for every task it cancelled; a moniker that
swallows cancellation would then hang the process forever.  ``run_bounded``
gives leftover tasks ``grace_s`` to end and then abandons them (with a log
line naming them), so Ctrl-C and SIGTERM always stop agents.py.
"""
import asyncio
import logging

log = logging.getLogger("runtime.aio")


async def every(stopping: asyncio.Event, seconds: float, chore, what: str) -> None:
    """``await chore()`` every ``seconds`` until ``stopping`` is set."""
    while not stopping.is_set():
        try:
            await chore()
        except Exception:
            log.exception("%s failed; trying again in %.1fs", what, seconds)
        try:
            await asyncio.wait_for(stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass


class Backoff:
    """The wait of a chore that looks for work where each look is billed (object
    storage): ``base_s`` after a look that found some, doubled after each look
    that found none, up to ``most_s``; back to ``base_s`` at the first find."""

    def __init__(self, base_s: float, most_s: float):
        self.base_s, self.most_s = base_s, max(most_s, base_s)
        self.wait_s = base_s

    def after(self, found: bool) -> float:
        """The wait before the next look, after one that ``found`` work or not."""
        self.wait_s = self.base_s if found else min(self.wait_s * 2, self.most_s)
        return self.wait_s


async def every_backoff(stopping: asyncio.Event, backoff: Backoff, chore, what: str) -> None:
    """``found = await chore()`` until ``stopping`` is set, waiting ``backoff.after(found)``
    between rounds (a failed round counts as a find: it is tried again soon)."""
    while not stopping.is_set():
        try:
            found = await chore()
        except Exception:
            log.exception("%s failed; trying again in %.1fs", what, backoff.base_s)
            found = True
        try:
            await asyncio.wait_for(stopping.wait(), timeout=backoff.after(bool(found)))
        except TimeoutError:
            pass


class BackgroundWork:
    """Work the runner does not wait for (summaries, turn ends), at most
    ``concurrency`` at a time; a failure is logged as ``what`` and never
    reaches the caller.  ``run`` awaits one piece in the same slots."""

    def __init__(self, what: str, concurrency: int = 2):
        self.what = what
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, work, name: str) -> None:
        task = asyncio.create_task(self.run(work), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run(self, work) -> None:
        try:
            async with self._slots:
                await work
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed", self.what)

    async def close(self, grace_s: float = 0.0) -> None:
        """Give the work in flight ``grace_s`` to end, then cancel what is left."""
        if self._tasks and grace_s > 0:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def run_bounded(main, grace_s: float = 5.0):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_leftovers(loop, grace_s)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop, grace_s: float) -> None:
    leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not leftovers:
        return
    for task in leftovers:
        task.cancel()
    done, stubborn = loop.run_until_complete(asyncio.wait(leftovers, timeout=grace_s))
    if stubborn:
        log.error("abandoning %d tasks that ignored cancellation: %s", len(stubborn),
                  ", ".join(sorted(t.get_name() for t in stubborn)))
        for task in stubborn:  # keep the loop from logging them as destroyed-while-pending
            task._log_destroy_pending = False
