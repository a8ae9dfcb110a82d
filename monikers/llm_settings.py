"""Where a model call's settings come from: a session's ``config.llm`` wins over
the environment, which wins over the default; the endpoint, and so the URL and
the key, is always the operator's (monikers/endpoints.py), picked by name.

=========================  ==========================  =============================
config ``llm.*``           environment variable        default
=========================  ==========================  =============================
``endpoint`` (a NAME)      (the endpoints file)        ``default``
``model``                  AGENTSVC_LLM_MODEL          the endpoint's default model
``temperature``            AGENTSVC_LLM_TEMPERATURE    0.2
``timeout_s``              AGENTSVC_LLM_TIMEOUT_S      120 (per HTTP request)
``max_tokens``             AGENTSVC_LLM_MAX_TOKENS     per mode (a reply's cap, below)
``max_tool_calls``         AGENTSVC_LLM_MAX_TOOL_CALLS 4, 2 under grammar (calls a step may ask for)
``structured``             AGENTSVC_LLM_STRUCTURED     the endpoint's (auto)
``stream``                 AGENTSVC_LLM_STREAM         true
``seed``                   --                          none (the server's)
``max_reasks``             --                          2
``prices``                 --                          none (cost is null)
=========================  ==========================  =============================

(``AGENTSVC_LLM_MODEL`` and ``AGENTSVC_LLM_STRUCTURED`` are the ``default``
endpoint's, with ``AGENTSVC_LLM_BASE_URL`` and ``AGENTSVC_LLM_API_KEY``, unless
the endpoints file names ``default``.)

No config names a URL, a key or the variable that holds one: ``llm.base_url``,
``llm.api_key`` and ``llm.api_key_env`` are refused wherever an ``llm`` object
is read (a create, a fork, a replay, an eval run's judge, a profile, an
orchestrator's ``sub_config``) and again by the worker before a call, so a
config stored before endpoints existed is never followed either: its step
fails saying why.  ``endpoint`` must be one the operator named and ``model``
one it serves, checked the same way.

``max_tokens`` has a default because a model that is not held to a shape can
write for minutes (a 135M model wrote 800-1,600 tokens of prose per request).
The default is what a reply needs (:data:`FRAME_TOKENS`): a step frame under
the enforced schema (``json_schema``) is bounded by it (``text`` 300
characters, a few calls, a small ``state``) and fits in 512 tokens, and in
256 under the compact grammar (``grammar``: no indentation to fill); without
a grammar a frame gets 1,024; the other functions (orchestrator, summary, judge)
1,024.  A frame cut at the cap is not a frame (monikers/baml_moniker.py).
``max_tool_calls`` bounds the calls of one step in the schema the server
enforces and in the moniker's check (a small model otherwise repeats a call
up to the cap).
``structured`` chooses how the reply's shape is enforced (monikers/llm_call.py):
``json_schema`` sends the output schema, ``grammar`` sends it as llama.cpp's
own ``grammar`` field, compactly written (monikers/gbnf.py: a small model
otherwise fills the server's whitespace allowance), ``json_object`` asks for JSON only,
``off`` relies on the prompt, and ``auto`` starts with ``json_schema`` and
steps down, per base URL, when the server refuses the field.
"""
import os
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from domain.json_types import JsonInt, json_int
from monikers import endpoints
from monikers.endpoints import EndpointError
from monikers.frame import DEFAULT_TOOL_CALLS, StepError

DEFAULTS = {"temperature": 0.2, "timeout_s": 120.0, "max_tokens": 1024, "stream": True,
            "max_tool_calls": DEFAULT_TOOL_CALLS}
FRAME_TOKENS = {"json_schema": 512, "grammar": 256}
# Calls a step may ask for under the compact grammar, unless set: SmolLM2
# wrote the same ask_user call 4 times (the cap then) and its frame was cut
# at 256 tokens; identical calls are merged, but their tokens were spent.
COMPACT_TOOL_CALLS = 2  # RunMonikerStep's default cap per structured mode; others: max_tokens

