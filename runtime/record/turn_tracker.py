"""Turns: a session's steps grouped from a trigger until the agent waits or finishes.

A **turn** starts with the first step after a *trigger*: the session's create
(its first step), a user's guidance or conversation message, a child's result
or an answer (inbox kinds ``guidance``, ``message``, ``child_result``,
``answer``), or a resume after an error.  It **ends** at the first step after
which the session no longer steps on its own:

- it finished: ``done``, ``stopped`` or ``error``;
- it waits for input: status ``waiting`` with reason ``user`` (a person:
  ``ask_user``, a profile's ``wait_user`` flow rule) or ``idle`` (anything: a
  profile's ``end_turn`` rule, or ``config.when_idle = "wait"`` after a step
  that called no tool and was not done).

Tool calls never end a turn (their results come back within it), nor do
pauses, approvals or external tool results.  A session that keeps stepping on
its own (``when_idle`` ``continue``, the default, as the ``joke`` moniker does)
has one turn from create to finish, and a message reaching it while it runs is
part of the current turn.

:class:`TurnKeeper` is an observer: ``step_persisted`` starts a turn,
``snapshot_saved`` ends one.  Each turn row is written twice (start, end;
upserts by ``<session_id>:<turn>``), never per step: a step only moves the
in-memory open turn.  An ended turn gets a summary, in the background, before
its end row is written: by the session's own LLM (BAML ``SummarizeRecord``,
monikers/baml_summary.py, shared with the archive) when the session has a
model (the ``baml`` moniker, or any session whose config has ``llm``),
otherwise an extractive one (the turn's last text).  Usage and the last
iteration are read back from the step rows when the turn ends, so nothing of
them lives only in memory.

Crashes: the first time a worker sees a session (a restart, an adoption), the
keeper reconciles the rows with the steps and the snapshot: an open row whose
session has since waited or finished is ended; an older row still open (its
end write was lost while a later turn started) is ended where the next turn
begins; steps past the last ended turn whose start row was lost get their turn
(trigger read from the first such step).  What is lost is at most a write
nobody had been told about, so the rows converge on what the steps say.
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from domain.statuses import SESSION_FINISHED
from runtime.record import archive
from runtime.base.aio import BackgroundWork
from runtime.base import usage as usage_math

if TYPE_CHECKING:
    from store import Store

log = logging.getLogger("runtime.turn_tracker")

TRIGGER_KINDS = ("child_result", "answer", "guidance", "message")
ASK_USER = "ask_user"  # the tool whose result is a person's answer (tools/ask_user.py)
WAITS_FOR_INPUT = ("user", "idle")  # waiting reasons that end a turn (not approval / tool_result)
KEPT = 10_000  # sessions whose current turn is remembered
MAX_TURN_STEPS = 5000  # steps read back to sum a turn's usage
_UNSEEN = object()


def ends_turn(snapshot: dict) -> bool:
    """After a step, the session no longer steps on its own: it finished, or waits for a person."""
    status = snapshot.get("status")
    return status in SESSION_FINISHED or (status == "waiting" and snapshot.get("status_reason") in WAITS_FOR_INPUT)


def first_own_iteration(snapshot: dict) -> int:
    """A fork's first own step follows the step it was forked from; others start at 0."""
    forked = snapshot.get("forked_from")
    return (forked.get("iteration", -1) + 1) if isinstance(forked, dict) else 0


def trigger_of(step: dict | None, snapshot: dict) -> dict:
    """What started a turn, from the inbox items its first step consumed."""
    items = [g for g in ((step or {}).get("guidance") or []) if isinstance(g, dict)]
    triggers = [g for g in items if (g.get("kind") or "guidance") in TRIGGER_KINDS]
    if triggers:
        first = triggers[0]  # the step's items are in priority order
        return {"trigger_kind": first.get("kind") or "guidance",
                "trigger_ids": [g["action_id"] for g in triggers if g.get("action_id")],
                "trigger_text": archive.clip(first.get("text"), 300) if first.get("text") else None}
    answers = [r for r in (((step or {}).get("inputs") or {}).get("tool_results") or [])
               if isinstance(r, dict) and r.get("name") == ASK_USER and r.get("status") == "success"]
    if answers:  # ask_user's answer comes back as its tool result
        answer = answers[0].get("result") if isinstance(answers[0].get("result"), dict) else {}
        return {"trigger_kind": "answer", "trigger_ids": [r["id"] for r in answers if r.get("id")],
                "trigger_text": archive.clip(answer.get("answer"), 300) if answer.get("answer") else None}
    if step is not None and step["iteration"] == first_own_iteration(snapshot):
        return {"trigger_kind": "fork" if snapshot.get("forked_from") else "create", "trigger_ids": [],
                "trigger_text": archive.clip(snapshot.get("task"), 300) if snapshot.get("task") else None}
    return {"trigger_kind": "resume", "trigger_ids": [], "trigger_text": None}


