#!/usr/bin/env bash
# Install everything the tests need into ./.venv and run the whole suite.
# Arguments go to pytest: scripts/test.sh -k pause -x
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
# The unit tier (scripts/test.sh tests/unit ...) needs nothing more: no browser,
# Redis, node or real servers to set up.
unit_only=0
for arg in "$@"; do
  case "$arg" in
    tests/unit|tests/unit/*) unit_only=1 ;;
    -*) ;;
    *) unit_only=0; break ;;
  esac
done
[ "$unit_only" = 1 ] && exec .venv/bin/python -m pytest "$@"
# The browser test drives Debian's chromium (playwright cannot download browsers here).
if [ ! -x /usr/bin/chromium ]; then
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi
# The scale-out tests run a real Redis (Flask-SocketIO's message queue between
# app.py instances). The object-storage tests run SeaweedFS (scripts/test_deps/seaweedfs.sh); moto, from
# the test extras, serves bench_scaleout.
if ! command -v redis-server >/dev/null; then
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server
fi
# The JS client test: node + socket.io-client 4.x from tests/js/package-lock.json.
if ! command -v npm >/dev/null; then
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm
fi
(cd tests/js && npm ci --no-audit --no-fund --silent)
# Real servers the tests run against, each in its own virtualenv (see each script).
bash scripts/test_deps/llm_server.sh
bash scripts/test_deps/seaweedfs.sh
bash scripts/test_deps/mcp_reference.sh
bash scripts/test_deps/hadolint.sh
bash scripts/test_deps/phoenix.sh  # the OpenTelemetry trace receiver (tests/service/test_traces_phoenix.py)
exec .venv/bin/python -m pytest "$@"
