"""The HTTP side of the service: the JSON API under /api (and, later, the dashboard).

    python app.py --data-dir ./data --port 8765

It only ever appends actions to the queue and reads state; agents.py does the work.
"""
import argparse
import logging
import signal
import threading

from flask import Flask, jsonify
from werkzeug.serving import make_server

import settings
from api import errors, openapi
from api.metrics import Metrics
from api.routes import ApiContext, bp
from monikers import default_registry
from store import Store

log = logging.getLogger("app")

MAX_BODY_BYTES = 1 << 20


def create_app(store: Store, monikers=None) -> Flask:
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.json.sort_keys = False
    metrics = Metrics(store)
    app.extensions["agentsvc"] = ApiContext(store, monikers or default_registry(), metrics)
    app.register_blueprint(bp)
    errors.install(app)
    metrics.install(app)
    spec = openapi.build()

    @app.get("/api/openapi.json")
    def openapi_document():
        return jsonify(spec)

    return app


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    settings.add_storage_args(parser)
    parser.add_argument("--host", default=settings.os.environ.get("AGENTSVC_HOST", settings.DEFAULT_HOST),
                        help=f"address to bind [AGENTSVC_HOST, {settings.DEFAULT_HOST}]")
    parser.add_argument("--port", type=int, default=settings.env_int("AGENTSVC_PORT", settings.DEFAULT_PORT),
                        help=f"port to bind, 0 for any free one [AGENTSVC_PORT, {settings.DEFAULT_PORT}]")
    settings.add_logging_args(parser)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    settings.configure_logging(args.log_level)
    store = Store(settings.db_uri(args), storage_options=settings.storage_options(args))
    server = make_server(args.host, args.port, create_app(store), threaded=True)
    # Shut down from another thread: shutdown() waits for serve_forever to return.
    stop = lambda *_: threading.Thread(target=server.shutdown, daemon=True).start()  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("app.py listening on http://%s:%d/ db=%s", args.host, server.server_port, store.uri)
    server.serve_forever()
    log.info("app.py stopped")


if __name__ == "__main__":
    main()
