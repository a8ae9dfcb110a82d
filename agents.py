"""The agent service: polls the action queue and runs agent sessions.

    python agents.py --data-dir ./data

Every option also reads an environment variable (shown in --help).
"""
import argparse
import asyncio
import logging
import signal

import settings
from monikers import default_registry
from runtime import live_observers
from runtime.events import events_token
from runtime.service import AgentService
from store import Store

log = logging.getLogger("agents")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    settings.add_storage_args(parser)
    parser.add_argument("--poll-interval", type=float, default=settings.env_float("AGENTSVC_POLL_S", 0.1),
                        help="longest wait between two polls when idle, seconds [AGENTSVC_POLL_S, 0.1]")
    parser.add_argument("--destroy-grace", type=float, default=settings.env_float("AGENTSVC_DESTROY_GRACE_S", 5.0),
                        help="how long destroy waits for a step before cancelling it [AGENTSVC_DESTROY_GRACE_S, 5]")
    parser.add_argument("--worker-id", default=None, help="id of this worker in action claims (default: host-pid-random)")
    parser.add_argument("--events-url", default=live_observers.default_events_url(),
                        help="app.py to relay live events to, 'off' for none "
                             "[AGENTSVC_EVENTS_URL, http://127.0.0.1:$AGENTSVC_PORT]")
    settings.add_logging_args(parser)
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    store = Store(settings.db_uri(args), storage_options=settings.storage_options(args))
    monikers = default_registry()
    service = AgentService(store, monikers, worker_id=args.worker_id, destroy_grace_s=args.destroy_grace,
                           idle_poll_s=args.poll_interval)
    relay = live_observers.attach(service, store, events_url=args.events_url, token=events_token(args.data_dir))
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    log.info("agents.py started: db=%s monikers=%s", store.uri, ",".join(monikers.names()))
    try:
        await service.run(stopping)
    finally:
        if relay is not None:
            await relay.close()
        store.close()


def main(argv=None) -> None:
    args = parse_args(argv)
    settings.configure_logging(args.log_level)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
