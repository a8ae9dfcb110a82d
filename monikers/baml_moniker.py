"""The ``baml`` moniker: an agent that thinks with an LLM through any
OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, llama.cpp server), by calling
the BAML function ``RunMonikerStep(frame, task)`` defined in ``baml_src/``.

Where the LLM settings come from (a session's config wins over the environment,
which wins over the default):

=========================  ==========================  =============================
config ``llm.*``           environment variable        default
=========================  ==========================  =============================
``base_url``               AGENTSVC_LLM_BASE_URL       http://127.0.0.1:11434/v1 (Ollama)
``model``                  AGENTSVC_LLM_MODEL          llama3.2
``api_key_env`` (a NAME)   AGENTSVC_LLM_API_KEY        no key
``temperature``            AGENTSVC_LLM_TEMPERATURE    0.2
``timeout_s``              AGENTSVC_LLM_TIMEOUT_S      120 (per HTTP request)
``max_tokens``             --                          the server's default
``max_reasks``             --                          2
``prices``                 --                          none (cost is null)
=========================  ==========================  =============================

The default is a local Ollama so that an unconfigured service never sends a
task to a paid cloud API.  Session config is persisted in the database, so it
never holds a key: ``llm.api_key_env`` names the environment variable that
does, and ``llm.api_key`` is rejected.

Failures: 5xx, timeouts and connection errors are retried with exponential
backoff (0.15, 0.3, 0.6, 1.2 s, as the ``AgentBackoff`` policy in
baml_src/clients.baml), and a 429 after its ``Retry-After``; what still
fails raises :class:`StepError`.  The retries are ours, not BAML's
(:func:`baml_call`): every HTTP request, retries included, is admitted by the
model-call gate (monikers/llm_gate.py), which is where the shared per-model
rate limits hold (runtime/rate_limits.py), and the time a call waited there is
reported with its usage (``rate_wait_ms``).  A reply that does not parse as a frame is
re-asked up to ``max_reasks`` times, telling the model what was wrong; then
the step fails with the last raw reply kept on the error step row.  Every ask
is reported with ``ctx.record_usage`` (tokens from BAML's Collector).

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
every failed call.  Before the generated client is first imported this module
sets ``BAML_LOG=error`` (unless BAML_LOG is already set), except when
``AGENTSVC_LOG_PROMPTS=1``; ``agents.py --log-prompts`` sets that variable
before loading monikers.  Failures still reach the service log through the
runner (the step's error) and this module's logger.

Big integers beyond 64 bits in a model's reply come back as floats (BAML's
parser); everything else in ``state``/``data`` round-trips exactly.
"""
import asyncio
import functools
import json
import logging
import os
import re
from dataclasses import dataclass
from types import SimpleNamespace

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from monikers.config_types import JsonInt, json_int

from monikers.frame import FrameIn, FrameOut, Moniker, StepContext, StepError
from monikers.llm_gate import estimate_tokens, gate, retry_after_s

log = logging.getLogger("monikers.baml")

CLIENT_NAME = "AgentSession"
DEFAULTS = {"base_url": "http://127.0.0.1:11434/v1", "model": "llama3.2", "temperature": 0.2, "timeout_s": 120.0}
REASK_CHARS = 600  # how much of a parse error is shown to the model when re-asking
RETRIES = 4  # 5xx, timeouts, connection errors: the first try and 4 more
RETRY_BASE_S = 0.15
RATE_LIMITED_RETRIES = 8  # 429s, each after its Retry-After (or the backoff without one)
GUIDANCE_KINDS = ("guidance", "message")  # already joined into frame.guidance (runtime/inbox.py)


