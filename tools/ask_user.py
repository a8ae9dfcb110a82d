"""``ask_user``: a tool whose result comes from a human.

An *external* tool (no function runs): the call's row waits in
``waiting_result`` and its session is ``waiting`` with reason ``user`` until a
person answers (``POST /api/sessions/<id>/answer``, a reply in a conversation
the question was posted to, or the "Needs you" page) or ``timeout_s`` passes.
Posting the question, routing answers and the timeout are the runtime's
(runtime/dispatch/questions.py) and the API's (api/answers.py); this module holds
what both sides must agree on: the args, and the shape of the result the
model receives.

Result on an answer: ``{"answer": text, "choice": <the choice it matched, or
null>, "answered_by": user, "via": "api" | "conversation"}``.  ``choices`` are
offered (as buttons on the dashboard), not enforced: a free-text answer is
accepted and ``choice`` is then null.  A reply matches a choice when it equals
it ignoring case and surrounding space, or is its 1-based number.

On timeout: with a ``default``, the call succeeds with ``{"answer": default,
"choice": …, "timed_out": true}``; without one it ends ``failed`` with an
error starting ``unanswered:``, so the model knows nobody answered.
"""
from datetime import datetime, timedelta, timezone

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tools.tool import Tool

NAME = "ask_user"
MAX_TIMEOUT_S = 30 * 86_400
MAX_ANSWER = 20_000


class AskUserArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=4000, description="what to ask, in plain words")
    choices: list[str] | None = Field(None, min_length=1, max_length=20,
                                      description="answers to offer (a free-text answer is accepted too)")
    timeout_s: float | None = Field(None, gt=0, le=MAX_TIMEOUT_S,
                                    description="give up after this many seconds from when the call was made")
    default: str | None = Field(None, max_length=MAX_ANSWER, description="the answer used when timeout_s passes")

    @field_validator("question")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("question must not be blank")
        return value

    @field_validator("choices")
    @classmethod
    def _choices(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not c.strip() or len(c) > 500 for c in value):
            raise ValueError("each choice must be non-blank and at most 500 characters")
        return value


ASK_USER = Tool(NAME, "Ask the user a question and wait for the answer (the session waits; no model runs "
                "meanwhile). Optional: choices to offer, timeout_s and a default used when it passes.",
                None, AskUserArgs, external=True, waits_for="user")


def parse_args(args: dict) -> AskUserArgs | None:
    try:
        return AskUserArgs.model_validate(args or {})
    except ValueError:
        return None


def deadline(row: dict) -> datetime | None:
    """When an unanswered call times out (from when the call was made), or None."""
    args = parse_args(row.get("args"))
    created = row.get("created_at")
    if args is None or args.timeout_s is None or created is None:
        return None
    if isinstance(created, str):
        created = datetime.fromisoformat(created.replace("Z", "+00:00"))
    if created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    return created + timedelta(seconds=args.timeout_s)


def match_choice(text: str, choices: list[str] | None) -> str | None:
    """The choice a reply picks: equal ignoring case and space, or its 1-based number."""
    if not choices:
        return None
    said = text.strip()
    for choice in choices:
        if said.casefold() == choice.strip().casefold():
            return choice
    if said.isdigit() and 1 <= int(said) <= len(choices):
        return choices[int(said) - 1]
    return None


def answered(row: dict, text: str, *, answered_by: str | None, via: str) -> dict:
    """The row's change when a person answered."""
    args = parse_args(row.get("args"))
    return {"status": "success", "result": {"answer": text, "choice": match_choice(text, args and args.choices),
                                            "answered_by": answered_by, "via": via}}


def timed_out(row: dict) -> dict:
    """The row's change when nobody answered in time: the default, or ``unanswered``."""
    args = parse_args(row.get("args"))
    if args is not None and args.default is not None:
        return {"status": "success", "result": {"answer": args.default,
                                                "choice": match_choice(args.default, args.choices),
                                                "answered_by": None, "via": "timeout", "timed_out": True}}
    waited = args.timeout_s if args is not None else None
    return {"status": "failed", "error": f"unanswered: nobody answered within {waited} s and there is no default"}
