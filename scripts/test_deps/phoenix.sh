#!/usr/bin/env bash
# The real trace receiver the OpenTelemetry test exports to
# (tests/phoenix_server.py, tests/service/test_traces_phoenix.py): Arize
# Phoenix from PyPI (arize-phoenix), an OTLP/HTTP receiver with its own API to
# read the spans back.
#
# It goes into its own virtualenv, .venv-phoenix, so that none of its many
# dependencies meet the service's pins; tests/phoenix_server.py looks for
# .venv-phoenix/bin/phoenix.  Once installed this only checks and returns.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
PHOENIX=arize-phoenix==20.26.1
[ -x .venv-phoenix/bin/python ] || "$PY" -m venv .venv-phoenix
if ! .venv-phoenix/bin/python -m pip show -q arize-phoenix >/dev/null 2>&1; then
  echo "installing $PHOENIX (several minutes: it brings its own web server, database and UI)" >&2
  .venv-phoenix/bin/python -m pip install --quiet --disable-pip-version-check "$PHOENIX"
fi