class Prices(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    input_per_1k: float = Field(0.0, ge=0, description="price of 1,000 prompt tokens")
    output_per_1k: float = Field(0.0, ge=0, description="price of 1,000 completion tokens")


class LLMConfig(BaseModel):
    """The ``llm`` object of a session's config."""

    model_config = ConfigDict(extra="forbid", strict=True)

    base_url: str | None = Field(None, pattern=r"^https?://\S+$", max_length=2000)
    model: str | None = Field(None, min_length=1, max_length=200)
    temperature: float | None = Field(None, ge=0, le=2)
    timeout_s: float | None = Field(None, gt=0, le=3600)
    max_tokens: json_int(ge=1, le=1_000_000) | None = Field(None)
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    max_reasks: JsonInt = Field(2, ge=0, le=10)
    prices: Prices | None = None

    @model_validator(mode="before")
    @classmethod
    def no_secrets(cls, data):
        if isinstance(data, dict) and "api_key" in data:
            raise ValueError("llm.api_key is not accepted (config is stored); "
                             "put the key in an environment variable and name it in llm.api_key_env")
        return data


class BamlConfig(BaseModel):
    """The ``baml`` moniker's own session-config keys."""

    model_config = ConfigDict(extra="forbid", strict=True)

    llm: LLMConfig | None = Field(None, description="the LLM endpoint and model; unset keys come from "
                                                    "AGENTSVC_LLM_* and the defaults")


@dataclass(frozen=True)
class LLMSettings:
    """Everything one step needs to reach its model, resolved from config and environment."""

    base_url: str
    model: str
    api_key: str
    temperature: float
    timeout_s: float
    max_tokens: int | None
    max_reasks: int
    prices: Prices | None

    def client_options(self) -> dict:
        options = {"base_url": self.base_url, "model": self.model, "temperature": self.temperature,
                   "http": {"request_timeout_ms": max(1, round(self.timeout_s * 1000))}}
        if self.api_key:
            options["api_key"] = self.api_key
        if self.max_tokens:
            options["max_tokens"] = self.max_tokens
        return options

    def cost(self, input_tokens: int, output_tokens: int) -> float | None:
        if self.prices is None:
            return None
        return input_tokens / 1000 * self.prices.input_per_1k + output_tokens / 1000 * self.prices.output_per_1k


def _env_float(name: str, default: float, environ) -> float:
    value = environ.get(name)
    if value in (None, ""):
        return default
    try:
        return float(value)
    except ValueError:
        raise StepError(f"environment variable {name}={value!r} is not a number") from None


def resolve_settings(config: dict, environ=os.environ) -> LLMSettings:
    """Session config over environment over defaults; any bad value is a StepError."""
    raw = config.get("llm") or {}
    try:
        cfg = LLMConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'llm'}: {e['msg']}" for e in exc.errors()[:5])
        raise StepError(f"invalid llm config: {problems}") from None
    if cfg.api_key_env:
        api_key = environ.get(cfg.api_key_env)
        if not api_key:
            raise StepError(f"llm.api_key_env names {cfg.api_key_env}, which is not set in the environment")
    else:
        api_key = environ.get("AGENTSVC_LLM_API_KEY", "")
    return LLMSettings(
        base_url=cfg.base_url or environ.get("AGENTSVC_LLM_BASE_URL") or DEFAULTS["base_url"],
        model=cfg.model or environ.get("AGENTSVC_LLM_MODEL") or DEFAULTS["model"],
        api_key=api_key,
        temperature=cfg.temperature if cfg.temperature is not None
        else _env_float("AGENTSVC_LLM_TEMPERATURE", DEFAULTS["temperature"], environ),
        timeout_s=cfg.timeout_s or _env_float("AGENTSVC_LLM_TIMEOUT_S", DEFAULTS["timeout_s"], environ),
        max_tokens=cfg.max_tokens, max_reasks=cfg.max_reasks, prices=cfg.prices,
    )


def quiet_baml_logs(environ=os.environ) -> None:
    """Keep prompts (which may hold user data) out of stderr unless asked for."""
    if environ.get("AGENTSVC_LOG_PROMPTS") != "1":
        environ.setdefault("BAML_LOG", "error")


@functools.cache
def baml_api() -> SimpleNamespace:
    """Import the generated client on first use, after quieting BAML's logs."""
    quiet_baml_logs()
    import baml_py
    import baml_py.errors
    import baml_py.logging
    from baml_client import b
    from baml_client.types import StepFrameIn

    if "BAML_LOG" in os.environ:  # also applies when baml_py was imported before us
        baml_py.logging.set_log_level(os.environ["BAML_LOG"])
    return SimpleNamespace(b=b, StepFrameIn=StepFrameIn, errors=baml_py.errors,
                           ClientRegistry=baml_py.ClientRegistry, Collector=baml_py.Collector)


def client_registry(api, settings: LLMSettings):
    """A per-call client, so two sessions can use two endpoints or models.  It has
    no retry policy: :func:`baml_call` retries, one gated request at a time."""
    registry = api.ClientRegistry()
    registry.add_llm_client(CLIENT_NAME, "openai-generic", settings.client_options())
    registry.set_primary(CLIENT_NAME)
    return registry


@dataclass
class CallInfo:
    """What one gated BAML call took: its HTTP requests and its wait at the gate."""

    http_calls: int = 0
    waited_s: float = 0.0


