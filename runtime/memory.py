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
"""
import ctypes
import logging
import sys
import threading

log = logging.getLogger("runtime.memory")


def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


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
