"""What a profile does to a running session, as a few hook calls from the runner
(runtime/session/agent.py), so the runner itself knows nothing of profiles.

Everything comes from ``config.profile`` (resolved when the session was
created, profiles/resolve.py): the file is never read again, so editing it
changes no running session.

- :meth:`SessionHooks.system_prompt`: the prompt segments, rendered for the
  step about to run (StepContext.system_prompt; the ``baml`` moniker sends it
  as the system message).
- :meth:`SessionHooks.before_step`: holds a session that waits for input
  (``waiting`` reason ``user`` or ``idle``) until an item that ends the wait
  is in its inbox, then runs the before_step observers once per iteration.
- :meth:`SessionHooks.after_step`: runs the after_step observers and the flow
  decider on the step's frame_out *before* the step row is written, so the
  row records what they decided (``observers`` column); :meth:`apply` then
  carries it out in memory, and the snapshot save that follows makes it
  durable.  Should the worker die between the two, :func:`caught_up` (called
  when a snapshot is reconciled with its newest step) applies the row's
  record again: notes are queued under fixed ids, so never twice.

What a profile counts across steps (steps in a row without tool calls, the
``once`` observers that fired) is in each record too (``counters``), and
:meth:`SessionHooks.restore` reads it back from the session's newest step
when a session is loaded, so a restart or a takeover does not reset it.
"""
import logging
from datetime import datetime, timezone

from pydantic import TypeAdapter

from profiles import flow
from profiles.conditions import Facts
from profiles.model import FlowRule, Observer, Segment
from profiles.observers import evaluate
from profiles.template import render

log = logging.getLogger("profiles.hooks")

USER_KINDS = frozenset({"guidance", "message"})
WAIT_REASONS = {"user": USER_KINDS, "idle": None}  # reason -> inbox kinds that end the wait (None: any)
_OBSERVERS = TypeAdapter(list[Observer])
_FLOW = TypeAdapter(list[FlowRule])
_PROMPT = TypeAdapter(list[Segment])


def _kind(item: dict) -> str:
    return item.get("kind") or "guidance"


