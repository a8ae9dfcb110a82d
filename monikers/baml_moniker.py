"""The ``baml`` moniker: an agent that thinks with an LLM through any
OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, llama.cpp server), by calling
the BAML function ``RunMonikerStep(frame, task)`` defined in ``baml_src/``.

Its settings (endpoint, model, ``max_tokens``, structured output, streaming…)
come from the session's ``config.llm``, the environment and the defaults, as
monikers/llm_settings.py tables them.  Every model call goes through
:func:`monikers.llm_call.call`: the reply's JSON Schema is sent as a
constraint when the server takes it (the frame's ``tool_calls`` shaped by the
session's tools), the reply streams to the dashboard while it is written,
attempts are bounded by the step's deadline, and every HTTP attempt is counted.

A reply that does not parse as a frame is re-asked up to ``max_reasks`` times,
telling the model what was wrong; then the step fails with the last raw reply
kept on the error step row.  Each ask is reported with ``ctx.record_usage``,
with its HTTP attempts listed (monikers/llm_call.py: :func:`usage_entry`).

Tools (StepFrame-v1): the prompt lists the tools the session may call
(``ctx.tools``: name, description, JSON schema of the args, from the session's
``config.tools``) and the reply may carry ``tool_calls: [{name, args}]``, which
become ``frame_out.tool_calls``; the runner validates and runs them, and the
next step's prompt shows their ``tool_results`` (and any non-guidance
``inbox`` items).  One generic call shape rather than a BAML dynamic type per
tool: tools' args schemas are arbitrary JSON Schema (MCP servers' included)
that BAML types cannot express faithfully, and the runner's validation tells
the model exactly what was wrong.  Calls are read from the raw reply, because
BAML's lenient parser would drop a malformed call or blank its args (see
:func:`reply_tool_calls`); a malformed call is re-asked like any bad reply.

Prompt logging contract: BAML prints every prompt and reply to stderr at its
default ``BAML_LOG=info``, and at ``warn`` it still prints the whole prompt of
every failed call.  Before the generated client is first imported
monikers/llm_call.py sets ``BAML_LOG=error`` (unless BAML_LOG is already set),
except when ``AGENTSVC_LOG_PROMPTS=1``; ``agents.py --log-prompts`` sets that
variable before loading monikers.  Failures still reach the service log through
the runner (the step's error) and monikers/llm_call.py's logger.

Small models (issue 39): the reply's fields come in the order the model
should decide them (answer and calls, then ``done``), the prompt carries a
short transcript of the recent steps and keeps guidance until a step acted on
it (monikers/memory.py), a step asks for at most ``llm.max_tool_calls`` calls,
and a reply cut at ``max_tokens`` is never read as a frame: it is re-asked
once, told to be shorter, and a second cut reply fails the step
(:data:`TRUNCATED_REASK`).

``done`` with tool calls: the runner never ends a session on a step with
calls (it runs them and steps again), so the moniker drops ``done`` from such
a step, except when every call is one already answered in this session (the
runner would not run it again, runtime/session/tool_runner.py): then the
calls are dropped and ``done`` is kept.

Big integers beyond 64 bits in a model's reply come back as floats (BAML's
parser); everything else in ``state``/``data`` round-trips exactly.
"""
import json
import logging
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from monikers import llm_call, memory, output_schemas
from monikers.frame import FrameIn, FrameOut, Moniker, StepContext, StepError
from monikers.llm_call import CallInfo, baml_api, endpoint_error, quiet_baml_logs  # noqa: F401 (quiet_baml_logs: tests)
from monikers.llm_gate import estimate_tokens
from monikers.llm_settings import LLMConfig, resolve_settings  # noqa: F401 (resolve_settings: tests)

log = logging.getLogger("monikers.baml")

REASK_CHARS = 600  # how much of a parse error is shown to the model when re-asking
GUIDANCE_KINDS = ("guidance", "message")  # already joined into frame.guidance (runtime/base/inbox.py)
REPEAT_LIMIT = 3  # the same text 3 steps in a row: stuck (SmolLM2 repeated its answer until max_steps)
TRUNCATED_REASK = ("your reply was cut at the token limit before it ended. Write a much shorter reply: "
                   "text in one or two sentences, state {} or one short key, no notes")


