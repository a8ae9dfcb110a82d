"""One agent session: the StepFrame runner loop and its persisted snapshot.

Each iteration: build frame_in {step, state, guidance?} -> call the moniker
(with timeout, heartbeats and retries, see :mod:`runtime.base.stepcall`) -> append
the step row -> save the snapshot -> continue with next_step and iteration + 1,
until done, a limit, a budget, stop, or an error.

Order of writes matters for crash safety: the step row is durable *before* the
next step starts, and the snapshot is saved behind the steps, without the
step waiting for it (:meth:`SessionAgent.save_behind`).  A crash leaves steps
newer than the snapshot, which :meth:`SessionAgent.reconcile` folds in on
restart, so an iteration is never run twice nor skipped.  A change that is
not a step (a status, a pause, guidance) is saved and waited for.  A tool
call's ended row commits beside the step after it, which records the same
result, and lands before any snapshot (:meth:`SessionAgent.tool_rows_landed`).
A step that ran long enough to be
marked in flight (``step_started_at``) and whose worker then died is recorded
as ``interrupted`` by :meth:`SessionAgent.reconcile`, and the next step is told.
"""
import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from ulid import ULID

from monikers.frame import FrameIn, Moniker, StepContext
from runtime.base import inbox as inbox_order
from runtime.base import limits, live_output
from runtime.base import usage as usage_math
from runtime.session import child_sessions, intercept, session_tree
from runtime.base.agent_core import AgentBase, InterruptMixin, PauseMixin, StopMixin
from domain.session_config import SessionConfig
from domain.statuses import SESSION_FINISHED
from runtime.base.fence import SessionLost
from runtime.base.fanout import Observers
from runtime.base.persistence import Persistence
from runtime.session.replay import Replayer
from runtime.base.stepcall import call_moniker
from runtime.session.tool_runner import ToolPhase, ToolRunner
from tools.tool_registry import ToolRegistry
from profiles import hooks as profile_hooks
from store.codec import parse_time

log = logging.getLogger("runtime.session")

RAW_KEEP = 4000  # characters of a bad moniker output kept for debugging
INTERRUPTED_NOTE = ("The previous attempt at step {step!r} was interrupted when its worker stopped; "
                    "its outcome is unknown. Check before repeating anything it may already have done.")