class SessionHooks:
    """The profile's per-step behaviour for one session; a session without a
    profile gets one that does nothing."""

    def __init__(self, record: dict | None):
        record = record if isinstance(record, dict) else {}
        self.name = record.get("name")
        self.prompt = _PROMPT.validate_python(record.get("prompt") or [])
        observers = _OBSERVERS.validate_python(record.get("observers") or [])
        self.before = [o for o in observers if o.when == "before_step"]
        self.after = [o for o in observers if o.when == "after_step"]
        self.flow = _FLOW.validate_python(record.get("flow") or [])
        self.inbox_priorities = dict(record.get("inbox_priorities") or {}) or None
        self.steps_without_tools = 0  # and _fired_once: kept in each step's record, read back by restore()
        self._restored = False
        self._before_done: int | None = None  # the iteration whose before_step observers ran
        self._before_record: list[dict] = []
        self._fired_once: set[str] = set()

    @classmethod
    def for_config(cls, config) -> "SessionHooks":
        try:
            return cls(getattr(config, "profile", None))
        except Exception as exc:  # a stored record that no longer validates: run without it, say so
            log.error("session profile record unusable (%s); running without profile hooks", exc)
            return cls(None)

    @property
    def active(self) -> bool:
        return bool(self.before or self.after or self.flow)

    # ---- the prompt -----------------------------------------------------

    def fields(self, agent, iteration: int) -> dict:
        now = datetime.now(timezone.utc)
        return {"task": agent.task_text, "date": now.date().isoformat(),
                "datetime": now.replace(microsecond=0).isoformat().replace("+00:00", "Z"),
                "agent_name": agent.extra.get("name") or agent.agent_id, "agent_id": agent.agent_id,
                "session_id": agent.session_id, "profile": self.name, "iteration": iteration,
                "tools": ", ".join(agent.config.tools or []) or "none"}

    def system_prompt(self, agent, iteration: int) -> str | None:
        if not self.prompt:
            return None
        values = self.fields(agent, iteration)
        parts = [s.text if s.text is not None else render(s.template, values) for s in self.prompt]
        return "\n\n".join(p for p in parts if p)

    # ---- before a step ----------------------------------------------------

    async def restore(self, agent) -> None:
        """Once per loaded session: the counters of its newest step's record
        (nothing to read for a new session or one without observers or flow)."""
        if self._restored:
            return
        self._restored = True
        if not self.active or agent.iteration <= 0:
            return
        step = await agent.persist.step_at(agent.session_id, agent.iteration)
        record = (step or {}).get("observers")
        counters = record.get("counters") if isinstance(record, dict) else None
        if isinstance(counters, dict):
            self.steps_without_tools = int(counters.get("steps_without_tools") or 0)
            self._fired_once = {str(n) for n in counters.get("fired_once") or []}

    async def before_step(self, agent) -> bool:
        """True when no step may run now (the runner loops and checks again)."""
        await self.restore(agent)
        if agent.status == "waiting" and agent.status_reason in WAIT_REASONS:
            await self._hold(agent)
            return True
        iteration = agent.iteration + 1
        if not self.before or self._before_done == iteration:
            return False
        self._before_done = iteration
        facts = Facts(phase="before_step", iteration=iteration, state=agent.state, inbox=agent.peek_guidance(),
                      usage=agent.usage, steps_without_tools=self.steps_without_tools)
        outcomes = [await self._run(o, facts, agent, iteration) for o in self.before]
        self._before_record = [o for o in outcomes if o]
        for o in self._before_record:
            if o.get("action") == "note":
                agent.add_inbox_item(f"observer:{agent.session_id}:{iteration}:{o['name']}", "observer_note",
                                     o["text"], source={"observer": o["name"], "when": "before_step"})
        status = _status_of(self._before_record)
        if status is None:
            return False
        log.info("session %s: observer %s before step %d: %s", agent.session_id, status[2], iteration, status[0])
        if status[0] == "paused":
            agent.request_pause()
        await agent.set_status(status[0], status[1])
        return True

    async def _hold(self, agent) -> None:
        """Wait (woken by every inbox item and control) until an item that ends
        the wait is queued, the session is stopped, or its status changes."""
        while (agent.status == "waiting" and agent.status_reason in WAIT_REASONS
               and not agent.stop_requested and not agent.pause_requested):
            wanted = WAIT_REASONS[agent.status_reason]
            if any(wanted is None or _kind(i) in wanted for i in agent.peek_guidance()):
                await agent.set_status("running", "input")
                return
            await agent.sleep(3600)

    async def _run(self, observer: Observer, facts: Facts, agent, iteration: int) -> dict | None:
        if observer.once and observer.name in self._fired_once:
            return None
        outcome = await evaluate(observer, facts, self.fields(agent, iteration))
        outcome["when"] = facts.phase
        if outcome.get("fired"):
            self._fired_once.add(observer.name)
        return outcome

    # ---- after a step -----------------------------------------------------

    async def after_step(self, agent, iteration: int, out, calls: list[dict]) -> dict | None:
        """The record for the step row: the observers' outcomes (before and after)
        and the flow decision; None for a session whose profile has none."""
        before, self._before_record = self._before_record, []
        if not self.active:
            return None
        await self.restore(agent)
        self.steps_without_tools = 0 if calls else self.steps_without_tools + 1
        facts = Facts(phase="after_step", iteration=iteration, state=out.state, inbox=agent.peek_guidance(),
                      usage=agent.usage, steps_without_tools=self.steps_without_tools, text=out.text,
                      done=out.done, tool_calls=calls, out=out)
        after = [o for o in [await self._run(o, facts, agent, iteration) for o in self.after] if o]
        record = {"before": before, "after": after, "flow": None,
                  "counters": {"steps_without_tools": self.steps_without_tools,
                               "fired_once": sorted(self._fired_once)}}
        if not calls and not out.done and self.flow:
            facts.phase = "flow"
            decision, rule = flow.decide(self.flow, facts)
            record["flow"] = {"decision": decision, "rule": rule}
        for o in after:
            if o.get("action") == "note":
                o["id"] = f"observer:{agent.session_id}:{iteration}:{o['name']}:after"
        return record

    def apply(self, agent, record: dict | None, iteration: int) -> None:
        """Carry out an after_step record in memory (the caller saves the snapshot)."""
        if not record or agent.finished:
            return
        for o in record.get("after") or []:
            if o.get("action") == "note":
                agent.add_inbox_item(o["id"], "observer_note", o.get("text"),
                                     source={"observer": o["name"], "when": "after_step", "iteration": iteration})
        status = _status_of(record.get("after") or [], record.get("flow"))
        if status is None or agent.stop_requested or agent.status != "running":
            return
        log.info("session %s: after step %d, %s -> %s (%s)", agent.session_id, iteration, status[2], status[0],
                 status[1])
        if status[0] == "paused":
            agent.request_pause()
        agent.note_status(status[0], status[1])


def _status_of(outcomes: list[dict], flow_record: dict | None = None) -> tuple[str, str, str] | None:
    """The status the outcomes call for, strongest first: stop, pause, then
    waiting for the user (ask_user, flow wait_user), then end of turn."""
    fired = {o["action"]: o["name"] for o in outcomes if o.get("fired")}
    decision = (flow_record or {}).get("decision")
    if "stop" in fired:
        return "stopped", "observer", f"observer {fired['stop']}"
    if "pause" in fired:
        return "paused", "observer", f"observer {fired['pause']}"
    if "ask_user" in fired:
        return "waiting", "user", f"observer {fired['ask_user']}"
    if decision == "wait_user":
        return "waiting", "user", "flow rule"
    if decision == "end_turn":
        return "waiting", "idle", "flow rule"
    return None


def caught_up(snapshot: dict, step: dict) -> dict:
    """Reconcile: a snapshot caught up from ``step`` (saved before its worker
    died) gets what the step's ``observers`` record decided."""
    record = step.get("observers")
    if not isinstance(record, dict) or snapshot.get("status") != "running":
        return snapshot
    snapshot = dict(snapshot)
    pending = list(snapshot.get("pending_guidance") or [])
    known = {g.get("action_id") for g in pending} | set(snapshot.get("used_guidance") or [])
    for o in record.get("after") or []:
        if o.get("action") == "note" and o.get("id") and o["id"] not in known:
            pending.append({"action_id": o["id"], "kind": "observer_note", "text": o.get("text"),
                            "source": {"observer": o["name"], "when": "after_step",
                                       "iteration": step["iteration"]}})
    snapshot["pending_guidance"] = pending
    status = _status_of(record.get("after") or [], record.get("flow"))
    if status is not None:
        snapshot.update(status=status[0], status_reason=status[1])
    return snapshot
