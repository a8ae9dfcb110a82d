#!/usr/bin/env bash
# Install everything the tests need into ./.venv and run the whole suite.
# Arguments go to pytest: scripts/test.sh -k pause -x
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
exec .venv/bin/python -m pytest "$@"
