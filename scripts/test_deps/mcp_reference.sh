#!/usr/bin/env bash
# The official reference MCP servers the MCP tests run as stdio servers
# (tests/mcp_reference.py, tests/service/test_mcp_reference.py): mcp-server-time and
# mcp-server-git from PyPI.
#
# Both go into their own virtualenv, .venv-mcp, so that their pins (the mcp
# SDK they were built on, pydantic, GitPython...) never meet the service's.
# An install that is already there at the pinned versions is left alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
TIME=mcp-server-time==2026.10.19
GIT=mcp-server-git==2026.10.19
[ -x .venv-mcp/bin/python ] || "$PY" -m venv .venv-mcp
installed() {  # installed() NAME==VERSION: whether exactly that release is installed
  [ "$(.venv-mcp/bin/python -m pip show "${1%%==*}" 2>/dev/null | sed -n 's/^Version: //p')" = "${1##*==}" ]
}
if ! installed "$TIME" || ! installed "$GIT"; then
  echo "installing $TIME $GIT into .venv-mcp" >&2
  .venv-mcp/bin/python -m pip install --quiet --disable-pip-version-check "$TIME" "$GIT"
fi
