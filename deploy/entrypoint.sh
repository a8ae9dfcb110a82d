#!/bin/sh
# Container entry point: `app` (gunicorn on 0.0.0.0:8765 inside the container,
# publish it only to a reverse proxy) or `agents` (a worker, health on :9101).
set -e
case "${1:-app}" in
  app) exec gunicorn -w 1 --threads 100 -b 0.0.0.0:8765 --graceful-timeout 10 'app:wsgi()' ;;
  agents) shift; exec python /app/agents.py --health-port 9101 "$@" ;;
  *) exec "$@" ;;
esac
