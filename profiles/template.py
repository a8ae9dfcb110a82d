"""Prompt templates: ``{{ field }}`` placeholders filled from a fixed set of fields.

Deliberately not Jinja: a placeholder is a name, looked up in a dict the
runner builds (the task, the date, the agent's name...); nothing in a profile
is ever evaluated.  An unknown field is an error when the profile loads, so a
typo is never sent to the model as literal braces.
"""
import re

FIELDS = {
    "task": "the session's task",
    "date": "today's date, UTC (YYYY-MM-DD)",
    "datetime": "now, UTC, ISO-8601 to the second",
    "agent_name": "the session's name (or its agent id when it has none)",
    "agent_id": "the agent's id",
    "session_id": "the session's id",
    "profile": "the profile's name",
    "iteration": "the runner's iteration of the step about to run (0-based)",
    "tools": "the names of the tools the session may call, comma-separated",
}
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def check_template(text: str) -> None:
    """Raise ValueError naming any unknown field (and the ones that exist)."""
    unknown = sorted({m.group(1) for m in PLACEHOLDER.finditer(text)} - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown template field(s) {unknown}; known: {sorted(FIELDS)}")


def render(text: str, values: dict) -> str:
    """``text`` with each placeholder replaced by ``str(values[name])`` ('' when
    the value is None).  The replacement is not scanned again, so a task that
    itself contains ``{{ date }}`` stays as the user wrote it."""
    return PLACEHOLDER.sub(lambda m: "" if values.get(m.group(1)) is None else str(values[m.group(1)]), text)