def extractive(steps: list[dict]) -> str:
    """The turn's last text; else its last error; else what it did in numbers."""
    for step in reversed(steps):
        if step.get("text"):
            return archive.clip(step["text"])
    for step in reversed(steps):
        if step.get("error"):
            return "Error: " + archive.clip(step["error"], 300)
    return f"{len(steps)} step{'s' if len(steps) != 1 else ''} without text"


class TurnKeeper:
    def __init__(self, store: Store, *, llm: archive.LlmSummary = archive.llm_summary, llm_monikers=("baml",),
                 concurrency: int = 2):
        self.store = store
        self.llm = llm
        self.llm_monikers = set(llm_monikers)
        self._current: OrderedDict[str, dict | None] = OrderedDict()  # session -> its newest turn (row dict)
        self._locks: dict[str, asyncio.Lock] = {}
        self._background = BackgroundWork("turns: ending a turn", concurrency)

    # ---- observer hooks -------------------------------------------------------

    async def step_persisted(self, snapshot: dict, step: dict) -> None:
        sid = snapshot["session_id"]
        async with self._lock(sid):
            turn = await self._turn_of(snapshot, step)
            if turn is None or turn["status"] == "ended":
                first = turn["last_iteration"] + 1 if turn else first_own_iteration(snapshot)
                first_step = step if step["iteration"] == first else await self._step_at(sid, first)
                self._begin(snapshot, (turn["turn"] + 1) if turn else 0, first, first_step or step)

    async def snapshot_saved(self, snapshot: dict) -> None:
        sid = snapshot["session_id"]
        if self._current.get(sid, _UNSEEN) is _UNSEEN and snapshot.get("iteration", -1) < first_own_iteration(snapshot):
            self._remember(sid, None)  # a new session: no step, no turn, nothing to read
            return
        async with self._lock(sid):
            turn = await self._turn_of(snapshot, None)
            if turn is not None and turn["status"] == "open" and ends_turn(snapshot) \
                    and snapshot.get("iteration", -1) >= turn["first_iteration"]:
                self._end(snapshot, turn, snapshot["iteration"])

    async def close(self) -> None:
        """Let the summaries in flight finish (bounded by the caller), then stop."""
        await self._background.close(grace_s=5)

    # ---- the current turn -------------------------------------------------------

    def _lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    def _remember(self, session_id: str, turn: dict | None) -> None:
        self._current[session_id] = turn
        self._current.move_to_end(session_id)
        while len(self._current) > KEPT:
            old, _ = self._current.popitem(last=False)
            lock = self._locks.get(old)
            if lock is not None and not lock.locked():
                del self._locks[old]

    async def _turn_of(self, snapshot: dict, step: dict | None) -> dict | None:
        """The session's newest turn; read and reconciled the first time this worker sees the session."""
        sid = snapshot["session_id"]
        known = self._current.get(sid, _UNSEEN)
        if known is not _UNSEEN:
            return known
        turn = await self._reconcile(snapshot, step)
        self._remember(sid, turn)
        return turn

    async def _reconcile(self, snapshot: dict, step: dict | None) -> dict | None:
        """Bring the session's turn rows in line with its steps and snapshot (see the module's doc)."""
        sid = snapshot["session_id"]
        open_rows = await asyncio.to_thread(self.store.turns.open_turns, sid)
        latest = await asyncio.to_thread(self.store.turns.latest, sid)
        for older, newer in zip(open_rows, open_rows[1:] + [latest]):
            if newer is not None and newer["turn"] > older["turn"]:
                log.warning("turns: session %s turn %d was left open by a crash; ending it", sid, older["turn"])
                self._end(snapshot, older, newer["first_iteration"] - 1, reason="superseded")
        iteration = snapshot.get("iteration", -1)
        if latest is not None and latest["status"] == "open":
            if ends_turn(snapshot) and iteration >= latest["first_iteration"] and step is None:
                self._end(snapshot, latest, iteration)
                return {**latest, "status": "ended", "last_iteration": iteration}
            return latest
        first = latest["last_iteration"] + 1 if latest else first_own_iteration(snapshot)
        if iteration < first or step is not None and step["iteration"] == first:
            return latest  # nothing missing (a step about to start the next turn is handled by the caller)
        first_step = await self._step_at(sid, first)
        if first_step is None:
            return latest
        log.warning("turns: session %s steps from %d had no turn (its start was lost); recording it", sid, first)
        turn = self._begin(snapshot, (latest["turn"] + 1) if latest else 0, first, first_step, remember=False)
        if ends_turn(snapshot) and step is None:
            self._end(snapshot, turn, iteration)
            return {**turn, "status": "ended", "last_iteration": iteration}
        return turn

    async def _step_at(self, session_id: str, iteration: int) -> dict | None:
        found = await asyncio.to_thread(self.store.steps.search, session_id=session_id, min_iteration=iteration,
                                        max_iteration=iteration, limit=1)
        return found[0] if found else None

    # ---- start and end ----------------------------------------------------------

    def _begin(self, snapshot: dict, number: int, first: int, first_step: dict, remember: bool = True) -> dict:
        """Start turn ``number`` at iteration ``first``: write its open row (not awaited:
        a lost start is rebuilt from the steps by the next reconcile)."""
        row = {"agent_id": snapshot["agent_id"], "session_id": snapshot["session_id"], "turn": number,
               "status": "open", "first_iteration": first, "started_at": first_step.get("created_at"),
               **trigger_of(first_step, snapshot)}
        if remember:
            self._remember(snapshot["session_id"], row)
        self._write(row)
        log.info("turn %d of session %s started at iteration %d (trigger %s) agent=%s", number,
                 snapshot["session_id"], first, row["trigger_kind"], snapshot["agent_id"])
        return row

    def _end(self, snapshot: dict, turn: dict, last: int, reason: str | None = None) -> None:
        """Mark the turn ended now (the next step starts a new one) and write its end
        row, with usage and summary, in the background."""
        reason = reason or f"{snapshot.get('status')}:{snapshot.get('status_reason') or ''}".rstrip(":")
        ended = {**turn, "status": "ended", "last_iteration": last, "end_reason": reason}
        if self._current.get(snapshot["session_id"], _UNSEEN) is turn:
            self._remember(snapshot["session_id"], ended)
        self._background.spawn(self._finish(snapshot, ended), name=f"turn:{snapshot['session_id']}:{turn['turn']}")

    async def _finish(self, snapshot: dict, turn: dict) -> None:
        first, last = turn["first_iteration"], turn["last_iteration"]
        steps = await asyncio.to_thread(self.store.steps.search, session_id=turn["session_id"], min_iteration=first,
                                        max_iteration=last, limit=min(max(last - first + 1, 1), MAX_TURN_STEPS))
        total = None
        for step in steps:
            total = usage_math.accumulate(total, step.get("usage"))
        summary, method, data = await self._summary(snapshot, turn, steps)
        row = {k: v for k, v in turn.items() if k not in ("id", "updated_at")}
        row.update(steps=len(steps), usage=total, summary=summary, summary_method=method, summary_data=data,
                   ended_at=steps[-1]["created_at"] if steps else None)
        await asyncio.wrap_future(self.store.turns.submit(row))
        log.info("turn %d of session %s ended (%s) at iteration %d, %d steps, summary %s agent=%s", turn["turn"],
                 turn["session_id"], turn["end_reason"], last, len(steps), method, turn["agent_id"])

    def _has_model(self, snapshot: dict) -> bool:
        config = snapshot.get("config") if isinstance(snapshot.get("config"), dict) else {}
        return snapshot.get("moniker") in self.llm_monikers or isinstance(config.get("llm"), dict)

    async def _summary(self, snapshot: dict, turn: dict, steps: list[dict]) -> tuple[str, str, dict | None]:
        if not steps or not self._has_model(snapshot):
            return extractive(steps), "extractive", None
        task = snapshot.get("task") or ""
        if turn.get("trigger_text") and turn["trigger_kind"] in TRIGGER_KINDS:
            task = f"{task}\nThis turn answers ({turn['trigger_kind']}): {turn['trigger_text']}".strip()
        try:
            out = await self.llm(snapshot.get("config") or {}, "turn", task, archive.session_transcript(steps))
        except Exception as exc:
            error = archive.clip(f"{type(exc).__name__}: {exc}", 300)
            log.warning("turns: LLM summary of session %s turn %d failed, using the last text: %s",
                        turn["session_id"], turn["turn"], error)
            return extractive(steps), "extractive", {"llm_error": error}
        if not out.get("text"):
            return extractive(steps), "extractive", {"llm_error": "the model returned an empty summary"}
        return out["text"], "llm", {"key_points": out.get("key_points") or [], "llm_usage": out.get("usage")}

    def _write(self, row: dict) -> None:
        future = self.store.turns.submit(row)
        future.add_done_callback(lambda f: f.exception() and log.error(
            "turns: writing turn %s of session %s failed: %s", row["turn"], row["session_id"], f.exception()))