class SessionAgent(PauseMixin, InterruptMixin, StopMixin, AgentBase):
    # While a session steps, its snapshot is saved behind the steps at most this
    # often; a change of status is saved at once.  The steps are the record, and
    # a crash loses nothing: reconcile folds the newer steps in (SessionAgent.reconcile).
    snapshot_every_s = 1.0

    def __init__(self, *, snapshot: dict, moniker: Moniker, persist: Persistence, observers: Observers | None = None,
                 owner: str | None = None, heartbeat_s: float = 5.0, tools: ToolRunner | None = None):
        super().__init__()
        self.moniker = moniker
        self.persist = persist
        self.observers = observers or Observers()
        self.heartbeat_s = heartbeat_s
        self.config = SessionConfig.model_validate(snapshot.get("config") or {})
        self._config_dump = self.config.model_dump()  # dumped once, and again only by replace_config
        self.agent_id: str = snapshot["agent_id"]
        self.session_id: str = snapshot["session_id"]
        self.task_text: str = snapshot.get("task") or ""
        self.status: str = snapshot["status"]
        self.status_reason: str | None = snapshot.get("status_reason")
        self.status_changed_at = _as_datetime(snapshot.get("status_changed_at") or snapshot.get("created_at"))
        self.iteration: int = snapshot["iteration"]
        self.step_token: str | None = snapshot.get("step_token")
        self.next_step_token: str = snapshot.get("next_step_token") or moniker.initial_step
        self.state: dict = snapshot.get("state") if isinstance(snapshot.get("state"), dict) else {}
        self.result = snapshot.get("result")
        self.pending_guidance = list(snapshot.get("pending_guidance") or [])
        self.used_guidance = list(snapshot.get("used_guidance") or [])
        self.conversation_id = snapshot.get("conversation_id")
        self.usage = snapshot.get("usage")
        self.last_error: str | None = snapshot.get("last_error")
        self.created_at = _as_datetime(snapshot.get("created_at"))
        self.owner = owner or snapshot.get("owner")
        self.lost = False  # another worker adopted it: this object saves nothing more (runtime/base/fence.py)
        self.crashed = False  # its runner crashed: the worker starts it again (runtime/worker/revival.py)
        self.step_started_at: datetime | None = None  # set while a long step is in flight
        self.heartbeat_at: datetime | None = None
        self.last_step_usage: dict | None = None
        self.repetition = limits.RepetitionWatch(self.repeat_limit)
        # The profile's prompt, observers, flow rules and inbox priorities (profiles/hooks.py)
        self.hooks = profile_hooks.SessionHooks.for_config(self.config)
        self.inbox_priorities: dict[str, int] | None = self.hooks.inbox_priorities  # per kind, over the defaults
        self.extra = {k: snapshot.get(k) for k in ("parent_agent_id", "parent_session_id", "forked_from", "name",
                                                   "replayed_from", "replay", *child_sessions.LINK_KEYS)}
        self.replay = Replayer.of(persist, snapshot)  # a replay of a recorded session (runtime/session/replay.py)
        self.intercept = intercept.chain(self.replay)  # around the step and its tool phase (runtime/session/intercept.py)
        self.runner: asyncio.Task | None = None
        self._save_lock = asyncio.Lock()
        self._saving: asyncio.Future | None = None  # the runner's snapshot save still in flight
        self._unsaved = False  # a step ended since the memory was last saved
        self._save_soon: asyncio.Future | None = None  # the spaced save's wait: set it to save at once
        self._flushing = False  # flush_saves is waiting: save without waiting
        self._ending = False  # the runner is deciding what the end leads to: the saver leaves it the save
        self._saved_at = float("-inf")  # event-loop time of the last save
        self._saved_status: tuple[str, str | None] | None = None  # the status that save held
        # StepFrame-v1 tool calls (runtime/session/tool_runner.py): the step whose calls
        # are open or whose results no step has consumed yet, and those results.
        self.tools = tools or ToolRunner(ToolRegistry(), persist, self.observers)
        self.tool_step: int | None = snapshot.get("tool_step")
        self.open_step: dict | None = None  # the step row whose calls still have to be settled
        self.tool_results: list[dict] | None = None
        self.tool_phase: ToolPhase | None = None
        self._landing: ToolPhase | None = None  # a phase whose ended rows still land behind (tool_rows_landed)
        self.tool_slots = asyncio.Semaphore(self.config.tool_concurrency)
        if self.status == "paused":
            self.request_pause()

    # ---- recovery -------------------------------------------------------

    @classmethod
    def reconcile(cls, snapshot: dict, newer_steps: list[dict]) -> tuple[dict, dict | None]:
        """Bring a snapshot up to its newest persisted step, and say what to
        record for a step that was in flight when its worker died.

        ``newer_steps`` are the persisted steps past the snapshot's iteration,
        oldest first: the snapshot is saved behind the steps (``save_behind``),
        so a crash can leave it behind them, and each one is folded in, in
        order, as if its snapshot had been saved.  Returns the repaired
        snapshot and, when a step was interrupted, the step row to append for
        it (its iteration is then used up).
        """
        snapshot = dict(snapshot)
        for step in sorted(newer_steps or (), key=lambda s: s["iteration"]):
            if step["iteration"] > snapshot["iteration"]:
                snapshot = _caught_up(snapshot, step)
        if not snapshot.get("step_started_at") or snapshot["status"] in SESSION_FINISHED:
            return snapshot, None
        iteration = snapshot["iteration"] + 1
        step = snapshot.get("next_step_token")
        interrupted = {
            "agent_id": snapshot["agent_id"], "session_id": snapshot["session_id"], "iteration": iteration,
            "step_token": step, "next_step_token": step, "status": "interrupted", "state": snapshot.get("state"),
            "guidance": snapshot.get("pending_guidance") or None, "attempts": 1,
            "error": f"worker stopped during this step (in flight since {snapshot['step_started_at']}); "
                     "outcome unknown",
        }
        snapshot.update(iteration=iteration, step_started_at=None, heartbeat_at=None)
        return _with_interrupted_note(snapshot, iteration, step), interrupted

    # ---- snapshot -------------------------------------------------------

    def snapshot(self) -> dict:
        return {
            "session_id": self.session_id, "agent_id": self.agent_id, "moniker": self.moniker.name,
            "task": self.task_text, "config": dict(self._config_dump), "status": self.status,
            "status_reason": self.status_reason, "status_changed_at": self.status_changed_at,
            "iteration": self.iteration, "step_token": self.step_token, "next_step_token": self.next_step_token,
            "state": self.state, "result": self.result, "pending_guidance": self.pending_guidance,
            "used_guidance": self.used_guidance,
            "conversation_id": self.conversation_id, "usage": self.usage, "last_error": self.last_error,
            "created_at": self.created_at, "owner": self.owner, "step_started_at": self.step_started_at,
            "heartbeat_at": self.heartbeat_at, "tool_step": self.tool_step, **self.extra,
        }

    async def save(self) -> None:
        """Persist the in-memory snapshot.  Handlers and the runner both call this;
        the lock keeps the writes in order, and each writes the latest memory."""
        async with self._save_lock:
            if self.lost:
                raise SessionLost(self.session_id)
            await self.tool_rows_landed()  # a snapshot says the tool step is over: its rows land first
            await child_sessions.report_if_finished(self)  # a child's outcome is queued before its final snapshot
            snapshot = self.snapshot()
            if self._ending:  # a handler's save while the runner decides what the end leads to
                # (_decide_the_end): the store keeps the status it had until the runner saves the decision
                snapshot["status"], snapshot["status_reason"] = self._saved_status or ("running", None)
            self._unsaved = False  # this save holds every step so far, whoever asked for it
            await self.persist.save_snapshot(snapshot)
            self._saved_at = asyncio.get_running_loop().time()
            self._saved_status = (snapshot["status"], snapshot["status_reason"])
            await self.observers.notify("snapshot_saved", snapshot)

    async def save_behind(self) -> None:
        """Have the snapshot saved without waiting for its commit (the runner, after a step).

        The step row is durable already, so a crash before the snapshot lands
        leaves it behind the newest steps, which ``reconcile`` folds in on
        restart.  Waiting here would make every step wait for a second commit.
        Saves are *coalesced* and *spaced*: at most one is in flight or
        waiting; it waits until ``snapshot_every_s`` has passed since the last
        save (not at all when the status changed), and a step that ends
        meanwhile asks for one more save of the memory as it is then.  So a
        lone agent's step costs one commit, a thousand agents do not write a
        snapshot per step, and a slow store cannot pile up snapshots.  A failed
        save's error reaches the runner at its next step.
        """
        self._unsaved = True
        if self._saving is not None and not self._saving.done():
            if self._status_unsaved():
                self._save_at_once()
            return
        await self.flush_saves()  # raises what the last one raised, if anything
        self._saving = asyncio.ensure_future(self._save_until_current())

    def _status_unsaved(self) -> bool:
        return self._saved_status != (self.status, self.status_reason)

    async def _save_until_current(self) -> None:
        """Save until no step is left unsaved; a save by anyone else (a status
        change, a handler) counts, so a session's last save is never followed
        by a needless one."""
        while self._unsaved and not self.lost:
            wait = self._saved_at + self.snapshot_every_s - asyncio.get_running_loop().time()
            if wait > 0 and not self._status_unsaved() and not self._flushing:
                await self._space_save(wait)
            if self._ending:
                return  # the runner is deciding the end, and saves it itself (_decide_the_end)
            if self._unsaved:
                await self.save()

    async def _space_save(self, seconds: float) -> None:
        """Wait ``seconds``, or until :meth:`_save_at_once` (one future and one
        timer: this runs for every agent, where ``wait_for`` makes a task)."""
        loop = asyncio.get_running_loop()
        self._save_soon = waiter = loop.create_future()
        timer = loop.call_later(seconds, self._save_at_once)
        try:
            await waiter
        finally:
            timer.cancel()
            self._save_soon = None

    def _save_at_once(self) -> None:
        if self._save_soon is not None and not self._save_soon.done():
            self._save_soon.set_result(None)

    async def flush_saves(self) -> None:
        """Save now what :meth:`save_behind` left waiting, and wait for it."""
        saving, self._saving = self._saving, None
        if saving is not None:
            self._flushing = True
            self._save_at_once()
            try:
                await saving
            finally:
                self._flushing = False

    async def set_status(self, status: str, reason: str | None = None) -> None:
        self.note_status(status, reason)
        await self.save()
        log.info("session %s status=%s reason=%s agent=%s", self.session_id, status, reason, self.agent_id)

    def drop(self, expected_loss: Callable[[asyncio.Future], None]) -> None:
        """Another worker adopted this session (runtime/base/fence.py): stop at
        once, saving nothing more; the save started behind the last step gets
        ``expected_loss`` to read the SessionLost it will end with."""
        self.lost = True
        self.request_stop()
        if self.runner is not None and self.runner is not asyncio.current_task():
            self.runner.cancel()
        if self._saving is not None:
            self._saving.add_done_callback(expected_loss)

    def replace_config(self, config: SessionConfig) -> None:
        """Change the session's config (a raised budget): a new object, never
        an attribute set on the old one, whose dump every step and snapshot reuses."""
        self.config, self._config_dump = config, config.model_dump()

    def note_status(self, status: str, reason: str | None) -> None:
        """Change the status in memory only: the caller saves the snapshot
        (with whatever else it changes), so one write carries both."""
        if (status, reason) != (self.status, self.status_reason):
            self.status_changed_at = datetime.now(timezone.utc)
        self.status, self.status_reason = status, reason

    # ---- lifecycle ------------------------------------------------------

    def start(self) -> asyncio.Task:
        self.runner = asyncio.create_task(self.run(), name=f"session:{self.session_id}")
        return self.runner

    @property
    def finished(self) -> bool:
        return self.status in SESSION_FINISHED

    async def run(self) -> None:
        log.info("session %s runner started at iteration %d agent=%s moniker=%s",
                 self.session_id, self.iteration + 1, self.agent_id, self.moniker.name)
        try:
            if self.tool_step is not None and self.open_step is None and self.tool_results is None:
                self.open_step = await self.persist.step_at(self.session_id, self.tool_step)
            await self._steps()
            while await self._woken():
                await self._steps()
            await self.flush_saves()
        except asyncio.CancelledError:
            raise
        except SessionLost:  # another worker adopted it: write nothing more (runtime/base/fence.py)
            return
        except Exception as exc:  # the store failed under it: the worker starts it again from its record
            log.exception("session %s runner crashed agent=%s", self.session_id, self.agent_id)
            self.last_error = f"runner: {type(exc).__name__}: {exc}"
            self.crashed = True  # runtime/worker/revival.py

    async def record_crash(self) -> bool:
        """End the session in ``error``: its runner crashed again and again
        (runtime/worker/revival.py).  Whether the error was recorded."""
        try:
            await self.flush_saves()
        except Exception:
            pass  # the failure that crashed it, most likely; it was logged then
        try:
            await self.set_status("error", "runner")
        except Exception:
            log.exception("session %s could not record its error", self.session_id)
            return False
        self.crashed = False
        return True

    async def _woken(self) -> bool:
        """Whether to run again once the loop ended: a replay whose recording
        was woken here (runtime/session/replay.py), or children's results that came in
        as the session finished (runtime/session/child_sessions.py)."""
        return await self.intercept.woken(self)

    async def _steps(self) -> None:
        while not self.finished:
            if self.open_step is not None and not await self._settle_tools():
                return
            await self.wait_while_paused()
            if self.stop_requested:
                return
            if await self._must_wait() or await self.intercept.before_step(self):
                continue  # (runtime/session/intercept.py: a replay, then the profile's hooks)
            if not await self._step_once() or self.finished or self.stop_requested:
                return
            if self.open_step is None:  # after tool calls, the next step follows their results at once
                if self.config.interval_s >= self.snapshot_every_s:
                    await self.flush_saves()  # about to rest: nothing gained by spacing, so the snapshot is current
                await self.sleep(self.config.interval_s)

    # ---- tool calls (StepFrame-v1) -----------------------------------------

    async def _settle_tools(self) -> bool:
        """Run the open step's tool calls to their end (see runtime/session/tool_runner.py);
        False when the session was stopped meanwhile."""
        step, fresh = self.open_step, self.open_step.get("_fresh", False)
        self.tool_phase = phase = ToolPhase(self.tools, self, step, behind=True)
        try:
            await phase.load(fresh=fresh)
            results = await phase.run()
        finally:
            phase.close()
            self.tool_phase, self._landing = None, phase
        if results is None:
            return False
        self.open_step, self.tool_results = None, results
        await self.reflect_waiting(None)
        return True

    async def tool_rows_landed(self) -> None:
        """Wait for the ended rows of the last tool phase, written behind
        (runtime/session/tool_runner.py): the next step's row commits alongside them and
        records the same results, so the step does not wait for them first.  Any
        other write that says the tool step is over (a snapshot, an error step)
        waits for them, and so does the step after, so after a crash at most the
        newest step's results can be missing from their rows, and
        :meth:`ToolRunner.settle_after_restart` writes them from it.

        The phase is let go only once its rows have landed: a snapshot save
        that comes while the step waits here waits too (it once went ahead
        and saved the step after the tool step before the rows landed, and a
        crash then left a row ``running`` that nothing would repair)."""
        phase = self._landing
        if phase is None:
            return
        try:
            await phase.landed()
        finally:
            if self._landing is phase and phase.has_landed:
                self._landing = None

    async def end_open_calls(self) -> None:
        """Destroy: the calls of the step no later step consumed end now (see
        ToolRunner.end_unended); the runner may have stopped before its phase
        even wrote their rows (a destroy that came while that step ran)."""
        await self.tool_rows_landed()  # an ended row still landing must not be taken for unended
        if self.tool_step is None:
            return
        step = self.open_step or await self.persist.step_at(self.session_id, self.tool_step)
        if step is not None:
            await self.tools.end_unended(self, step)

    async def reflect_waiting(self, reason: str | None) -> None:
        """Status ``waiting`` (reason approval | tool_result) while calls wait on
        someone, ``running`` again after; a paused or stopping session keeps its status."""
        if self.status not in ("running", "waiting"):
            return
        target = ("waiting", reason) if reason else ("running", None)
        if (self.status, self.status_reason if self.status == "waiting" else None) != target:
            await self.set_status(*target)

    def status_after_resume(self) -> tuple[str, str | None]:
        """What a resumed session's status is: waiting, while its calls still wait."""
        reason = self.tool_phase.waiting_reason() if self.tool_phase is not None else None
        return ("waiting", reason) if reason else ("running", "user")

    async def _must_wait(self) -> bool:
        """Finish on a limit, or pause on a budget; True when no step may run now."""
        reason = limits.limit_reached(self.config, self.iteration, self.created_at)
        if reason:
            await self.set_status("done", reason)
            return True
        budget = limits.over_budget(self.config, self.usage, self.last_step_usage)
        if budget:
            self.request_pause()
            self.last_error = f"budget: {budget}"
            await self.set_status("paused", "budget")
            return True
        return await session_tree.pause_for_tree_budget(self)  # a budget covers the session's whole tree

    # ---- one step -------------------------------------------------------

    async def _keep_model_io(self, ctx: StepContext) -> None:
        """What the model was sent and answered in this step, once the step is
        recorded, when the worker keeps it and the session is not private."""
        if not ctx.model_io:  # the step called no model (most monikers never do)
            return
        keeper = self.persist.model_io
        if keeper is not None and keeper.keeps(self.config):
            await keeper.keep(ctx.model_io, agent_id=self.agent_id, session_id=self.session_id,
                              iteration=ctx.iteration)

    async def _step_once(self) -> bool:
        """Run one iteration; False when it ended the session in error."""
        iteration = self.iteration + 1
        self.inputs_taken()
        guidance = inbox_order.ordered(self.peek_guidance(), self.inbox_priorities)
        inbox = [inbox_order.frame_item(g) for g in guidance]
        frame_in = _frame_in(self.next_step_token, self.state, guidance, inbox, self.tool_results)
        ctx = StepContext(task=self.task_text, agent_id=self.agent_id, session_id=self.session_id,
                          iteration=iteration, config=dict(self._config_dump), tools=self.tools.allowed(self.config),
                          deadline=time.monotonic() + self.config.step_timeout_s,
                          system_prompt=self.hooks.system_prompt(self, iteration),
                          on_output=live_output.emitter(self.observers, agent_id=self.agent_id,
                                                        session_id=self.session_id,
                                                        conversation_id=self.conversation_id, iteration=iteration))
        started = time.perf_counter()
        outcome = await call_moniker(self.moniker, frame_in, ctx, timeout_s=self.config.step_timeout_s,
                                     policy=self.config.retries, heartbeat_s=self.heartbeat_s,
                                     on_long_step=self._long_step)
        row = {"agent_id": self.agent_id, "session_id": self.session_id, "iteration": iteration,
               "guidance": guidance or None, "latency_ms": (time.perf_counter() - started) * 1000,
               "usage": usage_math.summarize(ctx.usage_calls), "attempts": outcome.attempts}
        self.usage = usage_math.accumulate(self.usage, row["usage"])
        self.last_step_usage = row["usage"]
        self.step_started_at = self.heartbeat_at = None
        if outcome.error:
            await self._record_error(row, frame_in, outcome)
            await self._keep_model_io(ctx)
            return False
        out = outcome.out
        calls = [{"id": str(ULID()), "call_id": c.id, "name": c.name, "args": c.args} for c in out.tool_calls]
        inputs = {"tool_results": [r.model_dump() for r in frame_in.tool_results], "inbox": inbox} \
            if (self.tool_results or inbox) else None
        done = out.done and not calls  # a step with tool calls is never the last
        observed = await self.hooks.after_step(self, iteration, out, calls)
        stored = await self.persist.append_step({
            **row, "step_token": out.step, "next_step_token": out.next_step,
            "status": "done" if done else "ok", "text": out.text, "data": out.data, "state": out.state,
            "notes": _with_retries(out.notes, outcome.retried), "error": None,
            "tool_calls": calls or None, "inputs": inputs,
            "observers": observed})
        self.iteration, self.step_token, self.next_step_token = iteration, out.step, out.next_step
        self.state, self.result = out.state, {"text": out.text, "data": out.data}
        self.consume_guidance(guidance)
        self.tool_results, self.tool_step = None, (iteration if calls else None)
        self.open_step = dict(stored, _fresh=True) if calls else None
        await self.tool_rows_landed()
        await self._keep_model_io(ctx)
        await self.observers.notify("step_persisted", self.snapshot(), stored)
        if not calls:
            self._finish_if_over(done, out.text)
        self.hooks.apply(self, observed, iteration)
        if not calls and not done and self.status == "running" and self.config.when_idle == "wait" \
                and not (observed or {}).get("flow"):
            self.note_status("waiting", "idle")  # config.when_idle: the turn has ended (runtime/record/turn_tracker.py)
        if self.finished:
            await self._decide_the_end()
        if self.finished:
            await self.save()  # the end of a session is durable before its runner returns
            log.info("session %s finished reason=%s at iteration %d", self.session_id, self.status_reason, iteration)
        else:
            await self.save_behind()
        return True

    async def _decide_the_end(self) -> None:
        """What the session's end leads to (a replay whose recording ran on is
        woken instead, runtime/session/replay.py), decided before anything saves
        the end: the snapshot saver, spaced behind the steps, could come due while
        the wake reads the recording and save ``done``; a kill then left the
        replay ended one step short, with no step row ahead of its snapshot to
        tell the adoption (the long kill loop).  The runner saves what was decided."""
        self._ending = True
        try:
            await self.intercept.finished(self)
        finally:
            self._ending = False

    def _finish_if_over(self, done: bool, text: str | None) -> None:
        if done and self.config.stop_on_done:
            self.note_status("done", "done")
        elif limits.limit_reached(self.config, self.iteration, self.created_at) == "max_steps":
            self.note_status("done", "max_steps")
        elif self.repetition.repeated(text):
            self.last_error = f"the same output came {self.repeat_limit} times in a row"
            self.note_status("stopped", "repetition")

    @property
    def reuses_tool_results(self) -> bool:
        """The config's ``reuse_tool_results``, else the moniker's default (on for a model's steps)."""
        if self.config.reuse_tool_results is not None:
            return self.config.reuse_tool_results
        return bool(getattr(self.moniker, "reuses_tool_results", False))

    @property
    def repeat_limit(self) -> int | None:
        """The config's, else the moniker's default (a model's; none for scripted steps)."""
        return self.config.repeat_limit or getattr(self.moniker, "repeat_limit", None)

    async def _long_step(self, started: float) -> None:
        """Heartbeat: this session has a step in flight and its worker is alive."""
        self.step_started_at = self.step_started_at or datetime.fromtimestamp(started, timezone.utc)
        self.heartbeat_at = datetime.now(timezone.utc)
        await self.save()

    async def _record_error(self, row: dict, frame_in: FrameIn, outcome) -> None:
        """An error takes its iteration number (no gap) and ends the session;
        guidance stays queued because the moniker never acted on it."""
        log.warning("session %s step %d failed (%s) agent=%s: %s", self.session_id, row["iteration"],
                    outcome.error_class, self.agent_id, outcome.error)
        await self.tool_rows_landed()  # this row does not record the last tool results
        stored = await self.persist.append_step({
            **row, "step_token": frame_in.step, "next_step_token": frame_in.step, "status": "error",
            "text": None, "data": {"raw": _raw_text(outcome.raw)} if outcome.raw is not None else None,
            "state": self.state, "notes": _with_retries(None, outcome.retried), "error": outcome.error})
        self.iteration, self.last_error = row["iteration"], outcome.error
        await self.observers.notify("step_persisted", self.snapshot(), stored)
        await self.set_status("error", f"step_failed:{outcome.error_class}")


