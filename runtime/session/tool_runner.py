"""Running the tool calls of a step (StepFrame-v1), durably.

After the runner has persisted a step whose frame_out asked for tools, a
:class:`ToolPhase` takes the step's calls through their rows in ``tool_calls``:

1. **Plan.**  Each call gets a status: ``pending`` when it may run;
   ``waiting_approval`` when the tool (or the session's ``approve`` list) wants
   a human's yes; ``waiting_result`` for an external tool; or straight
   ``denied`` (not in the session's ``tools``) / ``failed`` (unknown tool, args
   that fail its schema or are too large), with a message that tells the model
   what was wrong.  In a session that reuses tool results (config
   ``reuse_tool_results``, on by default for the ``baml`` moniker), a call
   identical (name and canonical JSON args) to one that ended ``success`` in
   its last :data:`REUSE_WINDOW` steps is not run again: it ends ``success``
   at once, its result the earlier one with a note naming the earlier call
   (:data:`REUSED`; issue 39: a small model called the same tool every step,
   46 times in one run).  Only a call that would run at once is reused, and
   only of a ``reusable`` tool: approvals, humans, ``wait`` and sub-agents
   always happen.  Every row but a ``pending`` one is written (durable)
   before any tool starts.
2. **Run.**  Pending calls start concurrently, at most ``tool_concurrency`` at
   once.  A tool that is not ``idempotent`` has its row written ``running``
   (durable) before it starts, so a call whose row is missing or still
   ``pending`` after a crash certainly never ran.  A tool that raises or runs
   past its timeout ends ``failed``; nothing a tool does can end the session.
   Results over the cap are truncated with a note.
3. **Wait.**  While calls wait for approval or a result, the session's status
   is ``waiting`` (reason ``approval`` or ``tool_result``) and no step runs.
   Approve / deny / result arrive as actions (runtime/dispatch/tool_controls.py), which
   write the row first and then hand it to the phase.
4. **End.**  Each call's ended row is durable before the phase ends (or, with
   ``behind``, commits alongside the next step's row, below); the results (in
   call order) become the next frame_in's ``tool_results``.

Crash safety: the step row lists its calls (with ids and ``created_at``), so a
phase can always be rebuilt from it and the rows (:meth:`ToolPhase.recover`):
a call with no row is planned again, as it was the first time.  A row found
``running`` was interrupted by a dying worker: an ``idempotent`` tool runs
again; any other ends ``unknown`` and the model is told to check before
repeating it.  Destroy stops waiting at once and cancels running tools after
its grace period (rows end ``failed``, ``cancelled``), and ends the calls of a
step that came in as it stopped, which have no row yet
(:meth:`ToolRunner.end_unended`); a shutdown cancels them
too but leaves their rows ``running``, so a restart treats them as interrupted.

Why a step with a quick tool call costs about what a plain step does, not
four commits in a row (step row, then pending, running and ended rows, each a
LanceDB commit the next move waited for):

- A ``pending`` row is not written when its call starts at once: the step row
  already says the call exists, and recovery plans a missing row exactly as a
  pending one, so the row would add a wait and no fact.  A call that must wait
  for a tool slot gets its ``pending`` row written, so readers see it.
- An ``idempotent`` tool starts without a durable ``running`` row: recovery
  runs it again whether its row says ``running``, ``pending`` or nothing.  For
  readers (the API, the dashboard) its ``running`` row is written, behind,
  once it has run for :data:`RUNNING_ROW_AFTER_S`; a no-op ends long before.
- A call's first row is *appended*, not upserted: LanceDB's merge_insert joins
  on the key and costs about twice an append, more as the table grows.  An
  append is fenced like a step row (runtime/base/persistence.py), so a worker that
  lost the session cannot add a second row for a call its new owner re-ran.
- With ``behind`` (what runtime/session/agent.py asks for), a call's ended row is
  not waited for: the phase returns the results as soon as every call has
  ended, and the ended rows commit while the next step's row does (two
  tables, two committer threads).  That is safe because the next step row
  records what the rows would say: its ``inputs.tool_results`` holds every
  call's status, result and error, in call order.  The session keeps two
  rules (``SessionAgent.tool_rows_landed``): (1) nothing else that says the
  tool step is over (a snapshot, an error step, the step after next) is
  written before :meth:`ToolPhase.landed`; so (2) after a crash only the
  newest step's results can be missing from their rows, and adoption calls
  :meth:`ToolRunner.settle_after_restart`, which writes them from that step's
  inputs.  A crash before the next step row landed is the ordinary case: the
  phase is rebuilt from whatever rows landed.

The observers (live events, metrics) hear of every status, in order: of a
written row once it is durable; of ``pending`` and of an idempotent call's
``running``, which recovery would reach again from the step row, when the
call takes that status.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from domain.statuses import TOOL_CALL_ENDED, TOOL_CALL_WAITING
from runtime.base.fanout import Observers
from runtime.base.fence import SessionLost
from runtime.base.persistence import Persistence
from tools import args_check
from tools.tool_registry import Deferred, ToolContext, ToolRegistry
from store.codec import parse_time

if TYPE_CHECKING:
    from runtime.session.view import AgentView

log = logging.getLogger("runtime.tools")

MAX_RESULT_BYTES = 64 * 1024
CANCEL_GRACE_S = 2.0
RUNNING_ROW_AFTER_S = 0.2  # an idempotent tool running this long gets its ``running`` row written (for readers)
UNKNOWN_OUTCOME = ("outcome unknown: the worker running this tool stopped before it finished; "
                   "check whether it took effect before repeating it")
CANCELLED = "cancelled: the session was destroyed while this call was {status}"
REUSE_WINDOW = 50  # steps looked back for an identical answered call: a loop is recent, and the read stays small
REUSED = ("already answered: the same call ({call_id}, step {iteration}) ended success in this session, so it "
          "was not run again; this is its result. Use it; do not make this call again.")


def call_key(name: str, args) -> str:
    """A call's identity for reuse: its name and its args as canonical JSON
    (monikers/memory.py keeps the same key for the moniker's side)."""
    return name + " " + json.dumps(_plain(args or {}), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                   default=str)


def _plain(value):
    """Numbers by value: 2.0 and 2 are the same argument."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def now() -> datetime:
    return datetime.now(timezone.utc)


def capped_result(value):
    """A result as stored and shown to the model: JSON-able, at most MAX_RESULT_BYTES.
    A larger one is truncated with a note, never dropped."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    value = json.loads(text)
    if len(text.encode()) <= MAX_RESULT_BYTES:
        return value
    cut = text.encode()[:MAX_RESULT_BYTES - 1024].decode(errors="ignore")
    return {"truncated": True, "original_bytes": len(text.encode()), "text": cut,
            "note": f"result truncated to its first {len(cut.encode())} of {len(text.encode())} bytes "
                    f"(cap {MAX_RESULT_BYTES})"}


def result_of(row: dict) -> dict:
    """The StepFrame-v1 ``tool_results`` entry of an ended row.  A replayed
    call shows the model the recorded outcome, as the recording's step saw it;
    a call whose args a person edited before approving shows the args it ran
    with, so the model is not misled about what was done."""
    status = row.get("replayed_status") or row["status"] if row["status"] == "replayed" else row["status"]
    out = {"id": row.get("call_id") or row["id"], "name": row["name"], "status": status}
    if status == "success":
        out["result"] = row.get("result")
    if row.get("error"):
        out["error"] = row["error"]
    if row.get("original_args") is not None:  # a person changed the args before approving: say what ran
        out["args"] = row.get("args")
    return out


def _deferred(result) -> bool:
    return isinstance(result, Deferred)


class ToolRunner:
    """Service-wide: which tools exist, where rows go, who hears of them."""

    def __init__(self, registry: ToolRegistry, persist: Persistence, observers: Observers | None = None):
        self.registry = registry
        self.persist = persist
        self.observers = observers or Observers()

    async def write(self, rows: list[dict], new: bool = False) -> None:
        """Make rows durable, then tell the observers (live events, metrics).
        ``new``: no row of these calls was written before (they are appended)."""
        if not rows:
            return
        rows = [dict(r, updated_at=now()) for r in rows]  # live events carry it: the newest row per id wins
        await self.persist.save_tool_calls(rows, new=new)
        await self.announce(rows)

    async def announce(self, rows: list[dict]) -> None:
        """Tell the observers of rows' new status (after writing them, or for a
        status not written, see the module docstring)."""
        for row in rows:
            await self.observers.notify("tool_call_updated", dict(row, updated_at=row.get("updated_at") or now()))

    def allowed(self, config) -> list[dict]:
        """The descriptions of the tools a session may call and that are
        installed, for StepContext.tools (a moniker shows them to its model)."""
        return [self.registry.get(n).describe() for n in (config.tools or []) if n in self.registry]

    # ---- planning -------------------------------------------------------

    def plan(self, agent: AgentView, iteration: int, calls: list[dict], created_at=None,
             answered: dict[str, dict] | None = None) -> list[dict]:
        """Rows for a step's calls (``[{id, call_id, name, args}]`` as on the
        step row), each with the status it starts in.  ``created_at``: the step
        row's, so a call planned again after a crash keeps its time (the
        ``wait`` tool counts from it).  ``answered``: the session's earlier
        calls that ended ``success``, by :func:`call_key` (:meth:`answered`);
        an allowed call identical to one of them ends ``success`` with its
        result, not run again."""
        rows = []
        for seq, call in enumerate(calls):
            row = _blank_row(agent, iteration, seq, call, created_at)
            status, error = self.initial_status(agent.config, call["name"], row["args"])
            earlier = (answered or {}).get(call_key(row["name"], row["args"]))
            if earlier is not None and status == "pending" and self.registry.get(call["name"]).reusable:
                status, error = "success", None
                row["result"] = {"reused_from": earlier["id"], "note": REUSED.format(
                    call_id=earlier["id"], iteration=earlier["iteration"]), "result": earlier["result"]}
            row.update(status=status, error=error)
            if status in TOOL_CALL_ENDED:
                row["finished_at"] = row["created_at"]
            rows.append(row)
        return rows

    async def answered(self, agent: AgentView, iteration: int, inputs: dict | None) -> dict[str, dict]:
        """The calls of this session's last :data:`REUSE_WINDOW` steps before
        ``iteration`` that ended ``success``, by :func:`call_key`: the first of
        each (a reused call's row points at it), as ``{id, iteration, result}``.  The previous step's
        ended rows may still be committing (they are written behind this
        step's row, see the module docstring), so its results are taken from
        this step's ``inputs.tool_results``, which records them in call order."""
        if iteration <= 0:
            return {}
        rows = await self.persist.tool_calls_of_steps(agent.session_id, max(iteration - REUSE_WINDOW, 0),
                                                      iteration - 1)
        found: dict[str, dict] = {}
        for row in rows:
            if row["status"] == "success" and not _reused(row["result"]):
                found.setdefault(call_key(row["name"], row["args"]),
                                 {"id": row["id"], "iteration": row["iteration"], "result": row["result"]})
        results = (inputs or {}).get("tool_results") or []
        seen = {r["id"] for r in rows}
        if results and any(r.get("id") not in seen for r in results):
            before = await self.persist.step_at(agent.session_id, iteration - 1)
            calls = (before or {}).get("tool_calls") or []
            if len(calls) == len(results):
                for call, result in zip(calls, results):
                    if result.get("status") == "success" and not _reused(result.get("result")):
                        found.setdefault(call_key(call["name"], call.get("args")),
                                         {"id": call["id"], "iteration": iteration - 1,
                                          "result": result.get("result")})
        return found

    async def settle_after_restart(self, agent: AgentView, newer_steps: list[dict]) -> list[dict]:
        """On adoption: when the newest step (persisted past the snapshot)
        consumed tool results, the ended rows of the step before it, written
        behind it, may not have landed (runtime/session/agent.py ``tool_rows_landed``
        says why only that step's).  Writes the missing ones; returns them."""
        newest = newer_steps[-1] if newer_steps else None
        if newest is None or not (newest.get("inputs") or {}).get("tool_results"):
            return []
        before = next((s for s in newer_steps if s["iteration"] == newest["iteration"] - 1), None)
        if before is None:
            before = await self.persist.step_at(agent.session_id, newest["iteration"] - 1)
        if before is None:
            return []
        return await self.settle_from_next(agent, before, newest)

    async def settle_from_next(self, agent: AgentView, step: dict, next_step: dict) -> list[dict]:
        """After a crash: ``next_step`` consumed the results of ``step``'s calls
        but their ended rows, written behind it, may not have landed.  Write
        each call's ended row that is missing from its result there (status,
        result, error; in call order).  Returns the rows written."""
        calls = step.get("tool_calls") or []
        results = (next_step.get("inputs") or {}).get("tool_results") or []
        if not calls or len(results) != len(calls):
            return []  # not the step that consumed these calls
        stored = {r["id"]: r for r in await self.persist.tool_calls_of_step(agent.session_id, step["iteration"])}
        rows = []
        for seq, (call, result) in enumerate(zip(calls, results)):
            row = stored.get(call["id"]) or _blank_row(agent, step["iteration"], seq, call, step.get("created_at"))
            if row["status"] not in TOOL_CALL_ENDED:
                rows.append(dict(row, status=result["status"], result=result.get("result"),
                                 error=result.get("error"), finished_at=row.get("finished_at") or now()))
        await self.write([r for r in rows if r["id"] in stored])
        await self.write([r for r in rows if r["id"] not in stored], new=True)
        if rows:
            log.warning("session %s: %d ended tool call rows of step %d had not landed; written from step %d",
                        agent.session_id, len(rows), step["iteration"], next_step["iteration"])
        return rows

    async def end_unended(self, agent: AgentView, step: dict) -> list[dict]:
        """Destroy: every call of ``step`` that has not ended, ends now, and one
        that never got a row gets one, so no row is left waiting, running or
        missing.  A non-idempotent call a dead worker left ``running`` may have
        taken effect: ``unknown``; any other ``failed`` (cancelled).  Returns the
        rows written."""
        calls = step.get("tool_calls") or []
        if not calls:
            return []
        stored = {r["id"]: r for r in await self.persist.tool_calls_of_step(agent.session_id, step["iteration"])}
        rows = []
        for seq, call in enumerate(calls):
            row = stored.get(call["id"]) or _blank_row(agent, step["iteration"], seq, call, step.get("created_at"))
            if row["status"] in TOOL_CALL_ENDED:
                continue
            tool = self.registry.get(row["name"]) if row["name"] in self.registry else None
            if row["status"] == "running" and not (tool is not None and tool.idempotent):
                rows.append(dict(row, status="unknown", error=UNKNOWN_OUTCOME, finished_at=now()))
            else:
                rows.append(dict(row, status="failed", error=CANCELLED.format(
                    status=row["status"] if row["id"] in stored else "not started"), finished_at=now()))
        await self.write([r for r in rows if r["id"] in stored])
        await self.write([r for r in rows if r["id"] not in stored], new=True)
        if rows:
            log.info("session %s destroyed: %d calls of step %d ended", agent.session_id, len(rows),
                     step["iteration"])
        return rows

    def initial_status(self, config, name: str, args) -> tuple[str, str | None]:
        allowed = list(config.tools or [])
        if name not in allowed:
            return "denied", (f"tool {name!r} is not allowed in this session; "
                              f"allowed tools: {allowed or 'none'}")
        if name not in self.registry:
            usable = [n for n in allowed if n in self.registry]
            return "failed", f"no tool named {name!r} is installed; tools you may call: {usable or 'none'}"
        tool = self.registry.get(name)
        problem = args_check.args_problem(tool, args)
        if problem:
            return "failed", problem
        if tool.needs_approval or name in (config.approve or []):
            return "waiting_approval", None
        if tool.external:
            return "waiting_result", None
        return "pending", None

    # ---- running one call -----------------------------------------------

    async def execute(self, agent: AgentView, row: dict, stored: bool = True,
                      landing: list[asyncio.Future] | None = None) -> dict:
        """Run one pending call to its end; returns the ended row, durable unless
        ``landing`` is given: then its write is started and added there.
        ``stored``: the call has a row in the table already."""
        tool = self.registry.get(row["name"]) if row["name"] in self.registry else None
        row = dict(row, status="running", attempts=int(row.get("attempts") or 0) + 1, started_at=now(),
                   finished_at=None, error=None)
        shown = None
        if tool is not None and tool.idempotent:  # run again after a crash anyway: no wait for a row
            await self.announce([row])
            shown = _RunningRow(self, row, new=not stored)
        else:
            await self.write([row], new=not stored)  # durable before the tool starts: a pending row never ran
            stored = True
        started = time.perf_counter()
        try:
            if tool is None:
                raise LookupError(f"tool {row['name']!r} is no longer installed")
            result = await self._call(tool, agent, row)
            if _deferred(result):  # started; its result is delivered later (tools.tool_registry.Deferred)
                row.update(status="waiting_result", result=capped_result(result.partial))
                await self.write([row], new=not await _written(shown, stored))
                log.info("tool call %s %s waiting_result session=%s", row["id"], row["name"], row["session_id"])
                return row
            row.update(status="success", result=capped_result(result))
        except asyncio.CancelledError:
            if shown is not None:
                shown.drop()
            raise
        except TimeoutError:
            row.update(status="failed", error=f"tool {row['name']!r} timed out after {tool.timeout_s}s")
        except Exception as exc:
            row.update(status="failed", error=f"{type(exc).__name__}: {exc}"[:4000])
        row.update(finished_at=now(), duration_ms=(time.perf_counter() - started) * 1000)
        new = not await _written(shown, stored)
        if landing is None:
            await self.write([row], new=new)
        else:
            landing.append(asyncio.ensure_future(self.write([row], new=new)))
        log.info("tool call %s %s %s in %.1f ms session=%s iteration=%d", row["id"], row["name"], row["status"],
                 row["duration_ms"], row["session_id"], row["iteration"])
        return row

    async def _call(self, tool, agent: AgentView, row: dict):
        args = tool.args_model.model_validate(row["args"]) if tool.args_model is not None else dict(row["args"])
        created = row.get("created_at")
        created = parse_time(created)
        ctx = ToolContext(tool_call_id=row["id"], agent_id=row["agent_id"], session_id=row["session_id"],
                          iteration=row["iteration"], config=agent.config.model_dump(), attempt=row["attempts"],
                          created_at=created)
        if tool.run is None:
            raise RuntimeError(f"tool {tool.name!r} has no function to run")
        task = asyncio.ensure_future(tool.run(args, ctx))
        try:
            done, _ = await asyncio.wait({task}, timeout=tool.timeout_s)
            if not done:
                raise TimeoutError
            return task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=CANCEL_GRACE_S)  # one that ignores cancel is abandoned