# Keys an API caller once could set and no longer may, with what to use instead.
OPERATOR_ONLY = {
    "base_url": "model endpoints are the operator's: name one with llm.endpoint (GET /api/endpoints lists them); "
                "the operator adds endpoints in the endpoints file (--llm-endpoints, AGENTSVC_LLM_ENDPOINTS) "
                "or points the default one elsewhere with AGENTSVC_LLM_BASE_URL",
    "api_key": "keys are never in a config: an endpoint's key is the operator's (api_key_env of its entry in the "
               "endpoints file, --llm-endpoints / AGENTSVC_LLM_ENDPOINTS; AGENTSVC_LLM_API_KEY for the default "
               "endpoint); name the endpoint with llm.endpoint",
    "api_key_env": "which environment variable holds an endpoint's key is the operator's choice (api_key_env of its "
                   "entry in the endpoints file, --llm-endpoints / AGENTSVC_LLM_ENDPOINTS; AGENTSVC_LLM_API_KEY for "
                   "the default endpoint); name the endpoint with llm.endpoint",
}


def refuse_operator_keys(data):
    """``data`` (an ``llm`` object) without the keys only the operator sets: a
    value there is a ValueError naming the setting to use; a null one (configs
    stored before endpoints wrote ``"base_url": null``) is dropped."""
    if not isinstance(data, dict):
        return data
    for key, instead in OPERATOR_ONLY.items():
        if data.get(key) is not None:
            raise ValueError(f"llm.{key} is not accepted: {instead}")
    return {k: v for k, v in data.items() if k not in OPERATOR_ONLY}


