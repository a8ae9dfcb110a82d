"""domain/memory: glibc's malloc keeps at most N heaps, and large blocks in mappings of their own.

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

from domain import memory

pytestmark = pytest.mark.skipif(not memory.can_release(), reason="glibc is needed")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = textwrap.dedent("""
    import ctypes, os, sys, threading
    from domain import memory
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


# domain/memory.fix_mmap_threshold: large blocks keep coming from mappings of
# their own.  glibc, left alone, raises its threshold to the size of a mapped
# block when that is freed: a second block of half that size then comes from
# the heap, where it stays after free.
THRESHOLD_PROGRAM = textwrap.dedent("""
    import ctypes, sys
    from domain import memory
    print(memory.fix_mmap_threshold(int(sys.argv[1])))

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallinfo2.restype = MallInfo2
    libc.free(libc.malloc(4 << 20))  # a large buffer, used and freed
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(512 << 10)
    print(libc.mallinfo2().hblkhd - before >= 512 << 10)  # did the next one get a mapping of its own?
    libc.free(block)
""")


def _mapped(threshold_kib: int, env_threshold: str | None = None) -> list[str]:
    """(what fix_mmap_threshold returned, whether a 512 KiB block after a freed
    4 MiB one was mapped on its own) in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    if env_threshold:
        env["MALLOC_MMAP_THRESHOLD_"] = env_threshold
    done = subprocess.run([sys.executable, "-c", THRESHOLD_PROGRAM, str(threshold_kib)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_fixed_mmap_threshold_maps_every_large_block_after_a_larger_one_was_freed():
    assert _mapped(128) == ["True", "True"]


def test_without_it_glibc_raises_the_threshold_and_the_block_comes_from_the_heap():
    """The control: the program above does move glibc's threshold, so the test
    above shows the setting and not a block too large for the heap anyway."""
    assert _mapped(0) == ["False", "False"]


def test_an_operators_malloc_mmap_threshold_wins():
    # 8 MiB: the 4 MiB buffer comes from the heap, and glibc keeps the operator's threshold
    assert _mapped(128, env_threshold=str(8 << 20)) == ["False", "False"]


def test_an_mmap_threshold_glibc_would_refuse_is_an_error():
    with pytest.raises(ValueError, match="at most 32768 KiB"):
        memory.fix_mmap_threshold(64 * 1024)


def test_both_processes_default_to_128_kib_and_serve_passes_the_choice_on(monkeypatch):
    import agents
    import app
    import serve

    monkeypatch.delenv("AGENTSVC_MALLOC_MMAP_THRESHOLD_KB", raising=False)
    assert agents.parse_args([]).malloc_mmap_threshold_kb == 128
    assert app.parse_args([]).malloc_mmap_threshold_kb == 128
    passed = serve.child_args(serve.parse_args(["--malloc-mmap-threshold-kb", "0"]))
    assert passed[passed.index("--malloc-mmap-threshold-kb") + 1] == "0"
    monkeypatch.setenv("AGENTSVC_MALLOC_MMAP_THRESHOLD_KB", "256")
    assert agents.parse_args([]).malloc_mmap_threshold_kb == 256
    monkeypatch.setenv("AGENTSVC_MALLOC_MMAP_THRESHOLD_KB", "99999")
    with pytest.raises(SystemExit):  # a bad variable is argparse's error too, not a traceback at start
        agents.parse_args([])
    monkeypatch.delenv("AGENTSVC_MALLOC_MMAP_THRESHOLD_KB")
    with pytest.raises(SystemExit):  # argparse's error: more than glibc accepts
        agents.parse_args(["--malloc-mmap-threshold-kb", "40000"])
