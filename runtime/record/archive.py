"""The archive: a summary row for every finished session and every
conversation that has gone quiet, so a finished session or an old thread
can be read (and searched) without replaying its every step.

- When a session's snapshot is saved with a finished status (done, stopped,
  error), :class:`Archiver` (an observer) *schedules* its summary in the
  background and returns: a summary never delays a step or a control.
- Every ``every_s`` a sweep catches up on finished sessions that have no
  summary yet (this worker crashed before writing it), and summarises
  conversations whose last message is older than ``quiet_s`` (default 30
  minutes) and newer than what their summary covers.
- A session that thinks with an LLM (the ``baml`` moniker) is summarised by
  that LLM (BAML ``SummarizeRecord``, its own ``llm`` settings); anything else,
  or an LLM that fails, gets an *extractive* summary: the task, counts, the
  first and last outputs.  ``method`` says which, and a failed LLM call is
  noted in ``data.llm_error``.

Summaries are upserted by id, so doing one twice (two workers, a retry)
leaves one row.  Retention (runtime/worker/monitor.py) calls :meth:`ensure_sessions`
before it removes old sessions, when it keeps their summaries.
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Awaitable, Callable

from domain.statuses import SESSION_FINISHED
from runtime.base.aio import BackgroundWork, every
from store.codec import parse_time

if TYPE_CHECKING:
    from store import Store

log = logging.getLogger("runtime.archive")

TRANSCRIPT_STEPS = 40
TRANSCRIPT_MESSAGES = 60
TRANSCRIPT_CHARS = 8000
TEXT_CHARS = 500
FIRST_CATCH_UP = timedelta(days=7)
SCHEDULED_KEPT = 10_000


def clip(text, limit: int = TEXT_CHARS) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


LlmSummary = Callable[[dict, str, str, str], Awaitable[dict]]  # (config, kind, task, transcript) -> summary


async def llm_summary(config: dict, kind: str, task: str, transcript: str) -> dict:
    from monikers.baml_summary import summarize
    return await summarize(config, kind=kind, task=task, transcript=transcript)


class Archiver:
    def __init__(self, store: Store, *, worker_id: str | None = None, quiet_s: float = 1800.0, every_s: float = 30.0,
                 llm: LlmSummary = llm_summary, llm_monikers=("baml",), concurrency: int = 2):
        self.store = store
        self.worker_id = worker_id
        self.quiet_s = quiet_s
        self.every_s = every_s
        self.llm = llm
        self.llm_monikers = set(llm_monikers)
        self._background = BackgroundWork("archive: a summary", concurrency)
        # session_id -> (iteration, status) last summarised; the newest SCHEDULED_KEPT only
        self._scheduled: OrderedDict[str, tuple] = OrderedDict()
        now = datetime.now(timezone.utc)
        self._sessions_since = now - FIRST_CATCH_UP
        self._quiet_after = now - FIRST_CATCH_UP

    # ---- observer -----------------------------------------------------------

    async def snapshot_saved(self, snapshot: dict) -> None:
        if snapshot.get("status") not in SESSION_FINISHED:
            return
        key = (snapshot.get("iteration"), snapshot.get("status"))
        if self._scheduled.get(snapshot["session_id"]) == key:
            return
        self._scheduled[snapshot["session_id"]] = key
        self._scheduled.move_to_end(snapshot["session_id"])
        while len(self._scheduled) > SCHEDULED_KEPT:
            self._scheduled.popitem(last=False)
        self._background.spawn(self.summarize_session(dict(snapshot)), name=f"summary:{snapshot['session_id']}")

    async def close(self) -> None:
        await self._background.close()

    # ---- sweep --------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        await every(stopping, self.every_s, self.sweep, "archive sweep")

    async def sweep(self) -> None:
        await self._catch_up_sessions()
        await self._quiet_conversations()

    async def _catch_up_sessions(self) -> None:
        since = self._sessions_since
        finished = await asyncio.to_thread(self.store.states.finished_since, since)
        mine = [s for s in finished if s.get("owner") in (None, self.worker_id)]
        have = await asyncio.to_thread(self.store.summaries.existing, [s["session_id"] for s in mine])
        for snapshot in mine:
            if snapshot["session_id"] not in have:
                await self.snapshot_saved(snapshot)
        if finished and finished[-1].get("status_changed_at"):  # oldest first: move past what was read
            self._sessions_since = max(self._sessions_since, _parse(finished[-1]["status_changed_at"]))

    async def _quiet_conversations(self) -> None:
        quiet_before = datetime.now(timezone.utc) - timedelta(seconds=self.quiet_s)
        if quiet_before <= self._quiet_after:
            return
        candidates = await asyncio.to_thread(self.store.conversations.active_between, self._quiet_after, quiet_before)
        for conversation_id in sorted(candidates):
            await self._background.run(self.summarize_conversation(conversation_id, quiet_before))
        self._quiet_after = quiet_before - timedelta(seconds=1)

    # ---- sessions -----------------------------------------------------------

    async def ensure_sessions(self, snapshots: list[dict]) -> None:
        """Summaries for these sessions now, where missing (before retention removes their steps)."""
        have = await asyncio.to_thread(self.store.summaries.existing, [s["session_id"] for s in snapshots])
        for snapshot in snapshots:
            if snapshot["session_id"] not in have:
                full = await asyncio.to_thread(self.store.states.get, snapshot["session_id"])
                if full:
                    await self._background.run(self.summarize_session(full))

    async def summarize_session(self, snapshot: dict) -> dict:
        session_id = snapshot["session_id"]
        last = snapshot.get("iteration", -1)
        first_iteration = (snapshot.get("forked_from") or {}).get("iteration", -1) + 1
        steps = await asyncio.to_thread(self.store.steps.search, session_id=session_id,
                                        min_iteration=max(first_iteration, last - TRANSCRIPT_STEPS + 1), limit=1000)
        first = await asyncio.to_thread(self.store.steps.search, session_id=session_id, limit=1)
        count = await asyncio.to_thread(self.store.steps.count, session_id)
        data = {"steps": count, "status_reason": snapshot.get("status_reason"),
                "errors": sum(1 for s in steps if s.get("status") == "error"),
                "usage": snapshot.get("usage"), "forked_from": snapshot.get("forked_from")}
        row = {"kind": "session", "agent_id": snapshot["agent_id"], "session_id": session_id,
               "conversation_id": snapshot.get("conversation_id"), "moniker": snapshot.get("moniker"),
               "status": snapshot.get("status"), "first_iteration": first[0]["iteration"] if first else None,
               "last_iteration": last if last >= 0 else None, "method": "extractive"}
        text = None
        if snapshot.get("moniker") in self.llm_monikers and steps:
            text = await self._ask_llm(snapshot.get("config") or {}, "session", snapshot.get("task") or "",
                                       session_transcript(steps), data)
        if text is None:
            text = _extractive_session(snapshot, first[0] if first else None, steps, count)
        else:
            row["method"] = "llm"
        row.update(text=text, data=data)
        await asyncio.wrap_future(self.store.summaries.submit(row))
        log.info("archive: session %s summarised (%s, %d steps) agent=%s", session_id, row["method"], count,
                 snapshot["agent_id"])
        return row

    async def _ask_llm(self, config: dict, kind: str, task: str, transcript: str, data: dict) -> str | None:
        try:
            out = await self.llm(config, kind, task, transcript)
        except Exception as exc:
            data["llm_error"] = clip(f"{type(exc).__name__}: {exc}", 300)
            log.warning("archive: LLM summary failed, writing an extractive one: %s", data["llm_error"])
            return None
        if not out.get("text"):
            data["llm_error"] = "the model returned an empty summary"
            return None
        data["key_points"], data["llm_usage"] = out.get("key_points") or [], out.get("usage")
        points = "".join(f"\n- {p}" for p in data["key_points"])
        return out["text"] + points

    # ---- conversations ------------------------------------------------------

    async def summarize_conversation(self, conversation_id: str, quiet_before: datetime) -> dict | None:
        messages = await asyncio.to_thread(self.store.conversations.last_messages, conversation_id,
                                           TRANSCRIPT_MESSAGES)
        if not messages or _parse(messages[-1]["created_at"]) >= quiet_before:
            return None  # empty, or not quiet (yet)
        existing = await asyncio.to_thread(self.store.summaries.for_conversation, conversation_id)
        if existing and existing.get("last_message_id") == messages[-1]["message_id"]:
            return None  # nothing new since its summary
        thread = await asyncio.to_thread(self.store.conversations.get, conversation_id) or {}
        count = await asyncio.to_thread(self.store.conversations.count_messages, conversation_id)
        senders = sorted({m.get("user_id") or m.get("agent_id") or m.get("sender_type") for m in messages})
        data = {"messages": count, "senders": senders}
        row = {"kind": "conversation", "conversation_id": conversation_id, "method": "extractive",
               "last_message_id": messages[-1]["message_id"], "status": thread.get("status")}
        config = await self._llm_config_of(conversation_id)
        text = None
        if config is not None:
            text = await self._ask_llm(config, "conversation", thread.get("title") or "",
                                       _conversation_transcript(messages), data)
        if text is None:
            text = _extractive_conversation(thread, messages, count, senders)
        else:
            row["method"] = "llm"
        row.update(text=text, data=data)
        await asyncio.wrap_future(self.store.summaries.submit(row))
        log.info("archive: conversation %s summarised (%s, %d messages)", conversation_id, row["method"], count)
        return row

    async def _llm_config_of(self, conversation_id: str) -> dict | None:
        """The config of a participant session that thinks with an LLM, if any."""
        members = await asyncio.to_thread(self.store.conversations.agent_sessions, conversation_id)
        for member in members:
            snapshot = await asyncio.to_thread(self.store.states.get, member["session_id"])
            if snapshot and snapshot.get("moniker") in self.llm_monikers:
                return snapshot.get("config") or {}
        return None


def session_transcript(steps: list[dict]) -> str:
    lines = []
    for step in steps:
        for g in step.get("guidance") or []:
            if isinstance(g, dict) and g.get("text"):
                lines.append(f"[guidance] {clip(g['text'], 400)}")
        body = step.get("text") or (f"ERROR: {step.get('error')}" if step.get("error") else "")
        lines.append(f"#{step['iteration']} {clip(body, 600)}")
    return "\n".join(lines)[-TRANSCRIPT_CHARS:]


def _conversation_transcript(messages: list[dict]) -> str:
    lines = [f"{m.get('user_id') or m.get('agent_id') or m.get('sender_type')}: {clip(m.get('text'), 600)}"
             for m in messages]
    return "\n".join(lines)[-TRANSCRIPT_CHARS:]


def _extractive_session(snapshot: dict, first: dict | None, steps: list[dict], count: int) -> str:
    status = snapshot.get("status")
    reason = snapshot.get("status_reason")
    parts = [f"Task: {clip(snapshot.get('task') or '(none)', 300)}.",
             f"{snapshot.get('moniker')} session, {count} step{'s' if count != 1 else ''}, ended {status}"
             + (f" ({reason})." if reason else ".")]
    if first and first.get("text"):
        parts.append(f"First output: {clip(first['text'])}")
    texts = [s for s in steps if s.get("text")]
    if texts and (not first or texts[-1]["id"] != first["id"]):
        parts.append(f"Last output (step {texts[-1]['iteration']}): {clip(texts[-1]['text'])}")
    if snapshot.get("last_error"):
        parts.append(f"Last error: {clip(snapshot['last_error'], 300)}")
    return "\n".join(parts)


def _extractive_conversation(thread: dict, messages: list[dict], count: int, senders: list[str]) -> str:
    parts = [f"Conversation {clip(thread.get('title') or '(untitled)', 200)}: {count} messages from "
             f"{', '.join(str(s) for s in senders)}.",
             f"First: {clip(messages[0].get('text'))}"]
    if len(messages) > 1:
        parts.append(f"Last: {clip(messages[-1].get('text'))}")
    return "\n".join(parts)


def _parse(value) -> datetime:
    if isinstance(value, datetime):
        return value
    return parse_time(str(value))