@dataclass(frozen=True)
class SessionFactory:
    """How this worker makes a session from a snapshot (a create, a resume
    after an error, a finished session woken, an adoption): every session it
    runs shares its store, observers, tool runner, owner and heartbeat."""
    persist: Persistence
    observers: Observers
    tools: ToolRunner
    owner: str
    heartbeat_s: float

    def make(self, snapshot: dict, moniker: Moniker) -> SessionAgent:
        return SessionAgent(snapshot=snapshot, moniker=moniker, persist=self.persist, observers=self.observers,
                            owner=self.owner, heartbeat_s=self.heartbeat_s, tools=self.tools)


def _caught_up(snapshot: dict, latest_step: dict) -> dict:
    """The snapshot as it would have been saved right after ``latest_step``."""
    fixed = dict(snapshot, iteration=latest_step["iteration"],
                 usage=usage_math.accumulate(snapshot.get("usage"), latest_step.get("usage")))
    if latest_step["status"] in ("error", "interrupted"):
        if latest_step["status"] == "error":
            fixed.update(status="error", last_error=latest_step.get("error"), status_reason="step_failed")
        fixed.update(step_started_at=None)
        if latest_step["status"] == "interrupted":  # recorded, but a crash may have kept its note from the snapshot
            fixed = _with_interrupted_note(fixed, latest_step["iteration"], latest_step.get("step_token"))
        return fixed
    used = {g.get("action_id") for g in (latest_step.get("guidance") or []) if isinstance(g, dict)}
    fixed["used_guidance"] = [*(snapshot.get("used_guidance") or []), *sorted(used)][-SessionAgent.USED_KEPT:]
    fixed.update(
        step_token=latest_step.get("step_token"), next_step_token=latest_step.get("next_step_token"),
        state=latest_step.get("state") or {}, step_started_at=None,
        tool_step=latest_step["iteration"] if latest_step.get("tool_calls") else None,
        result={"text": latest_step.get("text"), "data": latest_step.get("data")},
        pending_guidance=[g for g in (snapshot.get("pending_guidance") or []) if g.get("action_id") not in used],
    )
    config = SessionConfig.model_validate(snapshot.get("config") or {})
    if latest_step["status"] == "done" and config.stop_on_done:
        fixed.update(status="done", status_reason="done")
    elif (config.when_idle == "wait" and fixed.get("status") == "running" and latest_step["status"] == "ok"
          and not latest_step.get("tool_calls") and not (latest_step.get("observers") or {}).get("flow")):
        fixed.update(status="waiting", status_reason="idle")  # died before saving that it waits
    return profile_hooks.caught_up(fixed, latest_step)


