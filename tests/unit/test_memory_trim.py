"""domain/memory.py: freed native memory goes back to the system.

glibc keeps what native code frees inside its heaps; a process whose native
buffers once peaked keeps that RSS.  These tests free memory the way LanceDB's
native code does (malloc'd, freed, with the heap's top still in use, so glibc
cannot shrink the heap by itself) and check that the trimmer gives it back.
"""
import ctypes
import os

import pytest

from domain import memory
from tests.harness import wait_for

pytestmark = pytest.mark.skipif(not memory.can_release(), reason="glibc's malloc_trim is needed")

BLOCK = 64 * 1024  # under glibc's mmap threshold: served from a heap, like most native buffers
BLOCKS = 1600  # 100 MiB


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_then_free() -> tuple[int, int]:
    """Allocate and touch 100 MiB in small blocks, free all but the last; the RSS
    before and after.  Free pages left by earlier tests are given back first, so
    the blocks' pages count in RSS even where they reuse free space."""
    memory.release_free_memory()
    before = _rss()
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(BLOCK) for _ in range(BLOCKS)]
    assert all(blocks)
    for block in blocks:
        ctypes.memset(block, 1, BLOCK)
    for block in blocks[:-1]:  # the last keeps the heap's top in use, as long-lived data does
        libc.free(block)
    return before, _rss()


def test_release_gives_freed_native_memory_back():
    before, retained = _peak_then_free()
    assert retained - before > 80 * 2**20, "glibc kept the freed blocks, as it does for LanceDB's buffers"
    assert memory.release_free_memory()
    assert retained - _rss() > 80 * 2**20


def test_the_trimmer_releases_on_its_own_and_stops_when_closed():
    _, retained = _peak_then_free()
    trimmer = memory.MemoryTrimmer(every_s=0.05).start()
    try:
        wait_for(lambda: retained - _rss() > 80 * 2**20 and trimmer.trims >= 1, timeout=90,
                 what="a trim that gives the freed memory back")
    finally:
        trimmer.close()
    # Closed, its thread ends: no trim can come after.
    wait_for(lambda: not trimmer._thread.is_alive(), timeout=90, what="the trimmer's thread to end")


def test_zero_means_never():
    trimmer = memory.MemoryTrimmer(every_s=0).start()
    assert not trimmer._thread.is_alive()
    trimmer.close()
