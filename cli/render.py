"""How the CLI shows things: rich tables for people, JSON for scripts."""
import json
import os
import sys

from rich.console import Console
from rich.table import Table

# Piped into another program: wide lines rather than ids folded at 80 columns.
out = Console(highlight=False, soft_wrap=False,
              width=None if sys.stdout.isatty() else int(os.environ.get("COLUMNS") or 200))
err = Console(stderr=True, highlight=False)


def as_json(value) -> None:
    sys.stdout.write(json.dumps(value, default=str) + "\n")
    sys.stdout.flush()


def short(text, width: int = 60) -> str:
    text = "" if text is None else str(text).replace("\n", " ")
    return text if len(text) <= width else text[:width - 1] + "…"


def table(title: str | None, columns: list[str], rows: list[list]) -> None:
    t = Table(title=title, show_edge=False, header_style="bold")
    for column in columns:
        if column in ("agent", "session", "action", "id"):
            t.add_column(column, no_wrap=True, min_width=26)
        else:
            t.add_column(column, overflow="ellipsis")
    for row in rows:
        t.add_row(*["" if v is None else str(v) for v in row])
    out.print(t)


def sessions(snapshots: list[dict]) -> None:
    table(None, ["agent", "session", "moniker", "status", "iter", "updated", "task"],
          [[s.get("agent_id"), s.get("session_id"), s.get("moniker"), s.get("status"), s.get("iteration"),
            (s.get("updated_at") or "")[:19], short(s.get("task"), 40)] for s in snapshots])


def session(snapshot: dict) -> None:
    keys = ["agent_id", "session_id", "name", "moniker", "task", "status", "status_reason", "iteration",
            "next_step_token", "conversation_id", "owner", "last_error", "config", "usage", "created_at", "updated_at"]
    t = Table(show_header=False, show_edge=False)
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    for key in keys:
        if snapshot.get(key) not in (None, "", {}):
            value = snapshot[key]
            t.add_row(key, json.dumps(value) if isinstance(value, (dict, list)) else str(value))
    out.print(t)


def steps(rows: list[dict]) -> None:
    table(None, ["iter", "status", "step", "ms", "text"],
          [[s.get("iteration"), s.get("status"), s.get("step_token"),
            None if s.get("latency_ms") is None else round(s["latency_ms"]), short(s.get("text") or s.get("error"), 80)]
           for s in rows])


def event_line(event: str, data: dict) -> str:
    """One line per live event, for ``tail``."""
    row = data.get("data") or {}
    sid = (row.get("session_id") or "")[-6:]
    if event == "agent_step":
        return f"step    {sid} #{row.get('iteration')} {row.get('status')}: {short(row.get('text') or row.get('error'), 100)}"
    if event == "agent_state":
        return f"state   {sid} {row.get('status')} at iteration {row.get('iteration')}" + (
            f" ({row['status_reason']})" if row.get("status_reason") else "")
    if event == "action":
        return f"action  {sid} {row.get('type')} {row.get('status')}" + (f": {row['error']}" if row.get("error") else "")
    if event == "conversation_message":
        who = row.get("user_id") or row.get("agent_id") or row.get("sender_type")
        return f"message {who}: {short(row.get('text'), 100)}"
    return f"{event} {short(json.dumps(row), 100)}"
