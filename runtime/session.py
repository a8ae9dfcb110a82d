"""One agent session: the StepFrame runner loop and its persisted snapshot.

Each iteration: build frame_in {step, state, guidance?} -> call the moniker ->
validate frame_out -> append the step row -> save the snapshot -> continue with
next_step and iteration + 1, until done, a limit, stop, or an error.

Order of writes matters for crash safety: the step row is appended *before* the
snapshot is saved.  A crash between the two leaves a step newer than the
snapshot, which :meth:`SessionAgent.from_snapshot` reconciles on restart, so an
iteration is never run twice nor skipped.
"""
import asyncio
import logging
import time
from datetime import datetime, timezone

from pydantic import ValidationError

from monikers.frame import FrameIn, FrameOut, Moniker, StepContext
from runtime.agent_core import AgentBase, InterruptMixin, PauseMixin, StopMixin
from runtime import usage as usage_math
from runtime.config import SessionConfig
from runtime.observers import Observers

log = logging.getLogger("runtime.session")

TERMINAL = ("stopped", "done", "error")
RAW_KEEP = 4000  # characters of a bad moniker output kept for debugging


class SessionAgent(PauseMixin, InterruptMixin, StopMixin, AgentBase):
    def __init__(self, *, snapshot: dict, moniker: Moniker, persist, observers: Observers | None = None):
        super().__init__()
        self.moniker = moniker
        self.persist = persist
        self.observers = observers or Observers()
        self.config = SessionConfig.model_validate(snapshot.get("config") or {})
        self.agent_id: str = snapshot["agent_id"]
        self.session_id: str = snapshot["session_id"]
        self.task_text: str = snapshot.get("task") or ""
        self.status: str = snapshot["status"]
        self.status_reason: str | None = snapshot.get("status_reason")
        self.iteration: int = snapshot["iteration"]
        self.step_token: str | None = snapshot.get("step_token")
        self.next_step_token: str = snapshot.get("next_step_token") or moniker.initial_step
        self.state: dict = snapshot.get("state") if isinstance(snapshot.get("state"), dict) else {}
        self.result = snapshot.get("result")
        self.pending_guidance = list(snapshot.get("pending_guidance") or [])
        self.conversation_id = snapshot.get("conversation_id")
        self.usage = snapshot.get("usage")
        self.last_error: str | None = snapshot.get("last_error")
        self.created_at = _as_datetime(snapshot.get("created_at"))
        self.extra = {k: snapshot.get(k) for k in ("parent_agent_id", "parent_session_id")}
        self.runner: asyncio.Task | None = None
        self._save_lock = asyncio.Lock()
        if self.status == "paused":
            self.request_pause()

    @classmethod
    def reconcile(cls, snapshot: dict, latest_step: dict | None) -> dict:
        """Bring a snapshot up to its newest persisted step (a crash can land
        between appending a step and saving the snapshot)."""
        if not latest_step or latest_step["iteration"] <= snapshot["iteration"]:
            return snapshot
        fixed = dict(snapshot, iteration=latest_step["iteration"],
                     usage=usage_math.accumulate(snapshot.get("usage"), latest_step.get("usage")))
        if latest_step["status"] == "error":
            fixed.update(status="error", last_error=latest_step.get("error"), status_reason="error")
            return fixed
        used = {g.get("action_id") for g in (latest_step.get("guidance") or []) if isinstance(g, dict)}
        fixed.update(
            step_token=latest_step.get("step_token"),
            next_step_token=latest_step.get("next_step_token"),
            state=latest_step.get("state") or {},
            result={"text": latest_step.get("text"), "data": latest_step.get("data")},
            pending_guidance=[g for g in (snapshot.get("pending_guidance") or []) if g.get("action_id") not in used],
        )
        if latest_step["status"] == "done" and SessionConfig.model_validate(snapshot.get("config") or {}).stop_on_done:
            fixed.update(status="done", status_reason="done")
        return fixed

    # ---- snapshot -------------------------------------------------------

    def snapshot(self) -> dict:
        return {
            "session_id": self.session_id,
            "agent_id": self.agent_id,
            "moniker": self.moniker.name,
            "task": self.task_text,
            "config": self.config.model_dump(),
            "status": self.status,
            "status_reason": self.status_reason,
            "iteration": self.iteration,
            "step_token": self.step_token,
            "next_step_token": self.next_step_token,
            "state": self.state,
            "result": self.result,
            "pending_guidance": self.pending_guidance,
            "conversation_id": self.conversation_id,
            "usage": self.usage,
            "last_error": self.last_error,
            "created_at": self.created_at,
            **self.extra,
        }

    async def save(self) -> None:
        """Persist the in-memory snapshot.  Handlers and the runner both call this;
        the lock keeps the writes in order, and each writes the latest memory."""
        async with self._save_lock:
            snapshot = self.snapshot()
            await self.persist.save_snapshot(snapshot)
            await self.observers.notify("snapshot_saved", snapshot)

    async def set_status(self, status: str, reason: str | None = None) -> None:
        self.status, self.status_reason = status, reason
        await self.save()
        log.info("session %s status=%s reason=%s agent=%s", self.session_id, status, reason, self.agent_id)

    # ---- lifecycle ------------------------------------------------------

    def start(self) -> asyncio.Task:
        self.runner = asyncio.create_task(self.run(), name=f"session:{self.session_id}")
        return self.runner

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    async def run(self) -> None:
        log.info("session %s runner started at iteration %d agent=%s moniker=%s",
                 self.session_id, self.iteration + 1, self.agent_id, self.moniker.name)
        try:
            while not self.finished:
                await self.wait_while_paused()
                if self.stop_requested:
                    return
                reason = self._limit_reached()
                if reason:
                    await self.set_status("done", reason)
                    return
                if not await self._step_once() or self.finished:
                    return
                await self.sleep(self.config.interval_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # storage failed under us: record it if we still can
            log.exception("session %s runner crashed agent=%s", self.session_id, self.agent_id)
            self.last_error = f"runner: {type(exc).__name__}: {exc}"
            try:
                await self.set_status("error", "runner")
            except Exception:
                log.exception("session %s could not record its error", self.session_id)

    def _limit_reached(self) -> str | None:
        if self.config.max_steps is not None and self.iteration + 1 >= self.config.max_steps:
            return "max_steps"
        if self.config.max_runtime_s is not None:
            elapsed = (datetime.now(timezone.utc) - self.created_at).total_seconds()
            if elapsed >= self.config.max_runtime_s:
                return "max_runtime"
        return None

    # ---- one step -------------------------------------------------------

    async def _step_once(self) -> bool:
        """Run one iteration; False when it ended the session in error."""
        iteration = self.iteration + 1
        guidance = self.peek_guidance()
        frame_in = FrameIn(step=self.next_step_token, state=self.state,
                           guidance="\n".join(g["text"] for g in guidance) or None)
        ctx = StepContext(task=self.task_text, agent_id=self.agent_id, session_id=self.session_id,
                          iteration=iteration, config=self.config.model_dump())
        started = time.perf_counter()
        raw, error = None, None
        try:
            raw = await asyncio.wait_for(self.moniker.step(frame_in, ctx), self.config.step_timeout_s)
            out = raw if isinstance(raw, FrameOut) else FrameOut.model_validate(raw)
        except TimeoutError:
            error = f"step timed out after {self.config.step_timeout_s}s"
        except ValidationError as exc:
            error = f"invalid frame_out: {exc.error_count()} error(s): " + "; ".join(
                f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()[:5])
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            raw = getattr(exc, "raw_output", None)
        latency_ms = (time.perf_counter() - started) * 1000
        step_usage = usage_math.summarize(ctx.usage_calls)
        self.usage = usage_math.accumulate(self.usage, step_usage)
        if error:
            await self._record_error(iteration, frame_in, guidance, error, raw, latency_ms, step_usage)
            return False
        stored = await self.persist.append_step({
            "agent_id": self.agent_id, "session_id": self.session_id, "iteration": iteration,
            "step_token": out.step, "next_step_token": out.next_step,
            "status": "done" if out.done else "ok", "text": out.text, "data": out.data,
            "state": out.state, "guidance": guidance or None, "notes": out.notes,
            "latency_ms": latency_ms, "error": None, "usage": step_usage,
        })
        self.iteration, self.step_token, self.next_step_token = iteration, out.step, out.next_step
        self.state, self.result = out.state, {"text": out.text, "data": out.data}
        self.consume_guidance(guidance)
        await self.observers.notify("step_persisted", self.snapshot(), stored)
        if out.done and self.config.stop_on_done:
            self.status, self.status_reason = "done", "done"
        elif self._limit_reached() == "max_steps":
            self.status, self.status_reason = "done", "max_steps"
        await self.save()
        log.debug("session %s step %d ok in %.1f ms", self.session_id, iteration, latency_ms)
        if self.finished:
            log.info("session %s finished reason=%s at iteration %d", self.session_id, self.status_reason, iteration)
        return True

    async def _record_error(self, iteration, frame_in, guidance, error, raw, latency_ms, step_usage) -> None:
        """An error takes its iteration number (no gap) and ends the session;
        guidance stays queued because the moniker never acted on it."""
        log.warning("session %s step %d failed agent=%s: %s", self.session_id, iteration, self.agent_id, error)
        stored = await self.persist.append_step({
            "agent_id": self.agent_id, "session_id": self.session_id, "iteration": iteration,
            "step_token": frame_in.step, "next_step_token": frame_in.step, "status": "error",
            "text": None, "data": {"raw": _raw_text(raw)} if raw is not None else None,
            "state": self.state, "guidance": guidance or None, "notes": None,
            "latency_ms": latency_ms, "error": error, "usage": step_usage,
        })
        self.iteration, self.last_error = iteration, error
        await self.observers.notify("step_persisted", self.snapshot(), stored)
        await self.set_status("error", "step_failed")


def _raw_text(raw) -> str:
    return (raw if isinstance(raw, str) else repr(raw))[:RAW_KEEP]


def _as_datetime(value) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return datetime.now(timezone.utc)
