"""The one extension point around a session's step and its tool phase: a
chain of interceptors, as Temporal's SDK chains its own.  Each link does its
part and hands on to the next; the innermost link is the built-in path
(:class:`BuiltIn`), so the step loop (runtime/session/agent.py) and the tool
phase (runtime/session/tool_runner.py) call the chain and never ask whether a
session is a replay or has a profile.

The points, in the order a step meets them:

- ``before_step(agent)``: True when no step may run now (look again): a
  replay stopping at a divergence or queuing its recording's input first,
  then a profile's ``before_step`` observers (profiles/hooks.py).
- ``calls_loaded(agent, iteration, rows, changed, stored)``: a step's tool
  calls, planned or recovered, before any is written or run: a replay serves
  each its recorded outcome (runtime/session/replay.py).
- ``finished(agent)``: the step ended the session, before its end is saved: a
  replay whose recording ran on from here is woken instead of ending.
- ``woken(agent)``: the loop ended; True to run again: a replay woken as its
  recording was, else children's results that came in as it finished.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.session import child_sessions

if TYPE_CHECKING:
    from runtime.session.replay import Replayer
    from runtime.session.view import AgentView


class Interceptor:
    def __init__(self, next_: Interceptor | None):
        self.next = next_

    async def before_step(self, agent: AgentView) -> bool:
        return await self.next.before_step(agent)

    async def calls_loaded(self, agent: AgentView, iteration: int, rows: list[dict], changed: list[dict],
                           stored: set[str]) -> tuple[list[dict], list[dict]]:
        return await self.next.calls_loaded(agent, iteration, rows, changed, stored)

    async def finished(self, agent: AgentView) -> None:
        await self.next.finished(agent)

    async def woken(self, agent: AgentView) -> bool:
        return await self.next.woken(agent)


class BuiltIn(Interceptor):
    """The innermost link: what every session does."""

    def __init__(self):
        super().__init__(None)

    async def before_step(self, agent: AgentView) -> bool:
        return False

    async def calls_loaded(self, agent, iteration, rows, changed, stored):
        return rows, changed

    async def finished(self, agent: AgentView) -> None:
        return None

    async def woken(self, agent: AgentView) -> bool:
        return await child_sessions.wake_for_children(agent)


class ProfileHooks(Interceptor):
    """A profile's ``before_step`` observers and flow rules (``agent.hooks``, profiles/hooks.py)."""

    async def before_step(self, agent: AgentView) -> bool:
        return await agent.hooks.before_step(agent) or await self.next.before_step(agent)


class Replay(Interceptor):
    """A replay of a recorded session (runtime/session/replay.py ``Replayer``)."""

    def __init__(self, next_: Interceptor, replayer: Replayer):
        super().__init__(next_)
        self.replayer = replayer

    async def before_step(self, agent: AgentView) -> bool:
        # the recording's input is queued before the profile's hooks look
        return await self.replayer.before_step(agent) or await self.next.before_step(agent)

    async def calls_loaded(self, agent, iteration, rows, changed, stored):
        unwritten = [r for r in changed if r["id"] not in stored]
        rows = await self.replayer.serve_calls(agent, iteration, rows, unwritten)
        changed_ids = {r["id"] for r in changed}
        return await self.next.calls_loaded(agent, iteration, rows, [r for r in rows if r["id"] in changed_ids],
                                            stored)

    async def finished(self, agent: AgentView) -> None:
        # Woken instead of ending when its recording ran on: saving its end first and
        # waking it after lost the wake to a kill in between (a finished session is
        # not adopted again).
        await self.replayer.wake(agent)
        await self.next.finished(agent)

    async def woken(self, agent: AgentView) -> bool:
        return await self.replayer.wake(agent) or await self.next.woken(agent)


def chain(replayer: Replayer | None) -> Interceptor:
    """The chain of a session: its replay outermost (when it is one), then its
    profile's hooks, then the built-in path."""
    link: Interceptor = ProfileHooks(BuiltIn())
    if replayer is not None:
        link = Replay(link, replayer)
    return link
