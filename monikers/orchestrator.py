"""The ``orchestrator`` moniker: sits in a conversation and, for
each user message, decides with the LLM (BAML ``DecideNextMove``,
baml_src/orchestrator.baml) to start a new sub-agent, to send a follow-up to
one it has, or to answer directly.

One step handles what arrived since the last one:

- ``tool_results`` of its own ``spawn_agent`` / ``message_agent`` calls: the
  sub-agents' ids are remembered in ``state.agents``;
- ``child_result`` inbox items: a sub-agent finished (or failed); its final
  answer is posted to the conversation (the step's text is the agent message)
  and kept as that sub-agent's latest result.  The orchestrator sees results,
  never a sub-agent's history;
- user messages (``guidance`` / ``message`` items): one decision each.
  ``new_agent`` becomes a ``spawn_agent`` call (moniker ``sub_moniker``, config
  ``sub_config``), ``follow_up`` a ``message_agent`` call to the named
  sub-agent (which reactivates it when it had finished), ``answer`` the reply.

It is never done by itself.  Give it a long ``interval_s`` (e.g. 300): the
runner wakes it at once when a message or a result arrives, so an idle
orchestrator costs nothing.  Its session needs ``tools: ["spawn_agent",
"message_agent"]``.  An LLM failure fails the step (the session is ``error``
with the reason, never a silent zombie); ``resume`` retries it.
"""
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from monikers import llm_call, output_schemas
from monikers.llm_call import CallInfo, baml_api, endpoint_error
from domain.json_types import JsonInt
from monikers.llm_settings import LLMConfig, resolve_settings
from monikers.frame import FrameIn, FrameOut, Moniker, StepContext, StepError
from monikers.llm_gate import estimate_tokens

USER_KINDS = ("guidance", "message")
RESULT_CHARS = 2000  # of a sub-agent's result kept in state and shown to the model
HISTORY_CHARS = 1000  # per remembered conversation line


class OrchestratorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    llm: LLMConfig | None = Field(None, description="the LLM that decides (as the baml moniker's)")
    sub_moniker: str = Field("baml", min_length=1, max_length=128, description="the moniker of new sub-agents")
    sub_config: dict[str, Any] = Field(default_factory=dict, description="the session config of new sub-agents "
                                                                         "(its llm names an endpoint, as any config's)")
    history_messages: JsonInt = Field(20, ge=1, le=200, description="conversation lines the model sees")

    @field_validator("sub_config")
    @classmethod
    def _sub_llm(cls, sub_config: dict) -> dict:
        """A sub-agent's ``llm`` is checked here, at the orchestrator's create, as
        any config's: an endpoint by name, never a URL or a key (the rest of
        sub_config is checked when the sub-agent is spawned)."""
        if "llm" in sub_config:
            try:
                LLMConfig.model_validate(sub_config["llm"])
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, ('llm', *e['loc'])))}: "
                                     f"{e['msg'].removeprefix('Value error, ')}" for e in exc.errors()[:3])
                raise ValueError(f"sub_config: {problems}") from None
        return sub_config


def _short(text, limit: int) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + "…"


def _remember(state: dict, role: str, text: str, keep: int) -> None:
    state["history"] = [*state.get("history", []), {"role": role, "text": _short(text, HISTORY_CHARS)}][-keep:]


def _take_tool_results(frame: FrameIn, state: dict) -> None:
    """Remember the sub-agents our spawn calls started (name -> ids)."""
    for result in frame.tool_results:
        result = result.model_dump() if isinstance(result, BaseModel) else result
        value = result.get("result") if isinstance(result.get("result"), dict) else {}
        if result.get("name") == "spawn_agent" and result.get("status") == "success" and value.get("session_id"):
            name = value.get("name") or value["session_id"]
            state["agents"][name] = {"session_id": value["session_id"], "status": "running", "result": None}


def _take_child_results(inbox: list[dict], state: dict, keep: int) -> list[str]:
    """A finished sub-agent's answer, for the conversation (and for the model later)."""
    lines = []
    for item in inbox:
        if item.get("kind") != "child_result":
            continue
        data = item.get("data") or {}
        name = data.get("name") or data.get("child_session_id")
        answer = data.get("text") if data.get("status") == "done" else item.get("text")
        entry = state["agents"].setdefault(name, {"session_id": data.get("child_session_id")})
        entry.update(status=data.get("status"), result=_short(answer, RESULT_CHARS))
        line = f"{name}: {answer}" if data.get("status") == "done" else item.get("text") or f"{name} ended"
        lines.append(line)
        _remember(state, "assistant", line, keep)
    return lines


