"""A step's state as a delta against the step before it, and back.

Every ``agent_steps`` row used to hold its session's whole state, so a state
that grows (a model keeping notes) made the history grow with the square of
the steps: 1,000 steps growing by 1 KB each took 349 MB for 0.95 MB of new
information.  A row may instead hold a *delta*: what changed since the
previous iteration's state.  This module is that delta (pure functions, no
storage) and the rule for when a row holds the whole state instead
(:class:`Chain`); store/steps.py writes and reads the rows.

A delta is JSON, one op per changed value, nested where dicts nest:

- ``["=", value]``: the value is replaced;
- ``["{", {key: op, ...}, [removed keys]]``: a dict keeps its other keys
  (the removed list is left out when empty);
- ``["[", n, [items]]``: a list keeps its first ``n`` items and the items
  follow (an append is ``n = len(old)``);
- ``["s", n, "text"]``: the same for a string (notes kept as one text).

It is not JSON Patch (RFC 6902): paths repeated per op and one op per list
item made an appended note cost more than the note, and the ``jsonpatch``
package diffs in pure Python at several times the cost of this.

States are compared as they read back: JSON text with sorted keys
(store/codec.py).  ``==`` cannot tell ``1`` from ``1.0`` or ``True``, so
:func:`delta_for` checks its work: the delta, applied to the old state, must
give the new state's exact text, or there is no delta and the row holds the
whole state.  So a wrong delta is never written, whatever the state holds.
"""
import json
import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future

from store import codec

log = logging.getLogger("store.state_delta")

MIN_STATE_BYTES = 2048  # smaller states are stored whole: a delta would save little, and each read stays one row
MAX_CHAIN_ROWS = 512  # deltas in a row after a whole state, at most: what reading one step may have to read
CHAIN_READ_RATIO = 2.0  # rebuilding a state may read at most this many times its own size
MIN_TEXT_PREFIX = 64  # a string shorter than this is replaced, not cut and extended


# ---- the delta ------------------------------------------------------------------


def diff(old, new) -> list:
    """The op that turns ``old`` into ``new`` (both JSON values)."""
    if type(old) is dict and type(new) is dict:
        return _diff_dict(old, new)
    if type(old) is list and type(new) is list:
        n = _common_prefix(old, new)
        return ["[", n, new[n:]] if n else ["=", new]
    if type(old) is str and type(new) is str and len(old) >= MIN_TEXT_PREFIX:
        n = _common_prefix(old, new)
        return ["s", n, new[n:]] if n >= MIN_TEXT_PREFIX else ["=", new]
    return ["=", new]


def _diff_dict(old: dict, new: dict) -> list:
    changed = {key: diff(old[key], value) if key in old else ["=", value]
               for key, value in new.items() if key not in old or old[key] != value}
    removed = [key for key in old if key not in new]
    return ["{", changed, removed] if removed else ["{", changed]


