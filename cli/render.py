"""How the CLI shows things: rich tables for people, JSON for scripts."""
import json
import os
import sys

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

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


def tail_of(text, width: int = 60) -> str:
    """The end of ``text`` on one line: what a model wrote last."""
    text = "" if text is None else " ".join(str(text).split())
    return text if len(text) <= width else "…" + text[-(width - 1):]


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


def delta_line(row: dict, width: int | None = None) -> str:
    """A step_delta in words: which step, how far along, and the end of the
    text so far (at most 60 characters of it, fewer when ``width`` is short)."""
    which = f"#{row.get('iteration')}"
    if row.get("function") not in (None, "RunMonikerStep"):
        which += f" {row['function']}"
    if (row.get("ask") or 0) > 0:
        which += f" ask {row['ask'] + 1}"
    doing = f"attempt {row.get('attempt')} ended" if row.get("final") else "generating"
    if not row.get("final") and (row.get("attempt") or 1) > 1:
        doing += f" (attempt {row['attempt']})"
    head = (f"model   {(row.get('session_id') or '')[-6:]} {which} {doing}: {row.get('tokens') or 0} tokens, "
            f"{row.get('mode')}: ")
    return head + tail_of(row.get("text"), 60 if width is None else max(10, min(60, width - len(head))))


class TailView:
    """``tail``'s table mode: one line per event, and the model output of steps
    being generated (``step_delta``).

    On a terminal, each session generating a step has one line below the
    others, rewritten in place (rich's Live) and gone once its step or a
    finished state arrives.  Anywhere else (a file, a pipe, a dumb terminal)
    a delta is printed only when an attempt ended (``final``), one line each,
    so a log stays readable at ten deltas a second."""

    def __init__(self, console: Console = out):
        self.console = console
        self.generating: dict[str, dict] = {}  # session -> its newest delta
        interactive = console.is_terminal and not console.is_dumb_terminal
        self.live = Live(console=console, auto_refresh=False, transient=True) if interactive else None

    def __enter__(self) -> "TailView":
        if self.live:
            self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.live.stop()

    def show(self, name: str, data: dict) -> None:
        row = data.get("data") or {}
        session = row.get("session_id") or data.get("id")
        if name == "step_delta":
            if self.live:
                self.generating[session] = row
            elif row.get("final"):
                self.console.print(delta_line(row), markup=False)
        else:
            self.console.print(event_line(name, data), markup=False)
            if self._ends_generation(name, row, self.generating.get(session)):
                self.generating.pop(session, None)
        if self.live:
            width = self.console.width - 1
            self.live.update(Group(*(Text(delta_line(row, width), no_wrap=True, overflow="ellipsis")
                                     for row in self.generating.values())), refresh=True)

    @staticmethod
    def _ends_generation(name: str, row: dict, delta: dict | None) -> bool:
        """A session's line goes when the step it previewed (or a later one)
        arrives, or the session is no longer running or waiting."""
        if delta is None:
            return False
        if name == "agent_step":
            return row.get("iteration", -1) >= delta.get("iteration", 0)
        return name == "agent_state" and row.get("status") not in ("running", "waiting")
