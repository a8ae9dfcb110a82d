"""runtime/memory.limit_arenas: glibc's malloc keeps at most N heaps (issue 9).

Each test runs in a fresh interpreter, because the limit must be set before
threads allocate and is fixed for the life of a process.  Sixteen threads
allocate at once so that glibc, unlimited, gives most of them an arena of
their own; ``malloc_info`` lists one ``<heap nr=…>`` per arena.
"""
import os
import subprocess
import sys
import textwrap

import pytest

from runtime import memory

pytestmark = pytest.mark.skipif(not memory.can_release(), reason="glibc is needed")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = textwrap.dedent("""
    import ctypes, os, sys, threading
    from runtime import memory
    print(memory.limit_arenas(int(sys.argv[1])))
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    start = threading.Barrier(16)

    def churn():
        start.wait()
        for _ in range(2000):  # all sixteen at once: glibc meets busy heaps and makes new ones
            libc.free(libc.malloc(4096))
        blocks = [libc.malloc(4096) for _ in range(50)]
        threading.Event().wait(0.2)
        for block in blocks:
            libc.free(block)

    threads = [threading.Thread(target=churn) for _ in range(16)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    out = libc.fopen(sys.argv[2].encode(), b"w")
    libc.malloc_info(0, out)
    libc.fclose(out)
""")


def _arenas(tmp_path, limit: int, env_arena_max: str | None = None) -> tuple[str, int]:
    """(what limit_arenas returned, how many heaps malloc_info lists) in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    if env_arena_max:
        env["MALLOC_ARENA_MAX"] = env_arena_max
    info = tmp_path / f"info-{limit}-{env_arena_max}.xml"
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(limit), str(info)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), info.read_text().count("<heap nr=")


def test_limit_arenas_keeps_every_thread_in_two_heaps(tmp_path):
    returned, heaps = _arenas(tmp_path, 2)
    assert returned == "True"
    assert 1 <= heaps <= 2


def test_without_the_limit_the_same_threads_spread_over_more_heaps(tmp_path):
    """The control: the program above does make glibc open more arenas, so the
    test above shows the limit and not a program too gentle to need it."""
    returned, heaps = _arenas(tmp_path, 0)
    assert returned == "False"
    assert heaps > 2


def test_an_operators_malloc_arena_max_wins(tmp_path):
    returned, heaps = _arenas(tmp_path, 2, env_arena_max="6")
    assert returned == "False"
    assert heaps > 2
