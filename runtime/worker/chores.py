"""The parts agents.py runs beside its service, declared as a list (as
Celery's bootsteps are): each :class:`Chore` names the parts it needs, how it
starts, what it runs in the background until the process stops, and how it
closes.  :class:`Chores` starts them in an order that gives every chore what it
needs (the list's own order where nothing is needed: observers are called in
the order they were added, so that order is kept), and closes them in the
reverse order.

A chore that is not wanted (a flag left off) starts as None: it is not
closed, and a chore that needs it gets None.  A need that names no chore and
no given part, or needs that go round in a circle, fail before anything starts.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

log = logging.getLogger("runtime.chores")


@dataclass(frozen=True)
class Chore:
    name: str
    start: Callable[[dict], Any]  # the part, from the parts started (and given) so far; None: not wanted
    needs: tuple[str, ...] = ()
    run: Callable[[Any, asyncio.Event], Awaitable] | None = None  # its background work, until ``stopping``
    close: Callable[[Any], Any] | None = None  # awaited when it returns an awaitable


def ordered(chores: list[Chore], given) -> list[Chore]:
    """``chores`` in an order where each comes after what it needs: the list's
    order, each chore moved after the last of its needs (a stable topological
    sort).  ValueError on an unknown need or a circle of needs."""
    names = [c.name for c in chores]
    if len(set(names)) != len(names):
        raise ValueError(f"two chores share a name: {names}")
    known = set(names) | set(given)
    for chore in chores:
        unknown = [n for n in chore.needs if n not in known]
        if unknown:
            raise ValueError(f"chore {chore.name!r} needs {unknown}, which nothing provides")
    done, out, waiting = set(given), [], list(chores)
    while waiting:
        ready = next((c for c in waiting if all(n in done for n in c.needs)), None)
        if ready is None:
            raise ValueError(f"the needs of {[c.name for c in waiting]} go round in a circle")
        waiting.remove(ready)
        out.append(ready)
        done.add(ready.name)
    return out


class Chores:
    def __init__(self, chores: list[Chore], parts: dict):
        self.order = ordered(chores, parts)
        self.parts = dict(parts)
        self.started: list[tuple[Chore, Any]] = []
        self.tasks: list[asyncio.Task] = []

    def start(self) -> dict:
        """Start every chore; returns the parts by name (given and started)."""
        for chore in self.order:
            part = chore.start(self.parts)
            self.parts[chore.name] = part
            if part is not None:
                self.started.append((chore, part))
        return self.parts

    def run(self, stopping: asyncio.Event) -> None:
        """Start the background work of every chore that has some."""
        self.tasks = [asyncio.create_task(chore.run(part, stopping), name=chore.name)
                      for chore, part in self.started if chore.run is not None]

    async def close(self) -> None:
        """Cancel the background work, then close every started chore, the last started first."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for chore, part in reversed(self.started):
            if chore.close is None:
                continue
            try:
                closing = chore.close(part)
                if inspect.isawaitable(closing):
                    await closing
            except Exception:
                log.exception("closing %s failed", chore.name)
