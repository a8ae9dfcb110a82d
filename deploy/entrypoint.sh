#!/bin/sh
# Container entry point (deploy/Containerfile): `app` (gunicorn on 0.0.0.0:8765
# inside the container, publish it only to a reverse proxy) or `agents` (a
# worker, health on :9101); anything else runs as given.  Both programs are the
# installed package's (the wheel), configured from AGENTSVC_* variables.
set -e
case "${1:-app}" in
  app) exec gunicorn -w 1 --threads 100 -b 0.0.0.0:8765 --graceful-timeout 10 'app:wsgi()' ;;
  agents) shift; exec agentsvc-agents --health-port 9101 "$@" ;;
  *) exec "$@" ;;
esac