class BamlConfig(BaseModel):
    """The ``baml`` moniker's own session-config keys."""

    model_config = ConfigDict(extra="forbid", strict=True)

    llm: LLMConfig | None = Field(None, description="the LLM: one of the operator's endpoints by name (GET "
                                                    "/api/endpoints) and a model it serves; unset keys come from "
                                                    "AGENTSVC_LLM_* and the defaults")


def _short(text: str, limit: int = REASK_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


class BadToolCalls(ValueError):
    """The reply's tool_calls are malformed; the model is asked again, told why."""


def _reply_object(raw: str | None) -> dict | None:
    """The frame object in a raw reply (bare JSON, fenced, or inside prose), or
    None when there is no JSON object with a ``next_step`` to be read."""
    if not raw:
        return None
    decoder, start = json.JSONDecoder(), 0
    for _ in range(200):
        start = raw.find("{", start)
        if start < 0:
            return None
        try:
            value, _end = decoder.raw_decode(raw, start)
        except ValueError:
            start += 1
            continue
        if isinstance(value, dict) and "next_step" in value:
            return value
        start += 1
    return None


def _whole_calls(raw: str | None) -> list | None:
    """The elements of the reply's ``"tool_calls": [...]`` written whole, up to
    the first one cut short (or the list's end); None when the reply has no
    such list."""
    start = _TOOL_CALLS.search(raw or "")
    if start is None:
        return None
    decoder, pos, calls = json.JSONDecoder(), start.end(), []
    while True:
        pos = _after_space(raw, pos)
        if pos >= len(raw) or raw[pos] == "]":
            return calls
        try:
            call, pos = decoder.raw_decode(raw, pos)
        except ValueError:
            return calls  # cut short here: the model never finished asking for it
        calls.append(call)
        pos = _after_space(raw, pos)
        if pos >= len(raw) or raw[pos] != ",":
            return calls
        pos += 1


_TOOL_CALLS = re.compile(r'"tool_calls"\s*:\s*\[')


def _after_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _one_call(i: int, call) -> dict:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"].strip():
        raise BadToolCalls(f"tool_calls[{i}] must be an object with a non-empty string name and an args object")
    args = call.get("args")
    if isinstance(args, str):  # OpenAI-style arguments as JSON text
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            raise BadToolCalls(f"tool_calls[{i}].args is a string that is not JSON; give a JSON object") from None
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise BadToolCalls(f"tool_calls[{i}].args must be a JSON object, not {type(args).__name__}")
    return {"name": call["name"], "args": args}


def reply_tool_calls(raw: str | None, parsed) -> list[dict]:
    """The tool calls exactly as the model wrote them.

    BAML's lenient parser drops a list element it cannot read (a call without
    a name) and turns args it cannot read into ``{}``: running a call the model
    did not ask for, or silently not running one it did, is worse than asking
    again.  So the calls come from the raw reply when it holds readable JSON.
    A reply cut by the token cap is not whole JSON: its calls are the ones it
    wrote whole (:func:`_whole_calls`); BAML would also read the call it was cut
    in, a name cut to ``"spawn"`` or args cut mid-string (SmolLM2 did).  BAML's
    parse is used only when the reply has no ``tool_calls`` list to read (JSON
    that only BAML's repairs could read)."""
    obj = _reply_object(raw)
    if obj is None:
        whole = _whole_calls(raw)
        if whole is not None:
            return [_one_call(i, call) for i, call in enumerate(whole)]
        return [{"name": call.name, "args": call.args} for call in parsed or []]
    calls = obj.get("tool_calls")
    if calls is None:
        return []
    if isinstance(calls, dict):
        calls = [calls]
    if not isinstance(calls, list):
        raise BadToolCalls("tool_calls must be a list of {name, args} objects ([] for none)")
    return [_one_call(i, call) for i, call in enumerate(calls)]


def _distinct(calls: list[dict]) -> list[dict]:
    """The calls without repeats, each at its first place."""
    seen, kept = set(), []
    for call in calls:
        if (key := memory.call_key(call["name"], call["args"])) not in seen:
            seen.add(key)
            kept.append(call)
    return kept


def to_frame_out(frame: FrameIn, out, raw: str | None = None, mem: dict | None = None,
                 max_calls: int | None = None) -> FrameOut:
    """The model's frame as the runner's FrameOut.  ``step`` is the token that
    was run, whatever the model echoed.  Tool calls pass through as the model
    wrote them: the runner checks each against the session's allowed tools and
    the tool's args schema, and tells the model in ``tool_results`` what was
    wrong; more than ``max_calls`` of them is re-asked.  A step with tool calls
    is never the last (the model sees the results next step), so ``done`` is
    dropped from such a reply, unless every call was answered before in this
    session (``mem``, monikers/memory.py): those calls are dropped and ``done``
    kept.  Identical calls (name and canonical args) in one reply are one call:
    SmolLM2 asked for the same ``time.get_current_time`` four times in one
    step, and all four ran.  With ``mem``, the new state carries the updated
    memory."""
    calls = reply_tool_calls(raw, out.tool_calls)
    if max_calls is not None and len(calls) > max_calls:
        raise BadToolCalls(f"{len(calls)} tool calls; at most {max_calls} per step")
    calls = _distinct(calls)
    mem = mem if mem is not None else memory.split({})[1]
    if out.done and memory.only_repeats(mem, calls):
        calls = []  # all answered already: the runner would only hand back the same results
    done = out.done and not calls
    state = {k: v for k, v in (out.state or {}).items() if k != memory.KEY}
    state[memory.KEY] = memory.after_step(mem, frame.step, out.text, calls, done)
    return FrameOut(step=frame.step, next_step=out.next_step, state=state, text=out.text,
                    data=out.data, done=done, notes=out.notes, tool_calls=calls)


def _json_text(items) -> str | None:
    """Items (pydantic models or dicts) as stable JSON text for the prompt, or
    None when there are none (so the prompt leaves the section out)."""
    if not items:
        return None
    plain = [item.model_dump(exclude_none=True) if isinstance(item, BaseModel) else item for item in items]
    return json.dumps(plain, sort_keys=True, ensure_ascii=False, default=str)


def tools_text(tools: list) -> str | None:
    """What the model is told of each allowed tool: name, description, args schema."""
    return _json_text([{"name": t["name"], "description": t.get("description") or "",
                        "args_schema": t.get("args_schema") or {"type": "object"}} for t in tools or []])


def prompt_frame(api, frame: FrameIn, ctx: StepContext, state_json: str, reask: str | None, mem: dict | None = None):
    """The BAML frame_in: v0's fields, plus the allowed tools, the previous
    step's tool results, the inbox (user guidance and messages are already in
    ``guidance``, so they are not repeated), the profile's system prompt, and
    the transcript of the recent steps (``mem``; its open guidance is shown
    until a step acted on it)."""
    inbox = [item for item in getattr(frame, "inbox", None) or []
             if (item.kind if isinstance(item, BaseModel) else item.get("kind")) not in GUIDANCE_KINDS]
    guidance = frame.guidance or (memory.open_guidance(mem) if mem else None)
    return api.StepFrameIn(step=frame.step, state_json=state_json, guidance=guidance, reask=reask,
                           tools_json=tools_text(getattr(ctx, "tools", None)),
                           tool_results_json=_json_text(getattr(frame, "tool_results", None)),
                           inbox_json=_json_text(inbox), system_prompt=getattr(ctx, "system_prompt", None),
                           memory=memory.transcript(mem) if mem else None)


def _tokens_of(*texts) -> int:
    """A part's tokens, estimated as the gate does (~4 characters a token)."""
    return sum(len(t if isinstance(t, str) else json.dumps(t, default=str)) for t in texts if t) // 4


def token_split(frame_in, ctx: StepContext, state_json: str, info: CallInfo) -> dict:
    """How the prompt's tokens split between its parts (estimated: the server
    counts only the whole), beside the server's counts of the last attempt;
    what the parts do not account for is the template and the output schema."""
    last = info.attempts[-1] if info.attempts else None
    return {"parts": {"system": _tokens_of(ctx.system_prompt), "task": _tokens_of(ctx.task),
                      "history": _tokens_of(frame_in.memory), "tools": _tokens_of(frame_in.tools_json),
                      "state": _tokens_of(state_json),
                      "inputs": _tokens_of(frame_in.guidance, frame_in.tool_results_json, frame_in.inbox_json,
                                           frame_in.reask)},
            "input_tokens": last.input_tokens if last else None,
            "output_tokens": last.output_tokens if last else None,
            "estimated": bool(last.estimated) if last else True}


async def baml_step(frame: FrameIn, ctx: StepContext) -> FrameOut:
    settings = resolve_settings(ctx.config)
    api = baml_api()
    state, mem = memory.split(frame.state)
    mem = memory.take_inputs(mem, frame.tool_results, frame.guidance)
    state_json = json.dumps(state, sort_keys=True, ensure_ascii=False)
    tools = getattr(ctx, "tools", None) or []
    max_calls = settings.max_tool_calls if tools else 0
    schema = output_schemas.frame_schema(tools, max_calls, compact=settings.structured == "grammar")
    reask, raw, truncated = None, None, 0
    for ask in range(settings.max_reasks + 1):
        frame_in = prompt_frame(api, frame, ctx, state_json, reask, mem)
        info = CallInfo()
        prompt_tokens = estimate_tokens(state_json, ctx.task, frame_in.guidance, frame_in.tools_json,
                                        ctx.system_prompt, frame_in.tool_results_json, frame_in.inbox_json,
                                        frame_in.memory, reply_tokens=0)
        try:
            out = await llm_call.call(api, settings, "RunMonikerStep", (frame_in, ctx.task), info=info,
                                      prompt_tokens=prompt_tokens, schema=schema, deadline=ctx.deadline,
                                      live=ctx.live_output("RunMonikerStep", ask, info), whole=True)
            return to_frame_out(frame, out, info.raw, mem, max_calls)
        except llm_call.Truncated as exc:
            raw, truncated = exc.raw_output, truncated + 1
            if truncated > 1:
                raise StepError(f"the model's reply was cut at max_tokens ({exc.max_tokens}) twice, the second "
                                f"time after being asked for a shorter one: raise llm.max_tokens, or use a "
                                f"model that keeps to the frame", raw_output=raw) from None
            reask = TRUNCATED_REASK
        except api.errors.BamlValidationError as exc:
            raw, reask = exc.raw_output, _short(exc.message)
        except BadToolCalls as exc:
            raw, reask = info.raw, _short(str(exc))
        except ValidationError as exc:  # parsed, but not a valid StepFrame (e.g. a 300-character token)
            raw = info.raw
            reask = _short("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5]))
        except (api.errors.BamlError, llm_call.CallFailed) as exc:
            raise endpoint_error(api, exc, settings, info) from None
        finally:
            ctx.record_call(llm_call.usage_entry(settings, info, attempt=ask))
            if info.request is not None:
                ctx.record_model_io(function="RunMonikerStep", ask=ask, request=info.request, reply=info.raw,
                                    model=settings.model, mode=info.mode,
                                    tokens=token_split(frame_in, ctx, state_json, info))
        log.info("session %s step %s: unusable reply (ask %d of %d, %s): %s", ctx.session_id, frame.step,
                 ask + 1, settings.max_reasks + 1, info.mode, reask)
    raise StepError(f"unparseable LLM output after {settings.max_reasks + 1} ask(s): {reask}", raw_output=raw)


BAML = Moniker("baml", baml_step,
               "Thinks with an LLM via BAML RunMonikerStep on any OpenAI-compatible endpoint "
               "(config.llm.endpoint names one of the operator's).", config_model=BamlConfig,
               repeat_limit=REPEAT_LIMIT, reuses_tool_results=True)


def register(registry) -> bool:
    """Register the moniker if BAML loads; a broken BAML install is logged, and
    the rest of the service keeps working without this moniker."""
    try:
        baml_api()
    except Exception as exc:
        log.error("baml moniker unavailable: BAML failed to load: %s: %s", type(exc).__name__, exc)
        return False
    registry.register(BAML)
    return True