def _common_prefix(old, new) -> int:
    """How many leading items (or characters) ``old`` and ``new`` share.  The
    prefix is found by halving with slice comparisons, which run in C: an
    append, the common case, is settled by the first one."""
    lo, hi = 0, min(len(old), len(new))
    if old[:hi] == new[:hi]:
        return hi
    while lo < hi:  # old[:lo] == new[:lo] and old[:hi] != new[:hi]
        mid = (lo + hi + 1) // 2
        if old[:mid] == new[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def apply(base, op):
    """``base`` changed by ``op``.  Nothing is changed in place: what the op does
    not touch is shared with ``base`` (treat both as read-only).  A dict that
    gains keys keeps them in sorted order, as the whole state read back has them."""
    kind = op[0]
    if kind == "=":
        return op[1]
    if kind == "[" or kind == "s":
        return base[:op[1]] + op[2]
    if kind != "{":
        raise ValueError(f"not a state delta op: {kind!r}")
    out = dict(base)
    for key in op[2] if len(op) > 2 else ():
        out.pop(key, None)
    added = False
    for key, sub in op[1].items():
        added = added or key not in out
        out[key] = apply(out.get(key), sub)
    return dict(sorted(out.items())) if added else out


# ---- when a row holds a delta ----------------------------------------------------


class Chain:
    """The newest row a session's writer knows is stored, as the base of the next:
    its id and iteration, its state as it reads back, and the run of deltas it
    ends (the whole state they start from, and what they weigh)."""

    __slots__ = ("row_id", "iteration", "state", "base_iteration", "base_bytes", "delta_bytes", "rows")

    def __init__(self, row_id: str, iteration: int, state, base_iteration: int, base_bytes: int,
                 delta_bytes: int = 0, rows: int = 0):
        self.row_id, self.iteration, self.state = row_id, iteration, state
        self.base_iteration, self.base_bytes = base_iteration, base_bytes
        self.delta_bytes, self.rows = delta_bytes, rows

    @classmethod
    def whole(cls, row_id: str, iteration: int, text: str) -> "Chain":
        """A row that holds its whole state (``text``) starts a chain."""
        return cls(row_id, iteration, json.loads(text), iteration, len(text))


def delta_for(chain: Chain | None, row_id: str, iteration: int, state, text: str) -> tuple[str, Chain] | None:
    """The delta to store for ``state`` at ``iteration`` (``text``: its whole
    JSON), and the chain it extends; None when the row should hold the whole
    state: no base just before it, a small state, a chain at its length, a
    delta not smaller than the state, or a rebuild that would read more than
    ``CHAIN_READ_RATIO`` times the state (so storage stays within about twice
    what changed plus one whole state per ``MAX_CHAIN_ROWS`` rows, and a read
    within a bounded range of rows and bytes)."""
    if (chain is None or chain.iteration != iteration - 1 or len(text) < MIN_STATE_BYTES
            or chain.rows >= MAX_CHAIN_ROWS or type(state) not in (dict, list)):
        return None
    try:
        delta = codec.dumps(diff(chain.state, state))
    except Exception:  # e.g. keys that cannot be sorted: the whole state is written (or fails) as before
        log.debug("no delta for iteration %d", iteration, exc_info=True)
        return None
    read_bytes = chain.base_bytes + chain.delta_bytes + len(delta)
    if len(delta) >= len(text) or read_bytes > CHAIN_READ_RATIO * len(text):
        return None
    rebuilt = apply(chain.state, json.loads(delta))
    if codec.dumps(rebuilt) != text:  # e.g. 1 became 1.0 or True, which == does not see
        return None
    return delta, Chain(row_id, iteration, rebuilt, chain.base_iteration, chain.base_bytes,
                        chain.delta_bytes + len(delta), chain.rows + 1)


# ---- reading a chain back --------------------------------------------------------


MISSING = object()  # a delta whose chain is broken (never written so; see rebuild)


def rebuild(stored: dict, first: int, last: int) -> dict:
    """The states of iterations ``first``..``last`` from their stored rows,
    ``{iteration: (row id, state_base, state_prev, stored state)}`` (a whole
    state where state_base is None, else a delta against the row whose id is
    state_prev).  A delta is applied to the previous iteration's state; one
    whose previous row is not there, or is another row than the one it was
    made against, rebuilds to :data:`MISSING`.  States of neighbouring
    iterations share what did not change between them."""
    out, state, previous = {}, None, None  # previous: the id of the row ``state`` is of (None: unknown)
    for iteration in range(first, last + 1):
        if iteration not in stored:
            previous = None
            continue
        row_id, base, prev, value = stored[iteration]
        if base is None:
            state, previous = value, row_id
        elif previous is not None and prev in (previous, None):  # None: written before state_prev existed
            state, previous = apply(state, value), row_id
        else:
            previous = None
        out[iteration] = state if previous is not None else MISSING
    return out


# ---- what the writer knows -------------------------------------------------------


class LastStates:
    """Per session, the chain its newest step row ends and that row's commit
    future (concurrent or asyncio: both say done, cancelled, exception): a
    delta is written only against a row this process stored itself, at the
    iteration just before, whose commit has succeeded (a failed, fenced or
    cancelled commit never becomes a base, even if the row did land).
    Bounded: the least recently written sessions are forgotten first (their
    next row then holds its whole state)."""

    def __init__(self, max_sessions: int = 10_000, max_bytes: int = 64 * 1024 * 1024):
        """``max_bytes``: of the states' JSON text (their objects take a few times that)."""
        self.max_sessions, self.max_bytes = max_sessions, max_bytes
        self._by_session: OrderedDict[str, tuple[Chain, Future, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def base(self, session_id: str) -> Chain | None:
        with self._lock:
            found = self._by_session.get(session_id)
        if found is None:
            return None
        chain, committed, _ = found
        if not committed.done() or committed.cancelled() or committed.exception() is not None:
            return None
        return chain

    def remember(self, session_id: str, chain: Chain | None, committed: Future, weight: int) -> None:
        """The row just submitted for ``session_id`` (``chain`` None: it starts no chain)."""
        with self._lock:
            self._drop(session_id)
            if chain is None:
                return
            self._by_session[session_id] = (chain, committed, weight)
            self._bytes += weight
            while len(self._by_session) > self.max_sessions or self._bytes > self.max_bytes:
                self._drop(next(iter(self._by_session)))

    def forget(self, session_ids) -> None:
        with self._lock:
            for session_id in session_ids:
                self._drop(session_id)

    def _drop(self, session_id: str) -> None:
        found = self._by_session.pop(session_id, None)
        if found is not None:
            self._bytes -= found[2]
