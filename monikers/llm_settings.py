"""Where a model call's settings come from: a session's ``config.llm`` wins over
the environment, which wins over the default.

=========================  ==========================  =============================
config ``llm.*``           environment variable        default
=========================  ==========================  =============================
``base_url``               AGENTSVC_LLM_BASE_URL       http://127.0.0.1:11434/v1 (Ollama)
``model``                  AGENTSVC_LLM_MODEL          llama3.2
``api_key_env`` (a NAME)   AGENTSVC_LLM_API_KEY        no key
``temperature``            AGENTSVC_LLM_TEMPERATURE    0.2
``timeout_s``              AGENTSVC_LLM_TIMEOUT_S      120 (per HTTP request)
``max_tokens``             AGENTSVC_LLM_MAX_TOKENS     1024 (a reply's cap)
``structured``             AGENTSVC_LLM_STRUCTURED     auto
``stream``                 AGENTSVC_LLM_STREAM         true
``seed``                   --                          none (the server's)
``max_reasks``             --                          2
``prices``                 --                          none (cost is null)
=========================  ==========================  =============================

The default is a local Ollama so that an unconfigured service never sends a
task to a paid cloud API.  Session config is persisted in the database, so it
never holds a key: ``llm.api_key_env`` names the environment variable that
does, and ``llm.api_key`` is rejected.

``max_tokens`` has a default because a model that is not held to a shape can
write for minutes (a 135M model wrote 800-1,600 tokens of prose per request):
a frame fits well within 1,024 tokens, and a step that needs more says so.
``structured`` chooses how the reply's shape is enforced (monikers/llm_call.py):
``json_schema`` sends the output schema, ``json_object`` asks for JSON only,
``off`` relies on the prompt, and ``auto`` starts with ``json_schema`` and
steps down, per base URL, when the server refuses the field.
"""
import os
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from domain.json_types import JsonInt, json_int
from monikers.frame import StepError

DEFAULTS = {"base_url": "http://127.0.0.1:11434/v1", "model": "llama3.2", "temperature": 0.2, "timeout_s": 120.0,
            "max_tokens": 1024, "structured": "auto", "stream": True}
STRUCTURED = ("auto", "json_schema", "json_object", "off")


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
    max_tokens: json_int(ge=1, le=1_000_000) | None = Field(None, description="a reply's cap (default 1024)")
    structured: Literal["auto", "json_schema", "json_object", "off"] | None = Field(
        None, description="how the reply's shape is enforced (default auto: the output schema when the server "
                          "takes it)")
    stream: bool | None = Field(None, description="stream replies, so the dashboard shows them as they come "
                                                  "(default true)")
    seed: json_int(ge=0, le=2**31 - 1) | None = Field(None, description="sampling seed, for servers that take one")
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


@dataclass(frozen=True)
class LLMSettings:
    """Everything one call needs to reach its model, resolved from config and environment."""

    base_url: str
    model: str
    api_key: str
    temperature: float
    timeout_s: float
    max_tokens: int
    max_reasks: int
    prices: Prices | None
    structured: str = "auto"
    stream: bool = True
    seed: int | None = None

    def client_options(self, timeout_s: float | None = None) -> dict:
        """BAML ``openai-generic`` options; ``timeout_s`` bounds this one request."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        options = {"base_url": self.base_url, "model": self.model, "temperature": self.temperature,
                   "max_tokens": self.max_tokens, "http": {"request_timeout_ms": max(1, round(timeout * 1000))}}
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


def _mode(value: str) -> str:
    """one of auto, json_schema, json_object, off"""
    if value not in STRUCTURED:
        raise ValueError(value)
    return value


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
        temperature=_first(cfg.temperature, _env("AGENTSVC_LLM_TEMPERATURE", DEFAULTS["temperature"], environ, _number)),
        timeout_s=cfg.timeout_s or _env("AGENTSVC_LLM_TIMEOUT_S", DEFAULTS["timeout_s"], environ, _number),
        max_tokens=cfg.max_tokens or _env("AGENTSVC_LLM_MAX_TOKENS", DEFAULTS["max_tokens"], environ, _count),
        max_reasks=cfg.max_reasks, prices=cfg.prices,
        structured=cfg.structured or _env("AGENTSVC_LLM_STRUCTURED", DEFAULTS["structured"], environ, _mode),
        stream=_first(cfg.stream, _env("AGENTSVC_LLM_STREAM", DEFAULTS["stream"], environ, _flag)),
        seed=cfg.seed,
    )
