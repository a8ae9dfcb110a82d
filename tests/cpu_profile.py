"""Where the suite's CPU goes, test by test (a pytest plugin, off unless asked).

With ``AGENTSVC_SUITE_CPU=FILE`` every test appends one JSON line to FILE: its
node id, its wall time (setup, call and teardown) and the CPU seconds its xdist
worker's whole process tree used meanwhile — the worker itself, every service,
browser, model server or benchmark it started, alive or already reaped.  Each
worker runs one test at a time, so a test's line is the CPU it cost, whatever the
other worker did.  The suite is bound by CPU on two cores; summed per module
(``python -m tests.cpu_profile FILE``) this says what to make cheaper.
"""
import json
import os
import sys
import time
from collections import defaultdict

import psutil
import pytest

FILE = os.environ.get("AGENTSVC_SUITE_CPU")


def tree_cpu_s() -> float:
    """CPU seconds of this process, its reaped children and its live descendants."""
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:  # gone between the listing and the read
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not FILE:
        yield
        return
    wall0, cpu0 = time.monotonic(), tree_cpu_s()
    yield
    line = {"test": item.nodeid, "wall_s": round(time.monotonic() - wall0, 2),
            "cpu_s": round(tree_cpu_s() - cpu0, 2), "worker": os.environ.get("PYTEST_XDIST_WORKER", "-")}
    with open(FILE, "a") as out:
        out.write(json.dumps(line) + "\n")


def summary(path: str, top: int = 40) -> None:
    """Print CPU and wall summed per module, largest CPU first."""
    cpu, wall, count = defaultdict(float), defaultdict(float), defaultdict(int)
    for raw in open(path):
        row = json.loads(raw)
        module = row["test"].split("::")[0]
        cpu[module] += row["cpu_s"]
        wall[module] += row["wall_s"]
        count[module] += 1
    print(f"total: cpu {sum(cpu.values()):.0f} s, wall {sum(wall.values()):.0f} s, {sum(count.values())} tests")
    for module in sorted(cpu, key=cpu.get, reverse=True)[:top]:
        print(f"{cpu[module]:8.1f} cpu {wall[module]:8.1f} wall {count[module]:4d}  {module}")


if __name__ == "__main__":
    summary(sys.argv[1])