def _with_interrupted_note(snapshot: dict, iteration: int, step: str | None) -> dict:
    """The snapshot with the note that step ``iteration`` was interrupted queued
    for the next step, unless it is queued or used already.  Added both when
    the interrupted step is recorded and when that record is folded in on a
    later restart: a kill between the two must not lose the note."""
    note_id = f"interrupted-{snapshot['session_id']}-{iteration}"
    pending = snapshot.get("pending_guidance") or []
    if note_id in (snapshot.get("used_guidance") or []) or any(g.get("action_id") == note_id for g in pending):
        return snapshot
    note = {"action_id": note_id, "kind": "interrupted_step", "text": INTERRUPTED_NOTE.format(step=step),
            "source": {"kind": "interrupted_step"}}
    return dict(snapshot, pending_guidance=[*pending, note])


def _frame_in(token, state, guidance: list, inbox: list, tool_results) -> FrameIn:
    """The step's frame_in.  A step with no inputs (most of them) and a token and
    state of the right types has nothing to validate: it is built as is (pydantic's
    validation was a twentieth of a step's CPU at 1,000 agents).  The state is
    copied one level deep, as validation copied it: a moniker that changes its
    frame's state in place does not change the session's."""
    if not guidance and not tool_results and type(state) is dict and type(token) is str and len(token) <= 256:
        return FrameIn.model_construct(step=token, state=dict(state), guidance=None, tool_results=[], inbox=[])
    return FrameIn(step=token, state=state, guidance=inbox_order.guidance_text(guidance),
                   tool_results=tool_results or [], inbox=inbox)


def _with_retries(notes: str | None, retried: list[str]) -> str | None:
    if not retried:
        return notes
    tried = f"[retried {len(retried)}x: " + " | ".join(retried) + "]"
    return f"{notes} {tried}" if notes else tried


def _raw_text(raw) -> str:
    return (raw if isinstance(raw, str) else repr(raw))[:RAW_KEEP]


def _as_datetime(value) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, str):
        return parse_time(value)
    return datetime.now(timezone.utc)
