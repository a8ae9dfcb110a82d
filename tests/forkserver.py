"""Starting agents.py and app.py for the tests without paying their imports each time.

The suite starts agents.py and app.py a few hundred times a run, and each start
paid ~1.3 s of CPU importing the same libraries (LanceDB and pyarrow most of it,
then flask-socketio, aiohttp, redis...) on a 2-core machine bound by CPU.  A fork
server imports those libraries once; each start is then a ``fork()`` of it whose
child becomes the script, as ``python script args`` would: its own argv, working
directory, environment and log file, ``__name__ == "__main__"``, and the
project's own modules imported fresh in the child (they read the environment when
imported, so the server never imports them).  The child is a real process with a
pid of its own: tests signal it, kill it with SIGKILL and read its children as
before.  Only the interpreter's start differs: the tests that check how the
service starts from a shell (the package, serve.py, scripts/run.sh) start it as
users do, and ``AGENTSVC_TEST_FORKSERVER=0`` turns the server off for a run.

LanceDB supports being forked (lancedb/background_loop.py restarts its event loop
thread and, by an atfork hook, its Rust runtime in the child); the server forks
only while idle, so no LanceDB call is in flight at the fork.

The server is a child of the test process and the parent of every process it
forks; it reaps them and reports each exit, so :class:`ForkedProcess` answers
``poll``/``wait``/``returncode`` like ``subprocess.Popen``.  Its protocol is one
JSON line per message: a request ``{"id", "argv", "cwd", "env", "log"}`` on its
stdin, then ``{"id", "pid"}`` and later ``{"exited": pid, "returncode": rc}`` on
its stdout (a negative code for a signal, as Popen says it).
"""
import importlib
import importlib.util
import json
import os
import runpy
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENABLED = os.environ.get("AGENTSVC_TEST_FORKSERVER", "1") != "0"

# Third-party libraries agents.py and app.py import at start (measured: after these,
# importing both scripts imports no other third-party module).  Never a module of
# this project: those read settings from the environment when they are imported.
PRELOAD = (
    "aiohttp", "bidict", "blinker", "click", "cryptography", "dateutil", "engineio", "flask",
    "flask_socketio", "inotify_simple", "itsdangerous", "jinja2", "lance", "lance.optimize", "numpy",
    "orjson", "prometheus_client", "prometheus_client.core", "psutil", "pyarrow", "pyarrow.compute",
    "pydantic", "pydantic.root_model", "pydantic.type_adapter", "redis", "requests", "socketio",
    "spectree", "spectree.plugins.flask_plugin", "ulid", "urllib3", "websocket", "werkzeug", "xxhash",
    "yaml", "yarl",
)


# ---- the test process's side ---------------------------------------------------

