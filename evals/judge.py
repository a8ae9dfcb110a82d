"""The ``llm_judge`` scorer: a model grades the replay's final answer against
the recorded one, through the BAML function ``JudgeFinalAnswers``
(baml_src/judge.baml), on the same call path as every model call of the
service (monikers/llm_call.py: the shared rate limits, retries, structured
output, every attempt counted).

Why a judge at all: two runs of a task rarely write the same words, so the
exact scorers (final_equal, final_contains) say "different" where a person
would say "as good" or "better".  The judge sees the task, the reference (the
source session's final answer) and the candidate (the replay's) and returns
``{score 0..1, better: reference|candidate|tie, reason}``.

Its settings are the run's ``judge`` object: ``{llm?: {...the session config's
llm keys}, criteria?: str, pass_threshold?: float}``; missing ``llm`` keys come
from the environment and the defaults, as for a session (monikers/llm_settings.py).
Like a session, a judge names one of the operator's endpoints
(``llm.endpoint``) and never a URL or a key: ``JudgeSpec`` refuses them when
the run is created, and :func:`judge` again before a call.

A judge never crashes a run: a model that cannot be reached, a reply that does
not parse after ``max_reasks`` re-asks, a score outside 0..1, all end as a
score with ``value`` None and the reason in ``detail.error``.
"""
import dataclasses
import json

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from monikers import llm_call
from monikers.frame import StepError
from monikers.llm_call import CallInfo, baml_api, endpoint_error
from monikers.llm_gate import estimate_tokens
from monikers.llm_settings import LLMConfig, resolve_settings
from evals.diff import json_value

NAME = "llm_judge"
DESCRIPTION = "an LLM compares the replay's final answer with the recorded one against the task (0..1)"
FUNCTION = "JudgeFinalAnswers"
TASK_CHARS = 4000  # of the task, shown to the judge
ANSWER_CHARS = 6000  # of each answer
REASON_CHARS = 500  # of the verdict's reason, kept in the detail
NO_ANSWER = "(no final answer)"

VERDICT_SCHEMA = {  # JudgeVerdict (baml_src/judge.baml); the reason first, so the score follows from it
    "type": "object",
    "properties": {
        "reason": {"type": "string", "maxLength": 400},
        "better": {"enum": ["reference", "candidate", "tie"]},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["reason", "better", "score"],
    "additionalProperties": False,
}


class JudgeSpec(BaseModel):
    """The ``judge`` object of an eval run's body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    llm: LLMConfig | None = Field(None, description="the judge's endpoint and model (session config llm keys); "
                                                     "default: the default endpoint")
    criteria: str | None = Field(None, max_length=2000, description="what to grade on, shown to the judge")
    pass_threshold: float = Field(0.5, ge=0, le=1, description="a score at or above it passes")


class Unusable(Exception):
    """A reply that parsed but cannot be a verdict (a score outside 0..1)."""


def final_answer(record: dict) -> str:
    """A session's final answer as text: its result's text, then its data as JSON;
    without a result, its newest ok step's.  ``record`` is ``{snapshot, steps, ...}``."""
    result = json_value(((record or {}).get("snapshot") or {}).get("result"))
    if not isinstance(result, dict) or (not result.get("text") and result.get("data") in (None, {}, [])):
        ok = [s for s in (record or {}).get("steps") or [] if s.get("status") == "ok"]
        result = {"text": ok[-1].get("text"), "data": json_value(ok[-1].get("data"))} if ok else {}
    parts = [str(result.get("text") or "").strip()]
    if result.get("data") not in (None, {}, [], ""):
        parts.append("data: " + json.dumps(result["data"], sort_keys=True, default=str))
    return "\n".join(p for p in parts if p) or NO_ANSWER


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


def verdict_of(out) -> dict:
    """The parsed BAML verdict as plain values; a score outside 0..1 is :class:`Unusable`."""
    score = float(out.score)
    if not 0.0 <= score <= 1.0:
        raise Unusable(f"score {score:g} is outside 0..1")
    better = getattr(out.better, "value", out.better)
    return {"score": score, "better": str(better).lower(), "reason": (out.reason or "").strip()[:REASON_CHARS]}


async def judge(task: str, reference: str, candidate: str, llm: dict | None = None, *,
                criteria: str | None = None, pass_threshold: float = 0.5) -> dict:
    """Grade ``candidate`` against ``reference`` for ``task``: ``{"value", "passed",
    "detail"}``, where ``detail`` holds the verdict (``better``, ``reason``), the
    judge's ``model`` and ``usage``, or an ``error`` (then value and passed are None).
    Never raises for a model's failure."""
    detail: dict = {}
    try:
        settings = dataclasses.replace(resolve_settings({"llm": llm or {}}), stream=False)  # nobody watches it live
    except StepError as exc:
        return {"value": None, "passed": None, "detail": {"error": str(exc)}}
    api = baml_api()
    info, reask = CallInfo(), None
    args = (_clip(task or "", TASK_CHARS), _clip(reference, ANSWER_CHARS), _clip(candidate, ANSWER_CHARS), criteria)
    detail.update(model=settings.model)
    try:
        for _ask in range(settings.max_reasks + 1):
            try:
                out = await llm_call.call(api, settings, FUNCTION, (*args, reask), info=info,
                                          prompt_tokens=estimate_tokens(*args[:3], reply_tokens=0),
                                          schema=VERDICT_SCHEMA)
                verdict = verdict_of(out)
                break
            except api.errors.BamlValidationError as exc:
                reask = " ".join(str(exc.message).split())[:300]
            except Unusable as exc:
                reask = str(exc)
        else:
            detail.update(error=f"unparseable judge reply after {settings.max_reasks + 1} ask(s): {reask}",
                          raw=(info.raw or "")[:REASON_CHARS])
            return {"value": None, "passed": None, "detail": _with_usage(detail, settings, info)}
    except (api.errors.BamlError, llm_call.CallFailed, StepError) as exc:
        error = exc if isinstance(exc, StepError) else endpoint_error(api, exc, settings, info)
        detail.update(error=str(error).split("\n", 1)[0])
        return {"value": None, "passed": None, "detail": _with_usage(detail, settings, info)}
    detail.update(better=verdict["better"], reason=verdict["reason"])
    return {"value": verdict["score"], "passed": verdict["score"] >= pass_threshold,
            "detail": _with_usage(detail, settings, info)}


def _with_usage(detail: dict, settings, info: CallInfo) -> dict:
    usage = llm_call.usage_entry(settings, info)
    if usage:
        detail["usage"] = {k: usage[k] for k in ("input_tokens", "output_tokens", "cost", "http_calls")}
    return detail


async def llm_judge(source: dict, replay: dict, context: dict | None = None) -> dict:
    """The scorer: the source session's final answer is the reference, the
    replay's the candidate, the source's task the task.  ``context["judge"]`` is
    the run's ``judge`` object (:class:`JudgeSpec`).  Returns ``{"value",
    "passed", "detail"}`` (the fields of evals/scorers.py's Score): this module
    does not import the registry, which imports it."""
    raw = (context or {}).get("judge") or {}
    try:
        spec = JudgeSpec.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
        return {"value": None, "passed": None, "detail": {"error": f"invalid judge settings: {problems}"}}
    task = ((source or {}).get("snapshot") or {}).get("task") or ""
    llm = spec.llm.model_dump(exclude_none=True) if spec.llm else {}
    return await judge(task, final_answer(source), final_answer(replay), llm,
                       criteria=spec.criteria, pass_threshold=spec.pass_threshold)
