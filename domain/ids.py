"""Where the ULIDs of every row get their random bits.

python-ulid asks ``os.urandom`` for ten bytes whenever the millisecond changes.
On the event loop that system call is not free: it releases the interpreter
lock, and with a committer thread wanting it the loop may wait a switch
interval to get it back (cProfile of 1,000 agents stepping: 4,269 calls taking
1.1 s, ~50 µs of every step).  :func:`install` points python-ulid's default
generator (which it documents as replaceable) at a buffer filled from
``os.urandom`` 4 KiB at a time: the same cryptographic bytes, one system call
per ~400 ids.  A forked child starts with an empty buffer, so parent and child
never hand out the same bytes.
"""
import os

import ulid

REFILL_BYTES = 4096


class BufferedRandomness:
    """``os.urandom`` bytes handed out in slices; called under the generator's lock."""

    def __init__(self):
        self._buffer = b""
        os.register_at_fork(after_in_child=self.clear)

    def clear(self) -> None:
        self._buffer = b""

    def __call__(self, _timestamp: int) -> bytes:
        size = ulid.constants.RANDOMNESS_LEN
        if len(self._buffer) < size:
            self._buffer = os.urandom(REFILL_BYTES)
        taken, self._buffer = self._buffer[:size], self._buffer[size:]
        return taken


def install() -> None:
    """Make ``ULID()`` draw from a :class:`BufferedRandomness` (once per process)."""
    if not isinstance(ulid.default_generator.randomness_source, BufferedRandomness):
        ulid.default_generator = ulid.ULIDGenerator(randomness=BufferedRandomness())