class _RunningRow:
    """An idempotent call's ``running`` row, written behind for readers only
    once its tool has run for RUNNING_ROW_AFTER_S (recovery never needs it)."""

    def __init__(self, runner: ToolRunner, row: dict, new: bool):
        self.writing = False
        self.task = asyncio.ensure_future(self._write_later(runner, row, new))

    async def _write_later(self, runner: ToolRunner, row: dict, new: bool) -> None:
        await asyncio.sleep(RUNNING_ROW_AFTER_S)
        self.writing = True
        await runner.persist.save_tool_calls([dict(row, updated_at=now())], new=new)

    async def settle(self) -> bool:
        """Before the call's next write: True when this row was written (the next
        write must then come after it, and replace it)."""
        if not self.writing:
            self.task.cancel()
            return False
        await self.task
        return True

    def drop(self) -> None:
        self.task.cancel()  # a write already submitted still lands: the row then says running, as before


async def _written(shown: _RunningRow | None, stored: bool) -> bool:
    """Whether the call has a row in the table once its running row (if any) settled."""
    written = await shown.settle() if shown is not None else False
    return stored or written


def _reused(result) -> bool:
    return isinstance(result, dict) and "reused_from" in result and "note" in result


def _blank_row(agent: AgentView, iteration: int, seq: int, call: dict, created_at) -> dict:
    """A call's row as planned, before its status is decided."""
    return {"id": call["id"], "created_at": _as_time(created_at) or now(), "agent_id": agent.agent_id,
            "session_id": agent.session_id, "iteration": iteration, "seq": seq, "call_id": call.get("call_id"),
            "name": call["name"], "args": call.get("args") or {}, "status": "pending", "result": None,
            "error": None, "attempts": 0, "started_at": None, "finished_at": None, "duration_ms": None,
            "usage": None, "decided_by": None}


