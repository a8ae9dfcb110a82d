"""The HTTP side of the service: the JSON API under /api (api/routes/), the
dashboard at /, and live events over Socket.IO (api/live.py) and Server-Sent
Events (api/stream.py).

    python app.py --data-dir ./data --port 8765

In production, under gunicorn (threads, one worker: each WebSocket or event
stream holds a thread; settings come from the environment):

    AGENTSVC_DATA_DIR=/var/lib/agentsvc gunicorn -w 1 --threads 100 -b 127.0.0.1:8765 'app:wsgi()'

It only ever appends actions to the queue and reads state; agents.py does the work.
"""
import argparse
import logging
import signal
import socket

from flask import Flask

import settings
from api import auth, errors, live, routes, stream
from api.guard import SiteGuard, SitePolicy
from api.json_provider import RedactingJSONProvider
from domain.tokens import TokenRing
from api.context import KEY, ApiContext
from api.metrics import Metrics
from api.profile_library import EXTENSION as PROFILES, make_library
from api.routes.questions import WaitingCollector
from api.routes.tools import EXTENSION as TOOLS
from api.storage_health import StorageCollector, StorageHealth
from monikers import default_registry
from semantic.embeddings import EmbeddingSettings
from domain.memory import MemoryTrimmer, tune_allocator
from domain.events import events_token
from semantic import semantic_search
from store import Store, lance_log
from tools.catalog import service_registry

log = logging.getLogger("app")

MAX_BODY_BYTES = 1 << 20


def create_app(store: Store, monikers=None, events_token: str | None = None,
               api_token: str | None = None, message_queue: str | None = None, tools=None,
               profiles_dir: str = settings.DEFAULT_PROFILES_DIR, tokens_file: str | None = None,
               site: SitePolicy | None = None, data_dir: str | None = None) -> Flask:
    """The Flask app; its Flask-SocketIO server is ``app.extensions["socketio"]``.
    Without ``events_token`` the ingest namespace accepts no one; with
    ``api_token`` or ``tokens_file`` every route but a few open ones needs a
    token (api/auth.py); ``site`` says which hosts and origins it answers to
    (api/guard.py; default: loopback); ``data_dir`` keeps the login cookies' key
    (default: a new key each start); with ``message_queue`` (a redis:// URL)
    several instances share their live events."""
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.json = RedactingJSONProvider(app)
    metrics = Metrics(store)
    storage_health = StorageHealth(store)
    metrics.registry.register(StorageCollector(storage_health))
    metrics.registry.register(WaitingCollector(store))
    monikers = monikers or default_registry()
    app.extensions[KEY] = ApiContext(store, monikers, metrics, storage_health)
    app.extensions[TOOLS] = tools if tools is not None else service_registry(store, monikers)
    app.extensions[PROFILES] = make_library(profiles_dir, monikers, store, app.extensions[TOOLS])
    site = site or SitePolicy(settings.DEFAULT_HOST)
    auth.install(app, TokenRing(tokens_file, api_token), data_dir)
    routes.register(app)
    _, hub = live.install(app, events_token, message_queue=message_queue, site=site)
    stream.install(app, hub)
    errors.install(app)
    metrics.install(app)
    app.wsgi_app = SiteGuard(app.wsgi_app, site)  # outermost: before Flask and Socket.IO alike
    return app


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    settings.add_storage_args(parser, index_cache_mb=settings.APP_INDEX_CACHE_MB)
    parser.add_argument("--host", default=settings.os.environ.get("AGENTSVC_HOST", settings.DEFAULT_HOST),
                        help=f"address to bind [AGENTSVC_HOST, {settings.DEFAULT_HOST}]")
    parser.add_argument("--port", type=int, default=settings.env_int("AGENTSVC_PORT", settings.DEFAULT_PORT),
                        help=f"port to bind, 0 for any free one [AGENTSVC_PORT, {settings.DEFAULT_PORT}]")
    settings.add_auth_args(parser)
    parser.add_argument("--message-queue", default=settings.os.environ.get("AGENTSVC_MESSAGE_QUEUE") or None,
                        metavar="URL", help="Flask-SocketIO message queue shared by several app.py instances, "
                                            "e.g. redis://127.0.0.1:6379/0 [AGENTSVC_MESSAGE_QUEUE, none]")
    settings.add_llm_args(parser)
    settings.add_profile_args(parser)
    settings.add_logging_args(parser)
    return parser.parse_args(argv)


def build(args: argparse.Namespace) -> Flask:
    settings.check_exposure(args)  # first: never serve an open API off loopback
    malloc_tuned = tune_allocator(args.malloc_arenas, args.malloc_mmap_threshold_kb)  # first: domain/memory.py
    lance_log.route_to_logging()
    settings.configure_logging(args.log_level)
    settings.private_files(args.data_dir)
    if malloc_tuned:
        log.info("glibc malloc: %s", ", ".join(malloc_tuned))
    settings.llm_endpoints(args)  # the endpoints configs may name: before the profiles are read
    embedding = EmbeddingSettings.from_env()
    store = Store(settings.db_uri(args), **settings.store_kwargs(args),
                  embedding=embedding.store_option() if embedding else None)
    semantic_search(store, embedding)
    MemoryTrimmer(args.trim_memory_every).start()  # a daemon thread, for the life of the process
    return create_app(store, events_token=events_token(args.data_dir), api_token=args.api_token,
                      message_queue=args.message_queue, profiles_dir=args.profiles_dir,
                      tokens_file=args.tokens_file, data_dir=args.data_dir,
                      site=SitePolicy(args.host, args.allowed_hosts, args.allowed_origins))


def wsgi() -> Flask:
    """The app for a WSGI server (``gunicorn 'app:wsgi()'``), configured from the
    environment variables alone (the flags' defaults)."""
    args = parse_args([])
    app = build(args)
    log.info("app.py ready under a WSGI server db=%s message_queue=%s", app.extensions["agentsvc"].store.uri,
             "on" if args.message_queue else "off")
    return app


def main(argv=None) -> None:
    args = parse_args(argv)
    app = build(args)
    store = app.extensions["agentsvc"].store
    port = args.port or free_port(args.host)
    # werkzeug's serve_forever returns on KeyboardInterrupt; SIGTERM is made one,
    # so both signals end in the same clean shutdown below.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # SIGHUP: re-read the profiles directory (as POST /api/profiles/reload does)
    signal.signal(signal.SIGHUP, lambda *_: app.extensions[PROFILES].load())
    log.info("app.py listening on http://%s:%d/ db=%s", args.host, port, store.uri)
    try:
        app.extensions["socketio"].run(app, host=args.host, port=port, allow_unsafe_werkzeug=True,
                                       log_output=False)
    except KeyboardInterrupt:
        pass
    finally:
        store.close()
    log.info("app.py stopped")


def free_port(host: str) -> int:
    """--port 0: ask the OS for a free port first, so the log can name it."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
