"""The cooperative control surface of an agent: pause, interrupt and stop.

Each mixin owns one concern and chains ``super().__init__()`` so they compose in
any order on top of :class:`AgentBase`.  Control is cooperative: the runner
checks these flags at step boundaries; nothing here cancels a running step.
Every request also sets the agent's wake-up event, so a runner sleeping between
steps reacts at once instead of after its interval.
"""
import asyncio


class AgentBase:
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    def inputs_taken(self) -> None:
        """A step is reading its inputs now: only what arrives after this may cut
        the sleep that follows the step short.  (Clearing at the start of the
        sleep instead lost a wake-up: an inbox item that came in while the step
        ran waited a whole ``interval_s``.)"""
        self._wake.clear()

    async def sleep(self, seconds: float) -> None:
        """Sleep between steps, returning early when a control request or an
        inbox item has arrived since the last step read its inputs."""
        if seconds <= 0:
            return
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        except TimeoutError:
            pass


class StopMixin:
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._stop = asyncio.Event()
        self._for_restart = False

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def stopping_for_restart(self) -> bool:
        """The stop asked is only the worker shutting down: the session lives on
        at the restart, so what its end decides (a replay's wake) still holds."""
        return self._stop.is_set() and self._for_restart

    def request_stop(self, for_restart: bool = False) -> None:
        """Stop at the next step boundary: for good (a destroy, an expiry), or
        ``for_restart`` (the worker shuts down).  A stop for good wins."""
        self._for_restart = for_restart and (self._for_restart or not self._stop.is_set())
        self._stop.set()
        self.wake()

    async def stopped(self) -> None:
        """Returns once a stop has been requested."""
        await self._stop.wait()


class PauseMixin:
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._unpaused = asyncio.Event()
        self._unpaused.set()

    @property
    def pause_requested(self) -> bool:
        return not self._unpaused.is_set()

    def request_pause(self) -> None:
        self._unpaused.clear()
        self.wake()

    def request_resume(self) -> None:
        self._unpaused.set()
        self.wake()

    async def wait_while_paused(self) -> None:
        await self._unpaused.wait()


class InterruptMixin:
    """Guidance queued for the next step.

    Items stay queued until the step that used them is persisted, so a crash in
    between never loses guidance; each item carries the id of the action that
    brought it, which makes delivering the same action twice harmless.

    ``used_guidance`` remembers the ids of the items steps have used, and of
    the controls (pause, resume) that changed the session (:meth:`note_applied`,
    saved with the change they made): an action applied again after a crash
    finds its id here and knows it took effect (:func:`holds`).
    """

    USED_KEPT = 500  # ids of used guidance and applied controls remembered, to recognise a redelivery

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.pending_guidance: list[dict] = []
        self.used_guidance: list[str] = []

    def add_inbox_item(self, action_id: str, kind: str, text: str | None, *, data=None,
                       source: dict | None = None) -> bool:
        """Queue an inbox item of ``kind`` (runtime/base/inbox.py) for the next step.
        The same action delivered again (after a crash) is refused, whether its
        item is still queued or a step has already used it; False then."""
        if self.holds(action_id):
            return False
        item = {"action_id": action_id, "text": text}
        if kind != "guidance":
            item["kind"] = kind
        if data is not None:
            item["data"] = data
        if source:
            item["source"] = source
        self.pending_guidance.append(item)
        self.wake()
        return True

    def holds(self, action_id: str) -> bool:
        """Whether the action's item is queued or used, or the control was applied."""
        return seen(self.used_guidance, self.pending_guidance, action_id)

    def note_applied(self, action_id: str) -> None:
        """Remember that a control action changed this session (saved with the change)."""
        if action_id not in self.used_guidance:
            self.used_guidance = (self.used_guidance + [action_id])[-self.USED_KEPT:]

    def peek_guidance(self) -> list[dict]:
        return list(self.pending_guidance)

    def consume_guidance(self, used: list[dict]) -> None:
        used_ids = {g["action_id"] for g in used}
        self.pending_guidance = [g for g in self.pending_guidance if g["action_id"] not in used_ids]
        self.used_guidance = (self.used_guidance + [g["action_id"] for g in used])[-self.USED_KEPT:]


def seen(used: list[str], pending: list[dict], action_id: str) -> bool:
    """The inbox's "already seen" check, the one place it is written: an action
    whose item is queued (``pending``) or was used by a step, or whose control
    was applied (``used``), must not be delivered again."""
    return action_id in used or any(isinstance(g, dict) and g.get("action_id") == action_id for g in pending)


def holds(snapshot: dict, action_id: str) -> bool:
    """:meth:`InterruptMixin.holds` for a session's snapshot (one not running here)."""
    return seen(snapshot.get("used_guidance") or [], snapshot.get("pending_guidance") or [], action_id)