def _as_time(value) -> datetime | None:
    value = parse_time(value)
    return value if isinstance(value, datetime) else None


class ToolPhase:
    """The calls of one step, from their rows to their results."""

    def __init__(self, runner: ToolRunner, agent: AgentView, step: dict, behind: bool = False):
        """``behind``: ended rows are written behind the results (see the module
        docstring for what the session then owes)."""
        self.runner = runner
        self.behind = behind
        self.landing: list[asyncio.Future] = []  # ended rows' writes not waited for (behind)
        self._landed: asyncio.Future | None = None  # landed()'s one wait, shared by all who ask
        self.agent = agent
        self.iteration = step["iteration"]
        self.created_at = step.get("created_at")
        self.calls = list(step.get("tool_calls") or [])
        self.inputs = step.get("inputs") or {}
        self.answered: dict[str, dict] = {}  # the session's earlier answered calls (ToolRunner.answered)
        self.rows: dict[str, dict] = {}
        self.stored: set[str] = set()  # ids of the calls that have a row in the table
        self.delivered: dict[str, dict] = {}  # rows changed by controls before the phase had loaded
        self.changed = asyncio.Event()
        self.tasks: dict[str, asyncio.Task] = {}
        self.loaded = False
        # Set once the loop has started the calls it will run (and when the phase
        # ends): until then a loaded ``pending`` call has no task to wait for.
        self.started = asyncio.Event()

    # ---- controls hand rows over here ------------------------------------

    def row(self, tool_call_id: str) -> dict | None:
        return self.rows.get(tool_call_id) if self.loaded else None

    def deliver(self, row: dict) -> None:
        """A control changed a row (already durable): take it into account."""
        if self.loaded:
            self.rows[row["id"]] = row
        else:
            self.delivered[row["id"]] = row
        self.changed.set()

    async def wait_for_call(self, tool_call_id: str) -> None:
        """Wait until the call's tool, if this phase is running it, has ended
        (its row here is then final).  A call recovered ``pending`` (an
        idempotent one cut short by a crash) is started by the phase's loop, a
        moment after loading: its start is waited for first.  Unwaited, a
        child's outcome ended such a ``spawn_agent`` call while it was being
        started, and the run's ``waiting_result`` landed over the outcome's
        ``success`` (the parent went on with the result; its row waited for good)."""
        row = self.rows.get(tool_call_id)
        if row is not None and row["status"] == "pending" and tool_call_id not in self.tasks:
            await self.started.wait()
        task = self.tasks.get(tool_call_id)
        if task is not None:
            await asyncio.wait({task})

    def waiting_reason(self) -> str | None:
        """approval, else user (a human's answer: ``ask_user``), else tool_result."""
        statuses = {r["status"] for r in self.rows.values()}
        if "waiting_approval" in statuses:
            return "approval"
        reasons = {self._waits_for(r["name"]) for r in self.rows.values() if r["status"] == "waiting_result"}
        if "user" in reasons:
            return "user"
        return "tool_result" if reasons else None

    def _waits_for(self, name: str) -> str:
        registry = self.runner.registry
        return getattr(registry.get(name), "waits_for", "tool_result") if name in registry else "tool_result"

    # ---- the phase --------------------------------------------------------

    async def load(self, fresh: bool) -> None:
        """Rows for the step's calls: planned now (``fresh``: the step was just
        persisted), or read back and recovered after a restart."""
        if self.calls and self.agent.reuses_tool_results:
            self.answered = await self.runner.answered(self.agent, self.iteration, self.inputs)
        if fresh:
            rows = self.runner.plan(self.agent, self.iteration, self.calls, self.created_at, self.answered)
            changed = rows
        else:
            stored = {r["id"]: r for r in await self.runner.persist.tool_calls_of_step(
                self.agent.session_id, self.iteration)}
            self.stored = set(stored)
            rows, changed = self.recover(stored)
        # a replay serves recorded outcomes here (runtime/session/intercept.py)
        rows, changed = await self.agent.intercept.calls_loaded(self.agent, self.iteration, rows, changed, self.stored)
        self.rows = {r["id"]: r for r in rows}
        self.rows.update({k: v for k, v in self.delivered.items() if k in self.rows})
        self.loaded = True
        changed = [self.rows[r["id"]] for r in changed]
        pending = [r for r in changed if r["status"] == "pending"]  # not written: see the module docstring
        await self.runner.write([r for r in changed if r["status"] != "pending" and r["id"] in self.stored])
        await self.runner.write([r for r in changed if r["status"] != "pending" and r["id"] not in self.stored],
                                new=True)
        self.stored |= {r["id"] for r in changed if r["status"] != "pending"}
        await self.runner.announce(pending)
        # e.g. runtime/dispatch/questions.py: post open questions a crash left unposted, arm their timeouts
        await self.runner.observers.notify("tool_phase_loaded", self.agent, list(self.rows.values()))

    def recover(self, stored: dict[str, dict]) -> tuple[list[dict], list[dict]]:
        """The step's rows after a restart: the stored ones, and the calls with no
        row planned again, as the first time (the whole step is planned, so each
        keeps its place, ``seq``, in the step)."""
        planned = {r["id"]: r for r in self.runner.plan(self.agent, self.iteration, self.calls, self.created_at,
                                                        self.answered)
                   if r["id"] not in stored}
        rows, changed = [], list(planned.values())
        for call in self.calls:
            row = stored.get(call["id"]) or planned[call["id"]]
            if row["status"] == "running":
                row = self._interrupted(row)
                changed.append(row)
            rows.append(row)
        return rows, changed

    def _interrupted(self, row: dict) -> dict:
        tool = self.runner.registry.get(row["name"]) if row["name"] in self.runner.registry else None
        if tool is not None and tool.idempotent:
            log.warning("tool call %s (%s) was running when its worker stopped; idempotent, running it again",
                        row["id"], row["name"])
            return dict(row, status="pending")
        log.warning("tool call %s (%s) was running when its worker stopped; outcome unknown", row["id"], row["name"])
        return dict(row, status="unknown", error=UNKNOWN_OUTCOME, finished_at=now())

    async def run(self) -> list[dict] | None:
        """Take every call to its end; the results in call order, or None when
        the session was stopped first."""
        try:
            while True:
                # Cleared before the rows are looked at, not in the wait: a control
                # delivered while this loop awaits (the status save just below)
                # must still wake the wait (cleared there, an approval was missed
                # and its call stayed pending).
                self.changed.clear()
                self._start_pending()
                self.started.set()
                if self.agent.stop_requested:
                    if self._destroyed():
                        await self._cancel_waits()
                    if not self.tasks:  # shutdown: waits stay open, the restart picks them up
                        return None
                await self.agent.reflect_waiting(self.waiting_reason())
                if all(r["status"] in TOOL_CALL_ENDED for r in self.rows.values()):
                    return [result_of(self.rows[c["id"]]) for c in self.calls]
                await self._wait_for_change()
        except asyncio.CancelledError:
            await self._on_cancel()
            raise
        finally:
            self.started.set()

    def close(self) -> None:
        """The phase is over, whether or not it ran: nothing waits on its start."""
        self.started.set()

    async def landed(self) -> None:
        """Wait until the ended rows written behind are durable.  A write that
        failed is tried once more, awaited, as an upsert of every ended row (an
        append that failed after its commit must not add a second row); a lost
        session (runtime/base/fence.py) is not: its new owner writes from now on.
        Several may wait at once (the next step's row and a handler's snapshot
        save): each returns only once the rows have landed, and all see the
        same outcome.  A waiter that is cancelled does not stop the landing."""
        if self._landed is None:
            self._landed = asyncio.ensure_future(self._land())
        await asyncio.shield(self._landed)

    @property
    def has_landed(self) -> bool:
        """Whether :meth:`landed` has finished (its rows landed, or it failed)."""
        return self._landed is not None and self._landed.done()

    async def _land(self) -> None:
        landing, self.landing = self.landing, []
        outcomes = await asyncio.gather(*landing, return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if not failed:
            return
        lost = next((o for o in failed if isinstance(o, SessionLost)), None)
        if lost is not None:
            raise lost
        log.warning("session %s: %d ended tool call rows of step %d failed to land behind (%s); writing them again",
                    self.agent.session_id, len(failed), self.iteration, failed[0])
        await self.runner.write([r for r in self.rows.values() if r["status"] in TOOL_CALL_ENDED])

    def _start_pending(self) -> None:
        for call in self.calls:
            row = self.rows[call["id"]]
            if row["status"] == "pending" and call["id"] not in self.tasks:
                self.tasks[call["id"]] = asyncio.create_task(self._run_one(row), name=f"tool:{row['id']}")

    async def _run_one(self, row: dict) -> None:
        if self.agent.tool_slots.locked() and row["id"] not in self.stored:  # it waits: let readers see it
            await self.runner.write([row], new=True)
            self.stored.add(row["id"])
        async with self.agent.tool_slots:
            ended = await self.runner.execute(self.agent, row, stored=row["id"] in self.stored,
                                              landing=self.landing if self.behind else None)
        self.stored.add(ended["id"])
        self.rows[ended["id"]] = ended

    async def _wait_for_change(self) -> None:
        waiters = {asyncio.ensure_future(self.changed.wait())}
        if not self.agent.stop_requested:  # once stopping, only the running tools are waited for
            waiters.add(asyncio.ensure_future(self.agent.stopped()))
        running = set(self.tasks.values())
        done, _ = await asyncio.wait(waiters | running, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
        for call_id, task in list(self.tasks.items()):
            if task.done():
                del self.tasks[call_id]
                if not task.cancelled() and task.exception() is not None:  # could not even record it
                    raise task.exception()

    def _destroyed(self) -> bool:
        """Destroy asks the runner to stop *and* sets status stopping; a worker
        shutting down only asks it to stop, and the session lives on elsewhere."""
        return self.agent.stop_requested and self.agent.status == "stopping"

    async def _cancel_waits(self) -> None:
        """Destroy: calls that wait (for approval, a result, a slot) will not get one."""
        cancelled = [dict(r, status="failed", error=CANCELLED.format(status=r["status"]), finished_at=now())
                     for r in self.rows.values()
                     if r["status"] in TOOL_CALL_WAITING or (r["status"] == "pending" and r["id"] not in self.tasks)]
        for row in cancelled:
            self.rows[row["id"]] = row
        await self.runner.write(cancelled)

    async def _on_cancel(self) -> None:
        """The runner is cancelled: destroy's grace ran out, or the worker shuts down."""
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_GRACE_S)
        if not self._destroyed():
            return  # shutdown: rows stay running; the restart treats them as interrupted
        ended = [dict(r, status="failed", error=CANCELLED.format(status=r["status"]), finished_at=now())
                 for r in self.rows.values() if r["status"] not in TOOL_CALL_ENDED]
        if ended:
            await asyncio.shield(self.runner.write(ended))
