"""``agents.py --processes N``: N worker processes on one machine, one per core.

One agents.py process runs its sessions on one event loop, so it uses one
core; the others idle.  With N > 1 agents.py does not serve itself but runs
this supervisor, which starts N ordinary agents.py workers (the same options,
``--processes 1``) and looks after them.  The workers share the store exactly
as workers on several machines do (heartbeats, leases and fencing, adoption:
runtime/worker/service.py); each claims its own worker id (a slot
``<host>-<n>`` on a local data dir, runtime/base/identity.py), and new
sessions are spread between them (runtime/dispatch/create_share.py).

The supervisor
- forwards SIGTERM / SIGINT to every worker (each stops gracefully: steps in
  flight finish and are recorded) and exits once they have, and SIGHUP (each
  re-reads the profiles directory);
- restarts a worker that exits on its own, after a backoff (1 s, doubling up
  to 30 s, back to 1 s once a worker has run a minute).  On a local data dir
  the new process gets the dead one's slot, so its id, and resumes its
  sessions at once; elsewhere its sessions are adopted once its heartbeat is
  stale (``--dead-after``);
- cannot leave workers behind: each worker asks the kernel for SIGTERM when
  the supervisor dies, however it dies (``PR_SET_PDEATHSIG``, Linux:
  :func:`die_with_supervisor`).

Table upkeep runs in worker 0 only (:func:`worker_argv`).

agents.py checks its options, then becomes the supervisor by ``exec``
(:func:`become_supervisor`: same pid, so whoever started agents.py signals
and waits for the supervisor), which imports only this module: the
supervisor holds ~15 MB instead of the ~180 MB of agents.py's imports.

Ports: worker i (from 0) serves ``--health-port`` + i and ``--metrics-port``
+ i (0 stays off); ``--worker-id X`` becomes ``X-i``.  The supervisor serves no
port of its own: app.py's ``GET /readyz`` counts the polling workers from
their heartbeats, and a probe of one worker's port speaks for that worker.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

log = logging.getLogger("agents.processes")

SUPERVISOR_ENV = "AGENTSVC_SUPERVISOR_PID"  # set in each worker's environment: whom to die with
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WORKER_LOG_FORMAT = "%(asctime)s %(levelname)s [pid %(process)d] %(name)s: %(message)s"
FIRST_BACKOFF_S, MAX_BACKOFF_S, HEALTHY_AFTER_S = 1.0, 30.0, 60.0


def default_processes() -> int:
    """The cores this process may run on (its CPU affinity, which a container's
    cpuset or ``taskset`` narrows), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def die_with_supervisor() -> None:
    """In a worker the supervisor started: tag its log lines with its pid (the
    supervisor logs which worker has which pid); have the kernel send this process
    SIGTERM when the supervisor dies (even by SIGKILL), then exit at once if
    it died already (between the fork and this call).  Does nothing in a
    process started any other way."""
    supervisor = os.environ.get(SUPERVISOR_ENV)
    if not supervisor:
        return
    for handler in logging.getLogger().handlers:  # the workers share one log: say whose line it is
        handler.setFormatter(logging.Formatter(WORKER_LOG_FORMAT))
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    if os.getppid() != int(supervisor):
        log.error("the supervisor (pid %s) is gone; this worker exits", supervisor)
        sys.exit(1)


def worker_argv(argv: list[str], index: int, *, worker_id: str | None, health_port: int,
                metrics_port: int, commit_interval_s: float | None = None, processes: int = 1) -> list[str]:
    """Worker ``index``'s options: the supervisor's own (argparse keeps the last
    of a repeated option), as one process, with its own ports and id.  Table
    upkeep (store/maintenance.py) runs in worker 0 alone: each worker counts
    the same tables' versions, so two would compact the same fragments at the
    same moments, twice the work, each preempting the other's commit.

    ``commit_interval_s`` (``--commit-interval``) paces each table's commits
    for the whole agents.py, so each of the ``processes`` workers paces its own
    ``processes`` times as far apart (:func:`worker_commit_interval`)."""
    out = [*argv, "--processes", "1"]
    if commit_interval_s is not None:
        out += ["--commit-interval", repr(worker_commit_interval(commit_interval_s, processes))]
    if index > 0:
        out += ["--maintain-every-versions", "0"]
    if health_port:
        out += ["--health-port", str(health_port + index)]
    if metrics_port:
        out += ["--metrics-port", str(metrics_port + index)]
    if worker_id:
        out += ["--worker-id", f"{worker_id}-{index}"]
    return out