class ForkedProcess:
    """A process the fork server started, answering as ``subprocess.Popen`` does."""

    def __init__(self, server: "ForkServer", pid: int, args: list[str]):
        self._server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._server.changed.wait(0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic())))
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: never signal a pid that may have been given to another process
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """One fork server per test process, started on first use."""

    def __init__(self):
        self.at_start = _read_at_start(dict(os.environ))  # the server has these; its children keep them
        self._proc = subprocess.Popen([sys.executable, "-u", __file__], cwd=ROOT, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, bufsize=1)
        self._lock = threading.Lock()
        self._next_id = 0
        self._pids: dict[int, int] = {}       # request id -> pid
        self._exits: dict[int, int] = {}      # pid -> returncode
        self.changed = threading.Event()      # set on every message; waiters poll their own pid
        self._reader = threading.Thread(target=self._read, name="forkserver-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            message = json.loads(line)
            with self._lock:
                if "exited" in message:
                    self._exits[message["exited"]] = message["returncode"]
                else:
                    self._pids[message["id"]] = message["pid"]
            self.changed.set()
            self.changed.clear()
        self.changed.set()  # the server is gone: nothing more will come

    def alive(self) -> bool:
        return self._proc.poll() is None

    def exit_code(self, pid: int) -> int | None:
        with self._lock:
            if pid in self._exits:
                return self._exits.pop(pid)
        if not self.alive() and not os.path.exists(f"/proc/{pid}"):
            return -signal.SIGKILL  # the server died with it unreaped; its real code is lost
        return None

    def spawn(self, argv: list[str], cwd: str, env: dict, log: str) -> ForkedProcess:
        """Start ``python argv...`` (argv[0] the script) with its output in ``log``."""
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
            self._proc.stdin.write(json.dumps({"id": request_id, "argv": argv, "cwd": cwd, "env": env,
                                               "log": log}) + "\n")
            self._proc.stdin.flush()
        deadline = time.monotonic() + 60
        while True:
            with self._lock:
                if request_id in self._pids:
                    return ForkedProcess(self, self._pids.pop(request_id), [sys.executable, *argv])
            if not self.alive() or time.monotonic() > deadline:
                raise RuntimeError("the tests' fork server did not start the process")
            self.changed.wait(0.05)


_server: ForkServer | None = None
_server_lock = threading.Lock()

# Variables an interpreter, glibc or LanceDB read once, when the process starts or
# the library loads: a forked child would keep the server's.  A start whose
# environment gives any of them another value than the server had gets a fresh
# interpreter instead.  PYTHONPATH is the exception: the child builds its sys.path
# from it as the interpreter would (tests install plugins with it).
AT_START = ("PYTHON", "MALLOC_", "LD_", "LANCEDB_LOG")
PER_CHILD = ("PYTHONPATH", "PYTHONUNBUFFERED")  # the server runs -u, as PYTHONUNBUFFERED asks


def _read_at_start(env: dict) -> dict:
    fixed = {"LANCEDB_LOG": "warn", "LANCEDB_LOG_STYLE": "never"}  # what _preload sets by default
    return {**fixed, **{k: v for k, v in env.items() if k.startswith(AT_START) and k not in PER_CHILD}}


def spawn(argv: list[str], cwd: str, env: dict, log: str):
    """``python argv...`` from this test process's fork server (or, when it is turned
    off, a plain ``subprocess.Popen``), its stdout and stderr in the file ``log``."""
    global _server
    open(log, "w").close()  # as with Popen, the log exists (empty) once this returns
    server = None
    if ENABLED:
        with _server_lock:
            if _server is None or not _server.alive():
                _server = ForkServer()
            server = _server
    if server is None or _read_at_start(env) != server.at_start:
        with open(log, "w") as out:
            return subprocess.Popen([sys.executable, *argv], cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
    return server.spawn(argv, cwd, env, log)


# ---- the server's side -----------------------------------------------------------

def _preload() -> None:
    # LanceDB reads its log filter once, when it loads (store/lance_log.py): the
    # service's defaults, as store/__init__.py sets them before its import.  A test
    # cannot give a started process another LANCEDB_LOG (none does).
    os.environ.setdefault("LANCEDB_LOG", "warn")
    os.environ.setdefault("LANCEDB_LOG_STYLE", "never")
    # LanceDB as the service imports it (store/lance_import.py defers its REST client's
    # validators), loaded from its file so that no module of the project is imported.
    spec = importlib.util.spec_from_file_location("_agentsvc_lance_import", os.path.join(ROOT, "store", "lance_import.py"))
    lance_import = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lance_import)
    lance_import.import_lancedb()
    for name in PRELOAD:
        importlib.import_module(name)
    # The child is forked while the server is idle, so LanceDB's warning about a fork
    # in the middle of an operation does not apply; keep it out of the services' logs.
    warnings.filterwarnings("ignore", message="lancedb fork support is experimental")


def _pythonpath(env: dict) -> list[str]:
    return [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]


# The server's sys.path after its script's folder and its own PYTHONPATH: the
# standard library and site-packages, which every child's sys.path ends with.
_BASE_PATH = sys.path[1 + len(_pythonpath(dict(os.environ))):]


def _become(request: dict, inherited: selectors.BaseSelector, protocol_fds: tuple[int, ...]) -> None:
    """In the forked child: turn into ``python argv...`` and exit as it would."""
    try:
        inherited.close()
        for fd in protocol_fds:
            os.close(fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        script, *args = request["argv"]
        sys.argv = [script, *args]
        sys.path[:] = [os.path.dirname(os.path.abspath(script)), *_pythonpath(request["env"]), *_BASE_PATH]
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    # The script runs here; its sys.exit (or the end of it) ends the process through
    # the interpreter's normal exit, so its atexit handlers and threads behave as in
    # a process of its own.
    runpy.run_path(script, run_name="__main__")
    raise SystemExit(0)


def _serve() -> None:
    _preload()
    # Requests come on fd 0 and answers go on a private copy of fd 1, both read and
    # written raw (no Python file object whose finalizer a child could run on a reused
    # fd); fd 1 then points at stderr, so nothing a library prints reaches the protocol.
    answers = os.dup(1)
    os.dup2(2, 1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so SIGCHLD wakes the select
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ, "request")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    protocol_fds = (answers, wake_r, wake_w)

    def answer(message: dict) -> None:
        os.write(answers, (json.dumps(message) + "\n").encode())

    pending = b""
    while True:
        for key, _ in selector.select(timeout=1.0):
            if key.data == "child":
                os.read(wake_r, 4096)
                continue
            chunk = os.read(0, 1 << 20)
            if not chunk:  # the test process is gone
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _become(request, selector, protocol_fds)
                answer({"id": request["id"], "pid": pid})
        while True:  # reap every child that ended (also on the select's timeout)
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            answer({"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    sys.path[0] = ROOT  # where the scripts are (each child sets its own script's folder)
    _serve()