def _agents_text(state: dict) -> str:
    if not state["agents"]:
        return "(none yet)"
    return "\n".join(f"- {name}: {a.get('status')}; latest result: {a.get('result') or '(none yet)'}"
                     for name, a in state["agents"].items())


def _history_text(state: dict) -> str:
    return "\n".join(f"{h['role']}: {h['text']}" for h in state.get("history", [])) or "(empty)"


async def _decide(ctx: StepContext, config: OrchestratorConfig, message: str, state: dict):
    """One decision, through :func:`monikers.llm_call.call` like every model call:
    the decision's schema as a constraint, the model's shared rate limits and
    Retry-After, the step's deadline, every attempt counted."""
    settings = resolve_settings(ctx.config)
    api = baml_api()
    info = CallInfo()
    args = (message, _history_text(state), _agents_text(state))
    try:
        decision = await llm_call.call(api, settings, "DecideNextMove", args, info=info,
                                       prompt_tokens=estimate_tokens(*args, reply_tokens=0),
                                       schema=output_schemas.DECISION, deadline=ctx.deadline,
                                       live=ctx.live_output("DecideNextMove", 0, info))
    except api.errors.BamlValidationError as exc:
        raise StepError(f"the orchestrator's model gave no usable decision: {_short(exc.message, 300)}",
                        raw_output=exc.raw_output) from None
    except (api.errors.BamlError, llm_call.CallFailed) as exc:
        raise endpoint_error(api, exc, settings, info) from None
    finally:
        ctx.record_call(llm_call.usage_entry(settings, info))
    return decision


def _action_name(decision) -> str:
    value = getattr(decision.action, "value", decision.action)
    return {"NewAgent": "new_agent", "FollowUp": "follow_up", "Answer": "answer"}.get(value, str(value))


def _move(decision, config: OrchestratorConfig, state: dict, message: str) -> tuple[str, dict | None]:
    """The reply for the user and the tool call a decision becomes (or None)."""
    action, reply = _action_name(decision), decision.reply
    if action == "new_agent":
        name = decision.agent_name or f"agent-{len(state['agents']) + 1}"
        args = {"task": decision.task or message, "moniker": config.sub_moniker, "name": name,
                "config": dict(config.sub_config)}
        return reply, {"name": "spawn_agent", "args": args}
    if action == "follow_up":
        known = state["agents"].get(decision.agent_name or "")
        if known is None:
            return (f"{reply} (I have no sub-agent named {decision.agent_name!r}; "
                    f"mine are: {', '.join(state['agents']) or 'none'})"), None
        known["status"] = "running"
        return reply, {"name": "message_agent",
                       "args": {"session_id": known["session_id"], "text": decision.task or message}}
    return reply, None


async def orchestrator_step(frame: FrameIn, ctx: StepContext) -> FrameOut:
    config = OrchestratorConfig.model_validate({k: v for k, v in ctx.config.items()
                                                if k in OrchestratorConfig.model_fields})
    state = {"agents": {}, "history": [], **json.loads(json.dumps(frame.state))}
    inbox = [i.model_dump() if isinstance(i, BaseModel) else dict(i) for i in frame.inbox]
    _take_tool_results(frame, state)
    lines = _take_child_results(inbox, state, config.history_messages)
    calls, decisions = [], []
    for item in inbox:
        if item.get("kind") not in USER_KINDS or not item.get("text"):
            continue
        _remember(state, "user", item["text"], config.history_messages)
        decision = await _decide(ctx, config, item["text"], state)
        reply, call = _move(decision, config, state, item["text"])
        decisions.append({"message": _short(item["text"], 200), "action": _action_name(decision),
                          "agent_name": decision.agent_name})
        if reply:
            lines.append(reply)
            _remember(state, "assistant", reply, config.history_messages)
        if call:
            calls.append(call)
    return FrameOut(step=frame.step, next_step="listen", state=state, text="\n\n".join(lines) or None,
                    data={"decisions": decisions} if decisions else None, done=False, tool_calls=calls)


ORCHESTRATOR = Moniker("orchestrator", orchestrator_step,
                       "Sits in a conversation: for each user message starts a sub-agent, follows up with one, "
                       "or answers (LLM via BAML DecideNextMove); posts finished sub-agents' answers.",
                       config_model=OrchestratorConfig, initial_step="listen")


def register(registry) -> bool:
    try:
        baml_api()
    except Exception:
        return False  # the baml moniker has logged why
    registry.register(ORCHESTRATOR)
    return True