def _last_response(collector) -> tuple[int, dict | None]:
    """Tokens and response headers of the collector's newest HTTP request."""
    entry = collector.last
    if entry is None:
        return 0, None
    tokens = (entry.usage.input_tokens or 0) + (entry.usage.output_tokens or 0)
    calls = entry.calls
    response = calls[-1].http_response if calls else None
    return tokens, (dict(response.headers) if response is not None else None)


def _retryable(api, exc: Exception) -> bool:
    if isinstance(exc, api.errors.BamlTimeoutError):
        return True
    if isinstance(exc, api.errors.BamlClientHttpError):
        return exc.status_code >= 500 or exc.status_code == 408
    return isinstance(exc, api.errors.BamlClientError) and bool(UNREACHABLE.search(str(exc)))


async def baml_call(api, settings: LLMSettings, function: str, args: tuple, collector, info: CallInfo,
                    estimate: int):
    """Call the BAML ``function`` through the model-call gate: the single path of
    every model call in the service.  Each HTTP request (retries included) waits
    for a permit for ``settings.model``; a 429 tells the gate its Retry-After (which
    holds the model back, here and in every worker) and is retried after it;
    5xx, timeouts and connection errors are retried with backoff.  ``info``
    gathers the requests made and the time waited; BAML's last error is raised."""
    registry = client_registry(api, settings)
    call = getattr(api.b, function)
    failures = rate_limited = 0
    while True:
        permit = await gate().acquire(settings.model, estimate)
        info.waited_s += permit.waited_s
        error = None
        try:
            out = await call(*args, baml_options={"client_registry": registry, "collector": collector})
        except api.errors.BamlError as exc:
            error = exc
        finally:
            info.http_calls += 1
            tokens, headers = _last_response(collector)
            status = getattr(error, "status_code", None) if isinstance(error, api.errors.BamlClientHttpError) \
                else (None if error is not None and not isinstance(error, api.errors.BamlValidationError) else 200)
            retry_after = retry_after_s(headers) if status == 429 else None
            gate().release(permit, tokens=tokens or None, status=status, retry_after=retry_after)
        if error is None:
            return out
        if status == 429 and rate_limited < RATE_LIMITED_RETRIES:
            rate_limited += 1
            log.info("%s answered 429 (retry after %s s); retrying %s", settings.model, retry_after, function)
            if retry_after is None:
                await asyncio.sleep(RETRY_BASE_S * 2 ** min(rate_limited - 1, 6))
            continue  # with a Retry-After, the gate holds the next permit back until it has passed
        if _retryable(api, error) and failures < RETRIES:
            failures += 1
            await asyncio.sleep(RETRY_BASE_S * 2 ** (failures - 1))
            continue
        raise error


def record_ask(ctx: StepContext, collector, settings: LLMSettings, attempt: int, info: CallInfo) -> None:
    """Report one ask (with its HTTP retries and its wait for a permit) as one usage call of the step."""
    entry = collector.last
    if entry is None and not info.waited_s:
        return
    input_tokens = (entry.usage.input_tokens or 0) if entry else 0
    output_tokens = (entry.usage.output_tokens or 0) if entry else 0
    ctx.record_usage(model=settings.model, input_tokens=input_tokens, output_tokens=output_tokens,
                     duration_ms=(entry.timing.duration_ms or 0) if entry else 0,
                     cost=settings.cost(input_tokens, output_tokens), attempt=attempt, http_calls=info.http_calls,
                     rate_wait_ms=round(info.waited_s * 1000, 1))


UNREACHABLE = re.compile(r"connection refused|error sending request|tcp connect|failed to connect|dns error|"
                         r"connecterror|no route to host|name or service not known", re.IGNORECASE)


def endpoint_error(api, exc: Exception, settings: LLMSettings) -> StepError:
    """One plain sentence first (what failed, where, what to do), then the details
    on the next line (the dashboard shows the first line and folds the rest)."""
    where = f"{settings.model} at {settings.base_url}"
    if UNREACHABLE.search(str(exc)):
        return StepError(f"cannot reach the LLM at {settings.base_url} — start Ollama, or set "
                         f"AGENTSVC_LLM_BASE_URL (or config.llm.base_url) to a running OpenAI-compatible server\n"
                         f"{type(exc).__name__}: {_short(str(exc))}")
    if isinstance(exc, api.errors.BamlTimeoutError):
        return StepError(f"LLM call timed out after {settings.timeout_s:g}s, also on every retry ({where})")
    if isinstance(exc, api.errors.BamlClientHttpError):
        return StepError(f"LLM endpoint answered HTTP {exc.status_code} after retries ({where})\n"
                         f"{_short(exc.message)}")
    return StepError(f"LLM call failed ({where})\n{type(exc).__name__}: {_short(str(exc))}")


