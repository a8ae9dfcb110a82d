"""Every route the client calls, as a :class:`~client._http.Call`: written once
for the sync and the async client.  Paths, bodies and answer models only; no I/O."""
from __future__ import annotations

from client import models as m
from client._http import Call, params, seg


# ---- agents and sessions ----------------------------------------------------------

def create_agent(req: m.CreateAgent) -> Call:
    return Call("POST", "/api/agents", body=req.body(), model=m.Accepted, idempotent=True)


def agent_page(*, limit: int, offset: int, status=None, moniker=None, q=None, sort=None) -> Call:
    return Call("GET", "/api/agents", params(limit=limit, offset=offset, status=status, moniker=moniker, q=q,
                                             sort=sort), model=m.AgentList)


def agent(agent_id: str) -> Call:
    return Call("GET", f"/api/agents/{seg(agent_id)}", model=m.Snapshot)


def session(session_id: str) -> Call:
    return Call("GET", f"/api/sessions/{seg(session_id)}", model=m.Snapshot)


def sessions(agent_id: str, *, limit: int, offset: int) -> Call:
    return Call("GET", f"/api/agents/{seg(agent_id)}/sessions", params(limit=limit, offset=offset))


def steps(*, session_id=None, agent_id=None, min_iteration=None, max_iteration=None, since=None, status=None,
          limit: int = 100, offset: int = 0, order=None) -> Call:
    return Call("GET", "/api/agent-steps", params(session_id=session_id, agent_id=agent_id, min_iteration=min_iteration,
                                                  max_iteration=max_iteration, since=since, status=status,
                                                  limit=limit, offset=offset, order=order))


def control(agent_id: str, verb: str, req: m.Request) -> Call:
    """pause, resume, interrupt, destroy: one action, queued for the session's next step boundary."""
    return Call("POST", f"/api/agents/{seg(agent_id)}/{verb}", body=req.body(), model=m.Accepted, idempotent=True)


def action(action_id: str) -> Call:
    return Call("GET", f"/api/actions/{seg(action_id)}", model=m.Action)


def actions(*, limit: int, offset: int, **filters) -> Call:
    return Call("GET", "/api/actions", params(limit=limit, offset=offset, **filters))


# ---- tools and people ------------------------------------------------------------------

def tool_calls(*, limit: int, offset: int, **filters) -> Call:
    return Call("GET", "/api/tool-calls", params(limit=limit, offset=offset, **filters))


def tool_call(tool_call_id: str) -> Call:
    return Call("GET", f"/api/tool-calls/{seg(tool_call_id)}", model=m.ToolCall)


def decide(tool_call_id: str, verb: str, body: dict) -> Call:
    """approve, deny, result: 409 when the call does not wait for that."""
    return Call("POST", f"/api/tool-calls/{seg(tool_call_id)}/{verb}", body=body, model=m.ToolCallAccepted,
                idempotent=True)


def answer(session_id: str, req: m.Answer) -> Call:
    return Call("POST", f"/api/sessions/{seg(session_id)}/answer", body=req.body(), model=m.AnswerAccepted,
                idempotent=True)


def waiting_page(*, limit: int, offset: int, kind=None, agent_id=None, session_id=None, tool=None) -> Call:
    return Call("GET", "/api/waiting", params(limit=limit, offset=offset, kind=kind, agent_id=agent_id,
                                              session_id=session_id, tool=tool), model=m.WaitingList)


def post_message(conversation_id: str, req: m.PostMessage) -> Call:
    return Call("POST", f"/api/conversations/{seg(conversation_id)}/messages", body=req.body(), model=m.Posted,
                idempotent=True)


def conversation(conversation_id: str) -> Call:
    return Call("GET", f"/api/conversations/{seg(conversation_id)}")


# ---- replay, diff, evals -------------------------------------------------------------

def replay(session_id: str, req: m.Replay) -> Call:
    return Call("POST", f"/api/sessions/{seg(session_id)}/replay", body=req.body(), model=m.Accepted,
                idempotent=True)


def diff(session_id: str, against: str, *, from_iteration=None, limit=None) -> Call:
    return Call("GET", f"/api/sessions/{seg(session_id)}/diff",
                params(against=against, from_iteration=from_iteration, limit=limit), model=m.SessionDiff)


def create_evalset(req: m.CreateEvalSet) -> Call:
    # no Idempotency-Key on this route: sent once, never retried
    return Call("POST", "/api/evalsets", body=req.body(), model=m.EvalSet)


def evalsets(*, limit: int, offset: int) -> Call:
    return Call("GET", "/api/evalsets", params(limit=limit, offset=offset), model=m.EvalSetList)


def evalset(evalset_id: str) -> Call:
    return Call("GET", f"/api/evalsets/{seg(evalset_id)}", model=m.EvalSet)


def start_eval_run(evalset_id: str, req: m.StartEvalRun) -> Call:
    return Call("POST", f"/api/evalsets/{seg(evalset_id)}/runs", body=req.body(), model=m.EvalRun)


def eval_runs(evalset_id: str) -> Call:
    return Call("GET", f"/api/evalsets/{seg(evalset_id)}/runs", model=m.EvalRunList)


def eval_run(run_id: str) -> Call:
    return Call("GET", f"/api/evalruns/{seg(run_id)}", model=m.EvalRunDetail)


def whoami() -> Call:
    return Call("GET", "/api/whoami", model=m.WhoAmI)