class Prices(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    input_per_1k: float = Field(0.0, ge=0, description="price of 1,000 prompt tokens")
    output_per_1k: float = Field(0.0, ge=0, description="price of 1,000 completion tokens")


class LLMConfig(BaseModel):
    """The ``llm`` object of a session's config."""

    model_config = ConfigDict(extra="forbid", strict=True)

    endpoint: endpoints.EndpointName | None = Field(
        None, description="the operator's endpoint to call, by name (GET /api/endpoints; default: default)")
    model: str | None = Field(None, min_length=1, max_length=200,
                              description="a model the endpoint serves (default: its default model)")
    temperature: float | None = Field(None, ge=0, le=2)
    timeout_s: float | None = Field(None, gt=0, le=3600)
    max_tokens: json_int(ge=1, le=1_000_000) | None = Field(
        None, description="a reply's cap (default: a step frame 512 under json_schema, "
                                                      "256 under grammar, else 1024)")
    max_tool_calls: json_int(ge=0, le=32) | None = Field(None, description="tool calls one step may ask for "
                                                                         "(default 4)")
    structured: Literal["auto", "json_schema", "grammar", "json_object", "off"] | None = Field(
        None, description="how the reply's shape is enforced (default: the endpoint's, auto unless the operator "
                          "says otherwise: the output schema when the server takes it)")
    stream: bool | None = Field(None, description="stream replies, so the dashboard shows them as they come "
                                                  "(default true)")
    seed: json_int(ge=0, le=2**31 - 1) | None = Field(None, description="sampling seed, for servers that take one")
    max_reasks: JsonInt = Field(2, ge=0, le=10)
    prices: Prices | None = None

    @model_validator(mode="before")
    @classmethod
    def no_addresses_or_keys(cls, data):
        return refuse_operator_keys(data)

    @model_validator(mode="after")
    def served(self) -> "LLMConfig":
        """The endpoint is one the operator named, and serves the model."""
        try:
            endpoints.catalog().check(self.endpoint, self.model)
        except EndpointError as exc:
            raise ValueError(str(exc)) from None
        return self


@dataclass(frozen=True)
class LLMSettings:
    """Everything one call needs to reach its model, resolved from config and environment."""

    endpoint: str  # its name: what messages and records say (the URL is the operator's)
    base_url: str
    model: str
    api_key: str
    temperature: float
    timeout_s: float
    max_tokens: int | None  # None: the default per function and mode (tokens_for)
    max_reasks: int
    prices: Prices | None
    structured: str = "auto"
    stream: bool = True
    seed: int | None = None
    max_tool_calls: int = DEFAULTS["max_tool_calls"]

    def tokens_for(self, function: str, mode: str) -> int:
        """A reply's cap: the one set, else what ``function``'s reply needs in ``mode``."""
        if self.max_tokens is not None:
            return self.max_tokens
        if function == "RunMonikerStep":
            return FRAME_TOKENS.get(mode, DEFAULTS["max_tokens"])
        return DEFAULTS["max_tokens"]

    def client_options(self, timeout_s: float | None = None) -> dict:
        """BAML ``openai-generic`` options; ``timeout_s`` bounds this one request."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        options = {"base_url": self.base_url, "model": self.model, "temperature": self.temperature,
                   "max_tokens": self.max_tokens or DEFAULTS["max_tokens"], "http": {"request_timeout_ms": max(1, round(timeout * 1000))}}
        if self.api_key:
            options["api_key"] = self.api_key
        if self.seed is not None:
            options["seed"] = self.seed
        return options

    def cost(self, input_tokens: int, output_tokens: int) -> float | None:
        if self.prices is None:
            return None
        return input_tokens / 1000 * self.prices.input_per_1k + output_tokens / 1000 * self.prices.output_per_1k


def _env(name: str, default, environ, parse):
    value = environ.get(name)
    if value in (None, ""):
        return default
    try:
        return parse(value)
    except ValueError:
        raise StepError(f"environment variable {name}={value!r} is not valid: {parse.__doc__}") from None


def _number(value: str) -> float:
    """a number"""
    return float(value)


def _count(value: str) -> int:
    """a positive integer"""
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def _flag(value: str) -> bool:
    """true or false (1/0)"""
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


def _first(*values):
    return next(v for v in values if v is not None)


def resolve_settings(config: dict, environ=os.environ) -> LLMSettings:
    """Session config over environment over defaults, on the operator's endpoint;
    any bad value, an unknown endpoint or a model it does not serve is a StepError."""
    raw = config.get("llm") or {}
    try:
        cfg = LLMConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'llm'}: {e['msg']}" for e in exc.errors()[:5])
        raise StepError(f"invalid llm config: {problems}") from None
    name = cfg.endpoint or endpoints.DEFAULT
    try:
        endpoint = endpoints.catalog().get(name, environ)
        api_key = endpoint.key(environ)
    except EndpointError as exc:
        raise StepError(f"llm endpoint {name!r}: {exc}") from None
    structured = cfg.structured or endpoint.structured
    return LLMSettings(
        endpoint=name, base_url=endpoint.base_url, model=cfg.model or endpoint.model, api_key=api_key,
        temperature=_first(cfg.temperature, _env("AGENTSVC_LLM_TEMPERATURE", DEFAULTS["temperature"], environ, _number)),
        timeout_s=cfg.timeout_s or _env("AGENTSVC_LLM_TIMEOUT_S", DEFAULTS["timeout_s"], environ, _number),
        max_tokens=cfg.max_tokens or _env("AGENTSVC_LLM_MAX_TOKENS", None, environ, _count),
        max_tool_calls=_first(cfg.max_tool_calls, _env("AGENTSVC_LLM_MAX_TOOL_CALLS",
                                                        COMPACT_TOOL_CALLS if structured == "grammar"
                                                        else DEFAULTS["max_tool_calls"], environ, _count)),
        max_reasks=cfg.max_reasks, prices=cfg.prices,
        structured=structured,
        stream=_first(cfg.stream, _env("AGENTSVC_LLM_STREAM", DEFAULTS["stream"], environ, _flag)),
        seed=cfg.seed,
    )