def _short(text: str, limit: int = REASK_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


class BadToolCalls(ValueError):
    """The reply's tool_calls are malformed; the model is asked again, told why."""


def raw_reply(collector) -> str | None:
    return collector.last.raw_llm_response if collector.last else None


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
    again.  So the calls come from the raw reply when it holds readable JSON,
    and BAML's parse is used only when it does not (JSON that only BAML's
    repairs could read)."""
    obj = _reply_object(raw)
    if obj is None:
        return [{"name": call.name, "args": call.args} for call in parsed or []]
    calls = obj.get("tool_calls")
    if calls is None:
        return []
    if isinstance(calls, dict):
        calls = [calls]
    if not isinstance(calls, list):
        raise BadToolCalls("tool_calls must be a list of {name, args} objects ([] for none)")
    return [_one_call(i, call) for i, call in enumerate(calls)]


def to_frame_out(frame: FrameIn, out, raw: str | None = None) -> FrameOut:
    """The model's frame as the runner's FrameOut.  ``step`` is the token that
    was run, whatever the model echoed.  Tool calls pass through as the model
    wrote them: the runner checks each against the session's allowed tools and
    the tool's args schema, and tells the model in ``tool_results`` what was
    wrong.  A step with tool calls is never the last (the model sees the
    results next step), so ``done`` is dropped from such a reply."""
    calls = reply_tool_calls(raw, out.tool_calls)
    done = out.done and not calls
    return FrameOut(step=frame.step, next_step=out.next_step, state=out.state, text=out.text,
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


def prompt_frame(api, frame: FrameIn, ctx: StepContext, state_json: str, reask: str | None):
    """The BAML frame_in: v0's fields, plus the allowed tools, the previous
    step's tool results, the inbox (user guidance and messages are already in
    ``guidance``, so they are not repeated) and the profile's system prompt."""
    inbox = [item for item in getattr(frame, "inbox", None) or []
             if (item.kind if isinstance(item, BaseModel) else item.get("kind")) not in GUIDANCE_KINDS]
    return api.StepFrameIn(step=frame.step, state_json=state_json, guidance=frame.guidance, reask=reask,
                           tools_json=tools_text(getattr(ctx, "tools", None)),
                           tool_results_json=_json_text(getattr(frame, "tool_results", None)),
                           inbox_json=_json_text(inbox), system_prompt=getattr(ctx, "system_prompt", None))


async def baml_step(frame: FrameIn, ctx: StepContext) -> FrameOut:
    settings = resolve_settings(ctx.config)
    api = baml_api()
    state_json = json.dumps(frame.state, sort_keys=True, ensure_ascii=False)
    reask, raw = None, None
    for attempt in range(settings.max_reasks + 1):
        collector = api.Collector(name=f"{ctx.session_id}:{ctx.iteration}:{attempt}")
        frame_in = prompt_frame(api, frame, ctx, state_json, reask)
        info = CallInfo()
        estimate = estimate_tokens(state_json, ctx.task, frame.guidance, frame_in.tools_json, ctx.system_prompt,
                                   frame_in.tool_results_json, frame_in.inbox_json, reply_tokens=settings.max_tokens)
        try:
            out = await baml_call(api, settings, "RunMonikerStep", (frame_in, ctx.task), collector, info, estimate)
            return to_frame_out(frame, out, raw_reply(collector))
        except api.errors.BamlValidationError as exc:
            raw, reask = exc.raw_output, _short(exc.message)
        except BadToolCalls as exc:
            raw, reask = raw_reply(collector), _short(str(exc))
        except ValidationError as exc:  # parsed, but not a valid StepFrame (e.g. a 300-character token)
            raw = collector.last.raw_llm_response if collector.last else None
            reask = _short("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5]))
        except api.errors.BamlError as exc:
            raise endpoint_error(api, exc, settings) from None
        finally:
            record_ask(ctx, collector, settings, attempt, info)
        log.info("session %s step %s: unparseable reply (ask %d of %d): %s", ctx.session_id, frame.step,
                 attempt + 1, settings.max_reasks + 1, reask)
    raise StepError(f"unparseable LLM output after {settings.max_reasks + 1} ask(s): {reask}", raw_output=raw)


BAML = Moniker("baml", baml_step,
               "Thinks with an LLM via BAML RunMonikerStep on any OpenAI-compatible endpoint "
               "(env AGENTSVC_LLM_*, or config.llm per session).", config_model=BamlConfig)


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
