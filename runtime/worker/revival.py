"""Sessions whose runner crashed start again from their record.

A runner crashes when the store fails under it: the object store was killed or
unreachable for a moment, a disk filled.  Such a failure is the store's, not the
session's, so the session is not ended in ``error`` at once (it was: a blip of
the S3 server put every stepping session in error, and those whose error could
not even be saved were left ``running`` in the record with no runner here and
their controls queued for good, since this live worker owns them).

Instead the worker treats it as a crash of that one session: it drops the
session object (saving nothing more, as when another worker adopts it:
runtime/base/fence.py) and the next adoption round takes it back from its
record, as after a restart of the whole worker (runtime/worker/service.py).
While the store is down the round fails and is tried again, so the session
resumes once the store answers.  A session that crashes again and again is
not a store's blip: after ``MAX_REVIVALS`` within ``WINDOW_S`` its error is
recorded, as before.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.base.fence import Fence
    from runtime.session.live_sessions import SessionRegistry

log = logging.getLogger("runtime.revival")

MAX_REVIVALS = 3
WINDOW_S = 600.0


class Revivals:
    def __init__(self, sessions: SessionRegistry, fence: Fence, clock=time.monotonic):
        self.sessions, self.fence, self.clock = sessions, fence, clock
        self.recent: dict[str, list[float]] = {}  # session_id -> when it was revived, within the window

    async def revive_crashed(self) -> int:
        """Drop every session whose runner crashed, for the adoption round to take
        back; record the error of one that crashed too often.  How many were dropped."""
        dropped = 0
        for agent in self.sessions.crashed():
            session_id, now = agent.session_id, self.clock()
            times = [t for t in self.recent.get(session_id, []) if now - t < WINDOW_S]
            if len(times) >= MAX_REVIVALS:
                if await agent.record_crash():
                    self.recent.pop(session_id, None)
                continue  # not recorded (the store again): tried next round
            self.recent[session_id] = times + [now]
            self.fence.lose(session_id, f"its runner crashed ({agent.last_error}); it starts again from its "
                                        f"record (revival {len(times) + 1} of {MAX_REVIVALS} in {WINDOW_S:.0f} s)")
            dropped += 1
        return dropped