def worker_commit_interval(interval_s: float, processes: int) -> float:
    """The least time between two commits of one table by one of ``processes``
    workers, for the table to be committed about as often as one process would.

    Each worker group-commits its own writes (store/writer.py), so N workers
    pacing at one process's interval commit each busy table N times as often,
    in groups N times smaller, and every commit is also checked against the
    others' (Lance rebases it over what landed meanwhile): at 1,000 agents, two
    workers at 0.05 s made 6,200-7,900 steps/s, at 0.1 s 7,500-8,400, on the
    same machine in one sitting (BENCHMARKS.md, "A worker per core").  It
    also keeps the table's versions, which worker 0's upkeep must compact and
    clean up, about as many as one process makes.  A lone writer and an idle
    table are not paced at all, so a lone agent's step still commits at once;
    the price is paid by a step that arrives while its worker's last commit
    carried several writes: it may wait for company up to the longer interval
    (8 processes: 0.4 s at the default; measured only with 2 here)."""
    return interval_s * max(1, processes)


@dataclass
class Slot:
    """One worker process the supervisor keeps running."""
    index: int
    argv: list[str]
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    backoff_s: float = FIRST_BACKOFF_S
    restart_at: float | None = None
    restarts: int = field(default=0)


class Supervisor:
    def __init__(self, script: str, argvs: list[list[str]], stop_grace_s: float, poll_s: float = 0.2):
        self.script = script
        self.slots = [Slot(i, argv) for i, argv in enumerate(argvs)]
        self.stop_grace_s = stop_grace_s
        self.poll_s = poll_s
        self.stopping = False

    def run(self) -> int:
        """Start the workers, keep them running until SIGTERM / SIGINT, stop them; the exit code."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, lambda *_: self._signal_all(signal.SIGHUP))  # each re-reads the profiles
        log.info("supervisor pid %d starting %d worker processes", os.getpid(), len(self.slots))
        for slot in self.slots:
            self._start(slot)
        while not self.stopping:
            now = time.monotonic()
            for slot in self.slots:
                self._watch(slot, now)
            time.sleep(self.poll_s)
        return self._stop_all()

    def _on_signal(self, signum, _frame) -> None:
        if not self.stopping:
            log.info("supervisor got %s: stopping %d workers", signal.Signals(signum).name, len(self.slots))
        self.stopping = True
        self._signal_all(signal.SIGTERM)

    def _start(self, slot: Slot) -> None:
        env = {**os.environ, SUPERVISOR_ENV: str(os.getpid())}
        slot.proc = subprocess.Popen([sys.executable, self.script, *slot.argv], env=env)
        slot.started_at, slot.restart_at = time.monotonic(), None
        log.info("worker process %d started pid=%d", slot.index, slot.proc.pid)

    def _watch(self, slot: Slot, now: float) -> None:
        """Restart a worker that exited, once its backoff has passed."""
        if slot.restart_at is not None:
            if now >= slot.restart_at:
                slot.restarts += 1
                self._start(slot)
            return
        code = slot.proc.poll()
        if code is None:
            return
        if now - slot.started_at > HEALTHY_AFTER_S:
            slot.backoff_s = FIRST_BACKOFF_S
        slot.restart_at = now + slot.backoff_s
        log.warning("worker process %d pid=%d exited with %s; restarting it in %.0f s", slot.index, slot.proc.pid,
                    code, slot.backoff_s)
        slot.backoff_s = min(slot.backoff_s * 2, MAX_BACKOFF_S)

    def _signal_all(self, sig: int) -> None:
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                try:
                    slot.proc.send_signal(sig)
                except ProcessLookupError:
                    pass

    def _stop_all(self) -> int:
        """Wait for the workers to stop (their grace, plus time to close the store);
        kill the ones that do not.  0 when every worker stopped by itself."""
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s + 30
        code = 0
        for slot in self.slots:
            if slot.proc is None:
                continue
            try:
                slot.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker process %d pid=%d did not stop; killing it", slot.index, slot.proc.pid)
                slot.proc.kill()
                slot.proc.wait()
                code = 1
        log.info("supervisor stopped: %d workers, %d restarts", len(self.slots),
                 sum(slot.restarts for slot in self.slots))
        return code


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def become_supervisor(script: str, argvs: list[list[str]], stop_grace_s: float, log_level: str) -> None:
    """Replace this process (agents.py, its options checked) by the supervisor of ``argvs``' workers."""
    code = f"import sys; sys.path.insert(0, {ROOT!r}); from runtime.worker.processes import main; main()"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-c", code, "--script", script, "--stop-grace", str(stop_grace_s),
                              "--log-level", log_level, json.dumps(argvs)])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="the supervisor of agents.py --processes (started by agents.py)")
    parser.add_argument("--script", required=True)
    parser.add_argument("--stop-grace", type=float, required=True)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("argvs", help="each worker's options, a JSON list of lists")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(Supervisor(args.script, json.loads(args.argvs), stop_grace_s=args.stop_grace).run())
