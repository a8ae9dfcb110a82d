"""Giving freed native memory back to the operating system, now and then.

LanceDB's native code allocates through glibc's malloc, and some of what it
does needs large buffers for a moment: reading pages of rows, and above all
maintenance, which compacts fragments and merges index segments (a merge of
the full-text index reads the whole index, so its buffers grow with the
table).  When those buffers are freed, glibc keeps the memory in its heaps for
reuse and only returns the free space at the *top* of a heap.  Free pages in
the middle stay in the process: RSS climbs to each new high-water mark and
stays there, which in the soak looked like a leak of several MB a minute.
``malloc_trim(0)`` walks every heap and returns every whole free
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

What was left grew in steps.  glibc serves a request of at least its "mmap
threshold" (128 KiB at start) from a mapping of its own, returned to the system
on free; but when such a block is freed it raises the threshold to the block's
size, up to 32 MiB.  Once the first large buffer (a page of rows, a
compaction's or an index merge's) was freed, later ones came from the heaps.
Small long-lived allocations then landed in the space those buffers had used,
and pinned its pages: each spike of buffers left the heaps larger than before.
In a 14-minute soak at the default load agents.py's two heaps held 60-96 MB at
minute 2, 73-75 at minute 8 and 95-141 at minute 12-14; under memray (another
run) the bytes in use were flat all the while.  :func:`fix_mmap_threshold` sets
the threshold once (``mallopt(M_MMAP_THRESHOLD)``, as
``MALLOC_MMAP_THRESHOLD_`` does), which also stops glibc from moving it: large
buffers always come and go as mappings of their own.  The same soak with 128
KiB: 59-61 MB at minute 2, 60-61 at minute 8, 62-65 at minute 12-14, for the
same CPU time and steps/s (BENCHMARKS.md §4i).
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
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX_KIB = 32 * 1024  # glibc refuses more (HEAP_MAX_SIZE / 2 on 64-bit)


def _mallopt(option: int, value: int, env: str, what: str) -> bool:
    """``mallopt(option, value)``; False where there is no glibc, or where the
    operator set the same option through ``env`` (glibc applied it at start)."""
    mallopt = _glibc_function("mallopt")
    if os.environ.get(env) or mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(option, value) != 1:
        log.warning("glibc refused to set %s to %d", what, value)
        return False
    return True


def limit_arenas(count: int) -> bool:
    """Let glibc's malloc use at most ``count`` heaps for all threads; True if set.

    Call it first, before threads allocate: glibc fixes its limit once more
    than eight arenas exist and never removes one.  ``0`` leaves glibc's
    default, and so does a ``MALLOC_ARENA_MAX`` set in the environment (the
    operator's own choice, already applied by glibc at start)."""
    return count > 0 and _mallopt(_M_ARENA_MAX, count, "MALLOC_ARENA_MAX", "the malloc arenas")


def fix_mmap_threshold(kib: int) -> bool:
    """Serve every request of ``kib`` KiB or more from a mapping of its own, for
    the life of the process, and stop glibc from raising that threshold; True
    if set.  ``0`` leaves glibc's moving threshold, and so does a
    ``MALLOC_MMAP_THRESHOLD_`` in the environment.  Call it before the store's
    threads allocate: blocks already in the heaps stay there."""
    if kib <= 0:
        return False
    if kib > MMAP_THRESHOLD_MAX_KIB:
        raise ValueError(f"the mmap threshold is at most {MMAP_THRESHOLD_MAX_KIB} KiB, not {kib}")
    return _mallopt(_M_MMAP_THRESHOLD, kib * 1024, "MALLOC_MMAP_THRESHOLD_", "the mmap threshold")


def tune_allocator(arenas: int, mmap_threshold_kib: int) -> list[str]:
    """Both settings above, first thing in a process; what was set, for its log."""
    applied = []
    if limit_arenas(arenas):
        applied.append(f"{arenas} arenas")
    if fix_mmap_threshold(mmap_threshold_kib):
        applied.append(f"mmap threshold {mmap_threshold_kib} KiB")
    return applied


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
