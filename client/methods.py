"""The client's methods, written once for :class:`~client.sync.Client` and
:class:`~client.aio.AsyncClient`: each builds its request (calls.py), its
pager or its wait, and hands it to the client's own ``send``, ``_pages``,
``_poll`` and ``_then``, the only places where sync and async differ.  In the
async client ``send``, ``_poll`` and ``_then`` are coroutines, so a method
returns what is to be awaited (``await api.session(...)``) and a listing an
async iterator; the return types below are what the sync client returns."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from client import calls, models as m
from client._http import Pager

FINISHED_ACTIONS = ("done", "failed")


class Methods:
    """Every route the clients offer as a method (see the module docstring)."""

    # ---- agents and sessions ------------------------------------------------------------

    def create_agent(self, moniker: str | None = None, task: str | None = None, *, profile: str | None = None,
                     config: dict | None = None, **fields) -> m.Accepted:
        """Queue a create (202): name, agent_id, session_id (idempotent by it), conversation_id, parent_session_id."""
        return self.send(calls.create_agent(m.CreateAgent(moniker=moniker, task=task, profile=profile,
                                                          config=config, **fields)))

    def agent_page(self, *, limit: int = 100, offset: int = 0, status: str | None = None, moniker: str | None = None,
                   q: str | None = None, sort: str | None = None) -> m.AgentList:
        return self.send(calls.agent_page(limit=limit, offset=offset, status=status, moniker=moniker, q=q, sort=sort))

    def agents(self, *, status: str | None = None, moniker: str | None = None, q: str | None = None,
               sort: str | None = None, page_size: int = 100, max_items: int | None = None) -> Iterator[m.Snapshot]:
        """Every agent (its latest session) matching the filters, page by page."""
        return self._pages(Pager(lambda limit, offset: calls.agent_page(
            limit=limit, offset=offset, status=status, moniker=moniker, q=q, sort=sort),
            "agents", m.Snapshot, "agent_id", page_size, max_items=max_items))

    def agent(self, agent_id: str) -> m.Snapshot:
        """The agent's latest session."""
        return self.send(calls.agent(agent_id))

    def session(self, session_id: str) -> m.Snapshot:
        return self.send(calls.session(session_id))

    def sessions(self, agent_id: str, *, page_size: int = 100) -> Iterator[m.Snapshot]:
        return self._pages(Pager(lambda limit, offset: calls.sessions(agent_id, limit=limit, offset=offset),
                                 "sessions", m.Snapshot, "session_id", page_size))

    def steps(self, session_id: str | None = None, *, agent_id: str | None = None, min_iteration: int | None = None,
              max_iteration: int | None = None, status: str | None = None, since: str | None = None,
              page_size: int = 200, max_items: int | None = None) -> Iterator[m.Step]:
        """Steps in iteration order, page by page."""
        return self._pages(Pager(lambda limit, offset: calls.steps(
            session_id=session_id, agent_id=agent_id, min_iteration=min_iteration, max_iteration=max_iteration,
            status=status, since=since, limit=limit, offset=offset), "steps", m.Step, "id", page_size,
            max_items=max_items))

    def last_steps(self, session_id: str, n: int, *, min_iteration: int | None = None,
                   status: str | None = None) -> list[m.Step]:
        """The newest ``n`` steps (≤ 1000), oldest first."""
        return self._then(calls.steps(session_id=session_id, min_iteration=min_iteration, status=status,
                                      limit=n, order="desc"),
                          lambda found: [m.Step.model_validate(row) for row in reversed(found["steps"])])

    def pause(self, agent_id: str, session_id: str | None = None, *, tree: bool | None = None) -> m.Accepted:
        return self.send(calls.control(agent_id, "pause", m.Control(session_id=session_id, tree=tree)))

    def resume(self, agent_id: str, session_id: str | None = None, *, tree: bool | None = None,
               budget_tokens: int | None = None, budget_cost: float | None = None) -> m.Accepted:
        return self.send(calls.control(agent_id, "resume", m.Resume(session_id=session_id, tree=tree,
                                                                    budget_tokens=budget_tokens,
                                                                    budget_cost=budget_cost)))

    def interrupt(self, agent_id: str, guidance: str, session_id: str | None = None, *,
                  tree: bool | None = None) -> m.Accepted:
        return self.send(calls.control(agent_id, "interrupt", m.Interrupt(guidance=guidance, session_id=session_id,
                                                                          tree=tree)))

    def destroy(self, agent_id: str, session_id: str | None = None) -> m.Accepted:
        return self.send(calls.control(agent_id, "destroy", m.Destroy(session_id=session_id)))

    def wait_for_status(self, session_id: str, statuses: str | Iterable[str], timeout: float = 60.0) -> m.Snapshot:
        """Poll the session until its status is one of ``statuses``; WaitTimeout after ``timeout`` s."""
        wanted = {statuses} if isinstance(statuses, str) else set(statuses)
        return self._poll(lambda: self.session(session_id), lambda s: s.status in wanted, timeout,
                          lambda s: f"session {session_id} still {s.status if s else '?'} after {timeout}s")

    # ---- actions ------------------------------------------------------------------------

    def action(self, action_id: str) -> m.Action:
        return self.send(calls.action(action_id))

    def actions(self, *, session_id: str | None = None, agent_id: str | None = None, type: str | None = None,
                status: str | None = None, order: str | None = None, page_size: int = 100,
                max_items: int | None = None) -> Iterator[m.Action]:
        return self._pages(Pager(lambda limit, offset: calls.actions(
            limit=limit, offset=offset, session_id=session_id, agent_id=agent_id, type=type, status=status,
            order=order), "actions", m.Action, "id", page_size, max_items=max_items))

    def wait_action(self, action_id: str, timeout: float = 60.0) -> m.Action:
        """Poll until the action is done or failed (a failed one is returned, not raised: it was applied)."""
        return self._poll(lambda: self.action(action_id), lambda a: a.status in FINISHED_ACTIONS, timeout,
                          lambda a: f"action {action_id} still {a.status if a else '?'} after {timeout}s")

    # ---- tool calls and people ------------------------------------------------------------

    def tool_calls(self, *, session_id: str | None = None, agent_id: str | None = None, name: str | None = None,
                   status: str | None = None, since: str | None = None, page_size: int = 100,
                   max_items: int | None = None) -> Iterator[m.ToolCall]:
        return self._pages(Pager(lambda limit, offset: calls.tool_calls(
            limit=limit, offset=offset, session_id=session_id, agent_id=agent_id, name=name, status=status,
            since=since), "tool_calls", m.ToolCall, "id", page_size, max_items=max_items))

    def tool_call(self, tool_call_id: str) -> m.ToolCall:
        return self.send(calls.tool_call(tool_call_id))

    def approve(self, tool_call_id: str, args: dict | None = None) -> m.ToolCallAccepted:
        """Run the call (with ``args`` instead of the model's, when given)."""
        return self.send(calls.decide(tool_call_id, "approve", m.Approve(args=args).body()))

    def deny(self, tool_call_id: str, reason: str | None = None) -> m.ToolCallAccepted:
        return self.send(calls.decide(tool_call_id, "deny", m.Deny(reason=reason).body()))

    def post_result(self, tool_call_id: str, result: Any = None, *, error: str | None = None) -> m.ToolCallAccepted:
        """An external tool's result (any JSON, null included), or ``error``: why it failed."""
        return self.send(calls.decide(tool_call_id, "result", {"error": error} if error is not None
                                      else {"result": result}))

    def answer(self, session_id: str, text: str, *, tool_call_id: str | None = None,
               user_id: str | None = None) -> m.AnswerAccepted:
        """Answer the session's open ask_user question (its oldest, unless ``tool_call_id``)."""
        return self.send(calls.answer(session_id, m.Answer(text=text, tool_call_id=tool_call_id, user_id=user_id)))

    def waiting_page(self, *, limit: int = 100, offset: int = 0, kind: str | None = None,
                     agent_id: str | None = None, session_id: str | None = None,
                     tool: str | None = None) -> m.WaitingList:
        return self.send(calls.waiting_page(limit=limit, offset=offset, kind=kind, agent_id=agent_id,
                                            session_id=session_id, tool=tool))

    def waiting(self, *, kind: str | None = None, agent_id: str | None = None, session_id: str | None = None,
                tool: str | None = None, page_size: int = 100) -> Iterator[m.WaitingItem]:
        """Everything that waits on a person, oldest first."""
        return self._pages(Pager(lambda limit, offset: calls.waiting_page(
            limit=limit, offset=offset, kind=kind, agent_id=agent_id, session_id=session_id, tool=tool),
            "waiting", m.WaitingItem, "tool_call_id", page_size))

    # ---- conversations ----------------------------------------------------------------------

    def conversation(self, conversation_id: str) -> dict:
        return self.send(calls.conversation(conversation_id))

    def say(self, conversation_id: str, text: str, *, user_id: str | None = None, data: dict | None = None,
            answers: bool | None = None) -> m.Posted:
        return self.send(calls.post_message(conversation_id, m.PostMessage(text=text, user_id=user_id, data=data,
                                                                           answers=answers)))

    # ---- replay, diff, evals -------------------------------------------------------------------

    def replay(self, session_id: str, **overrides) -> m.Accepted:
        """A new session re-running a recorded one: from_iteration, to_iteration, config, profile, moniker,
        tools, session_id (idempotent by it)."""
        return self.send(calls.replay(session_id, m.Replay(**overrides)))

    def diff(self, session_id: str, against: str, *, from_iteration: int | None = None,
             limit: int | None = None) -> m.SessionDiff:
        return self.send(calls.diff(session_id, against, from_iteration=from_iteration, limit=limit))

    def create_evalset(self, name: str, *, session_ids: list[str] | None = None, search: dict | None = None,
                       from_iteration: int | None = None) -> m.EvalSet:
        return self.send(calls.create_evalset(m.CreateEvalSet(name=name, session_ids=session_ids, search=search,
                                                              from_iteration=from_iteration)))

    def evalsets(self, *, limit: int = 100, offset: int = 0) -> m.EvalSetList:
        return self.send(calls.evalsets(limit=limit, offset=offset))

    def evalset(self, evalset_id: str) -> m.EvalSet:
        return self.send(calls.evalset(evalset_id))

    def start_eval_run(self, evalset_id: str, scorers: list[str], **fields) -> m.EvalRun:
        """Replay and score every session of the set: config, profile, moniker, tools, to_iteration,
        concurrency, judge."""
        return self.send(calls.start_eval_run(evalset_id, m.StartEvalRun(scorers=scorers, **fields)))

    def eval_runs(self, evalset_id: str) -> m.EvalRunList:
        return self.send(calls.eval_runs(evalset_id))

    def eval_run(self, run_id: str) -> m.EvalRunDetail:
        return self.send(calls.eval_run(run_id))

    def wait_eval_run(self, run_id: str, timeout: float = 600.0) -> m.EvalRunDetail:
        """Poll until the run is no longer running."""
        return self._poll(lambda: self.eval_run(run_id), lambda r: r.status != "running", timeout,
                          lambda r: f"eval run {run_id} still running after {timeout}s", pause=0.2, most=1.0)

    def whoami(self) -> m.WhoAmI:
        return self.send(calls.whoami())
