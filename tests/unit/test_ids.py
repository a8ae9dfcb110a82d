"""domain/ids.py: ULIDs drawn from buffered os.urandom bytes stay unique, in
order within a thread's run of calls, across threads and refills, and between
a parent and a forked child."""
import os
import threading

import ulid
from ulid import ULID

from domain import ids


def test_install_routes_ulid_through_the_buffer_once():
    ids.install()
    generator = ulid.default_generator
    ids.install()
    assert ulid.default_generator is generator
    assert isinstance(generator.randomness_source, ids.BufferedRandomness)


def test_ids_are_in_order_in_one_thread_and_unique_across_refills_and_threads():
    ids.install()
    one = [str(ULID()) for _ in range(5000)]
    assert one == sorted(one) and len(set(one)) == 5000
    # (Across threads python-ulid reads the clock outside its lock, so a thread's
    # ids may come out of order there, with its own randomness source as well.)
    made: list[list[str]] = [[] for _ in range(4)]

    def make(out):
        for _ in range(5000):
            out.append(str(ULID()))
    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for out in made for i in out]
    assert len(set(every)) == 20000  # 20,000 ids span many 4 KiB refills


def test_a_forked_child_does_not_reuse_its_parents_bytes():
    ids.install()
    source = ulid.default_generator.randomness_source
    source(0)  # the buffer holds bytes now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the bytes it would hand out next
        os.write(write, source(0))
        os._exit(0)
    os.close(write)
    child = os.read(read, 64)
    os.waitpid(pid, 0)
    assert len(child) == 10 and child != source(0)
