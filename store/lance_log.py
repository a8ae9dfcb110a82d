"""Lance's own log lines, in our log.

LanceDB's Rust core logs with ``env_logger`` straight to file descriptor 2,
filtered by the ``LANCEDB_LOG`` variable.  Under load it warns on every
compaction that loses a commit race, in its own format, interleaved with ours,
and nothing in Python can filter or count it.  :func:`route_to_logging` puts a
pipe behind descriptor 2 and a thread that reads it: each line from Lance is
logged again through :mod:`logging`, under its Rust module path (``lance.io.commit``) and at its
own level, so operators get one format, one place and our level settings.
Other lines that native code writes to descriptor 2 go to the ``native`` logger.

Python's own ``sys.stderr`` keeps writing where descriptor 2 went before (a
duplicate of it), so our log handlers do not feed the pipe they read.  Call it
before ``logging`` is configured, once per process.
"""
import logging
import os
import re
import sys
import threading

# env_logger without colours: "[2026-11-23T04:20:00Z WARN  lance::io::commit] message"
LINE = re.compile(r"^\[\S+\s+(ERROR|WARN|INFO|DEBUG|TRACE)\s+([^\]\s]+)\]\s?(.*)$")
LEVELS = {"ERROR": logging.ERROR, "WARN": logging.WARNING, "INFO": logging.INFO,
          "DEBUG": logging.DEBUG, "TRACE": logging.DEBUG}

# Warnings Lance gives for what our maintenance expects and handles: a compaction
# preempted by a concurrent update is left for the next round (store.maintenance
# counts the table due again), so it is an event, not a problem.
EXPECTED = ("Compaction commit failed",)

_routed = False


def default_filter() -> None:
    """What Lance logs unless the operator says otherwise: warnings and errors,
    without terminal colours.  Read when lancedb loads, so set it before that."""
    os.environ.setdefault("LANCEDB_LOG", "warn")
    os.environ.setdefault("LANCEDB_LOG_STYLE", "never")


def route_to_logging() -> None:
    """Send what native code writes to descriptor 2 through :mod:`logging` (see the module doc)."""
    global _routed
    if _routed:
        return
    _routed = True
    original = os.dup(2)
    sys.stderr = os.fdopen(original, "w", buffering=1, encoding="utf-8", errors="replace")
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    threading.Thread(target=_relay, args=(read_end,), name="lance-log", daemon=True).start()


def _relay(read_end: int) -> None:
    with os.fdopen(read_end, "r", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            relay_line(line.rstrip("\n"))


def relay_line(line: str) -> None:
    """Log one line written to descriptor 2 at the level and under the module it names."""
    if not line.strip():
        return
    match = LINE.match(line)
    if match:
        level, module, message = match.groups()
        number = LEVELS[level]
        if number == logging.WARNING and message.startswith(EXPECTED):
            number = logging.INFO
        logging.getLogger(module.replace("::", ".")).log(number, "%s", message)
    else:
        logging.getLogger("native").warning("%s", line)
