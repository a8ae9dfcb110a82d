"""Giving freed native memory back to the operating system, now and then.

LanceDB's native code allocates through glibc's malloc, and some of what it
does needs large buffers for a moment: reading pages of rows, and above all
maintenance, which compacts fragments and merges index segments (a merge of
the full-text index reads the whole index, so its buffers grow with the
table).  When those buffers are freed, glibc keeps the memory in its heaps for
reuse and only returns the free space at the *top* of a heap.  Free pages in
the middle stay in the process: RSS climbs to each new high-water mark and
stays there, which in the soak looked like a leak of several MB a minute
(issue 9).  ``malloc_trim(0)`` walks every heap and returns every whole free
page; on a soaking agents.py one call took RSS from 512 to 460 MB.

:class:`MemoryTrimmer` makes that call every ``every_s`` seconds from a daemon
thread.  The call runs without the GIL (ctypes releases it), takes
milliseconds, and changes nothing but where free memory lives.  Elsewhere than
on glibc (macOS, musl) there is no such call and the trimmer does nothing.

Trimming returns free pages but not the heaps themselves.  glibc gives a
thread that finds its heap busy a heap ("arena") of its own, up to eight per
core, and LanceDB's runtime has many threads: each arena keeps its own
high-water mark and its own fragmentation.  :func:`limit_arenas` caps their
number (``mallopt(M_ARENA_MAX)``, as the ``MALLOC_ARENA_MAX`` variable does).
Measured side by side (BENCHMARKS.md §4d), three agents.py under the same load
for 13 minutes: with the default arenas RSS went 385 -> 428 MB, with four
386 -> 436 MB, with two 383 -> 391 MB and flat after the second minute, for
the same CPU time.
"""
import ctypes
import logging
import os
import sys
import threading

log = logging.getLogger("runtime.memory")


def _glibc_function(name: str):
    """A function of glibc's allocator, or None elsewhere (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def _malloc_trim():
    trim = _glibc_function("malloc_trim")
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()
_M_ARENA_MAX = -8  # glibc's malloc.h


def limit_arenas(count: int) -> bool:
    """Let glibc's malloc use at most ``count`` heaps for all threads; True if set.

    Call it first, before threads allocate: glibc fixes its limit once more
    than eight arenas exist and never removes one.  ``0`` leaves glibc's
    default, and so does a ``MALLOC_ARENA_MAX`` set in the environment (the
    operator's own choice, already applied by glibc at start)."""
    mallopt = _glibc_function("mallopt")
    if count <= 0 or os.environ.get("MALLOC_ARENA_MAX") or mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(_M_ARENA_MAX, count) != 1:
        log.warning("glibc refused to limit malloc arenas to %d", count)
        return False
    return True


def can_release() -> bool:
    """Whether this platform's allocator can be asked to give memory back."""
    return _TRIM is not None


def release_free_memory() -> bool:
    """Return the allocator's free pages to the system; True if any were."""
    return bool(_TRIM(0)) if _TRIM is not None else False


class MemoryTrimmer:
    """Calls :func:`release_free_memory` every ``every_s`` seconds until closed."""

    def __init__(self, every_s: float):
        self.every_s = every_s
        self.trims = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-trim", daemon=True)

    def start(self) -> "MemoryTrimmer":
        if self.every_s > 0 and can_release():
            self._thread.start()
            log.info("returning freed native memory to the system every %g s", self.every_s)
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                release_free_memory()
                self.trims += 1
            except Exception as exc:  # never let upkeep of memory take the process down
                log.warning("malloc_trim failed: %s", exc)
                return
