"""The agent service: polls the action queue and runs agent sessions.

    python agents.py --data-dir ./data

One process uses one core: by default agents.py runs one worker process per
core it may use (--processes), under a small supervisor
(runtime/worker/processes.py).  Every option also reads an environment
variable (shown in --help).
"""
import argparse
import asyncio
import logging
import os
import signal
import sys
import threading

from prometheus_client import start_http_server

import settings
from domain.plugin_registry import plugin_modules
from monikers import chat_template, default_registry, endpoints, llm_gate
from runtime.base.aio import run_bounded
from runtime.base.identity import WorkerIdentity
from domain.memory import MemoryTrimmer, tune_allocator
from runtime.worker.metrics import RuntimeMetrics
from runtime.worker import fanout_targets
from domain.events import events_token
from semantic.embeddings import EmbeddingSettings
from runtime.record.record_keeping import RecordKeeping
from runtime.record.eval_runner import IDLE_EVERY_S as EVAL_IDLE_EVERY_S, EvalRunner
from evals.scorers import default_registry as default_scorers
from semantic import semantic_search
from runtime.worker.health import HealthServer
from runtime.base.rate_limits import RateLimiter, load_config as load_rate_limits
from runtime.worker.chores import Chore, Chores
from runtime.worker.service import AgentService
from runtime.worker import processes
from runtime.record.turn_tracker import TurnKeeper
from runtime.record import tracing
from store import Store, lance_log
from store.maintenance import Maintainer
from tools import catalog
from tools.mcp import McpBridge, load_config
from profiles.loader import ProfileLibrary

log = logging.getLogger("agents")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    settings.add_storage_args(parser)
    parser.add_argument("--watch-interval", type=float, default=settings.env_float("AGENTSVC_WATCH_S", 0.02),
                        help="how often to check the queue for changes while busy, or always where it cannot be "
                             "watched (object storage, not Linux), seconds [AGENTSVC_WATCH_S, 0.02]")
    parser.add_argument("--idle-poll", type=float, default=settings.env_float("AGENTSVC_IDLE_POLL_S", 0.0),
                        help="where the queue cannot be watched (object storage), an idle dispatcher looks at it "
                             "less and less often, up to this interval (each look is a request; a control waits "
                             "up to this long), seconds; 0 = 1 s, 2 s on object storage [AGENTSVC_IDLE_POLL_S, 0]")
    parser.add_argument("--full-poll", type=float, default=settings.env_float("AGENTSVC_FULL_POLL_S", 5.0),
                        help="query the queue at least this often even without a change signal, seconds "
                             "[AGENTSVC_FULL_POLL_S, 5]")
    parser.add_argument("--maintain-every-versions", type=int,
                        default=settings.env_int("AGENTSVC_MAINTAIN_VERSIONS", 100),
                        help="optimize a table after this many new versions, 0 = never "
                             "[AGENTSVC_MAINTAIN_VERSIONS, 100]")
    parser.add_argument("--keep-versions", type=float, default=settings.env_float("AGENTSVC_KEEP_VERSIONS_S", 10),
                        help="seconds of old table versions kept for reads in flight (a read that loses its "
                             "files to cleanup is retried on the newest version) [AGENTSVC_KEEP_VERSIONS_S, 10]")
    parser.add_argument("--metrics-port", type=int, default=settings.env_int("AGENTSVC_METRICS_PORT", 0),
                        help="serve Prometheus metrics on 127.0.0.1:PORT, 0 = off [AGENTSVC_METRICS_PORT, 0]")
    parser.add_argument("--health-port", type=int, default=settings.env_int("AGENTSVC_HEALTH_PORT", 0),
                        help="serve /healthz, /readyz and /metrics on 127.0.0.1:PORT, 0 = off "
                             "[AGENTSVC_HEALTH_PORT, 0]")
    parser.add_argument("--stop-grace", type=float, default=settings.env_float("AGENTSVC_STOP_GRACE_S", 10.0),
                        help="on SIGTERM, how long steps in flight may take to finish and be recorded before "
                             "they are cancelled (they run again on restart) [AGENTSVC_STOP_GRACE_S, 10]")
    parser.add_argument("--destroy-grace", type=float, default=settings.env_float("AGENTSVC_DESTROY_GRACE_S", 5.0),
                        help="how long destroy waits for a step before cancelling it [AGENTSVC_DESTROY_GRACE_S, 5]")
    parser.add_argument("--processes", type=int,
                        default=settings.env_int("AGENTSVC_PROCESSES", processes.default_processes()),
                        help="worker processes on this machine, each on its own core and sharing the store; "
                             "above 1 a supervisor starts them, restarts one that dies (after a backoff) and "
                             "stops them on SIGTERM; worker i serves --health-port+i and --metrics-port+i "
                             "[AGENTSVC_PROCESSES, the cores this process may use]")
    parser.add_argument("--worker-id", default=None,
                        help="id of this worker (default: <host>-<n>, the first free slot under <data-dir>/workers); "
                             "with --processes N, worker i is <id>-<i>")
    parser.add_argument("--create-grace", type=float, default=settings.env_float("AGENTSVC_CREATE_GRACE_S", 10.0),
                        help="with several workers, a new session goes to one of them (rendezvous hashing); a "
                             "create it has not taken this long after it was queued is anyone's, seconds "
                             "[AGENTSVC_CREATE_GRACE_S, 10]")
    parser.add_argument("--dead-after", type=float, default=settings.env_float("AGENTSVC_DEAD_AFTER_S", 0.0),
                        help="a worker silent this long is dead; its sessions are taken over (after a crash, this "
                             "long); 0 = 15 s on a local disk, 30 s on object storage, where the heartbeat (every "
                             "dead-after / 4) is a commit [AGENTSVC_DEAD_AFTER_S, 0]")
    parser.add_argument("--heartbeat", type=float, default=settings.env_float("AGENTSVC_HEARTBEAT_S", 0.0),
                        help="how often this worker commits its heartbeat (renewing its write lease, dead-after / 2); "
                             "at most dead-after / 4; 0 = 2 s on a local disk, dead-after / 4 on object storage "
                             "(a beat is 10 requests there: 3 PUTs, 6 LISTs, a GET) [AGENTSVC_HEARTBEAT_S, 0]")
    parser.add_argument("--idle-saving", choices=("auto", "on", "off"),
                        default=os.environ.get("AGENTSVC_IDLE_SAVING", "auto"),
                        help="skip periodic reads that cannot find anything new while nothing changes: the queue's "
                             "full poll and lease release while its version is that of a look that found it empty; "
                             "adoption rounds until a live peer could be dead; maintenance rounds until this "
                             "process writes (or 5 minutes); retention every minute; eval rounds back off to 10 s. "
                             "auto = on where the database is on object storage (each read is a billed request) "
                             "[AGENTSVC_IDLE_SAVING, auto]")
    parser.add_argument("--pause-expiry", type=float, default=settings.env_float("AGENTSVC_PAUSE_EXPIRY_S", 7 * 86400),
                        help="stop sessions paused longer than this, seconds [AGENTSVC_PAUSE_EXPIRY_S, 7 days]")
    parser.add_argument("--retention", type=float, default=settings.env_float("AGENTSVC_RETENTION_S", 30 * 86400),
                        help="remove finished sessions and their steps after this, seconds "
                             "[AGENTSVC_RETENTION_S, 30 days]")
    parser.add_argument("--retention-keep-summaries", action="store_true",
                        default=os.environ.get("AGENTSVC_RETENTION_KEEP_SUMMARIES") == "1",
                        help="keep (and first write, where missing) the summaries of sessions that retention "
                             "removes [AGENTSVC_RETENTION_KEEP_SUMMARIES=1]")
    parser.add_argument("--archive-quiet", type=float, default=settings.env_float("AGENTSVC_ARCHIVE_QUIET_S", 1800),
                        help="summarise a conversation once it has been quiet this long, seconds "
                             "[AGENTSVC_ARCHIVE_QUIET_S, 1800]")
    parser.add_argument("--archive-every", type=float, default=settings.env_float("AGENTSVC_ARCHIVE_EVERY_S", 0),
                        help="how often the archive looks for quiet conversations and unsummarised sessions, "
                             "seconds; 0 = 30 s, 120 s on object storage [AGENTSVC_ARCHIVE_EVERY_S, 0]")
    parser.add_argument("--session-heartbeat", type=float,
                        default=settings.env_float("AGENTSVC_SESSION_HEARTBEAT_S", 5.0),
                        help="a step running longer than this is marked in flight and heartbeats at this "
                             "interval [AGENTSVC_SESSION_HEARTBEAT_S, 5]")
    parser.add_argument("--max-attempts", type=int, default=settings.env_int("AGENTSVC_MAX_ATTEMPTS", 5),
                        help="park an action as failed after this many attempts, none of which ended "
                             "(its handler raised or its worker died) [AGENTSVC_MAX_ATTEMPTS, 5]")
    parser.add_argument("--keep-model-io", type=int, default=settings.env_int("AGENTSVC_KEEP_MODEL_IO", 20),
                        help="keep what the model was sent and answered for each session's last N steps "
                             "(a step's \"what the model saw\"; not for private sessions), 0 = keep none "
                             "[AGENTSVC_KEEP_MODEL_IO, 20]")
    parser.add_argument("--log-prompts", action="store_true",
                        default=os.environ.get("AGENTSVC_LOG_PROMPTS") == "1",
                        help="log every LLM prompt and reply (BAML_LOG=info) [AGENTSVC_LOG_PROMPTS=1]")
    parser.add_argument("--events-url", default=fanout_targets.default_events_url(),
                        help="app.py to relay live events to, 'off' for none "
                             "[AGENTSVC_EVENTS_URL, http://127.0.0.1:$AGENTSVC_PORT]")
    parser.add_argument("--rate-limits", default=os.environ.get("AGENTSVC_RATE_LIMITS"), metavar="FILE",
                        help="shared per-model rate limits, a JSON or TOML file: "
                             "{\"models\": {\"gpt-4o\": {\"requests_per_minute\": 500, \"tokens_per_minute\": 200000}}} "
                             "[AGENTSVC_RATE_LIMITS]")
    parser.add_argument("--rate-limit", action="append", default=[], metavar="MODEL=RPM[:TPM]",
                        help="one model's requests (and tokens) per minute, over the file; repeatable")
    settings.add_llm_args(parser)
    settings.add_tool_args(parser)
    settings.add_profile_args(parser)
    settings.add_logging_args(parser)
    return parser.parse_args(argv)


def subagent_profile(library: ProfileLibrary, name: str, overrides: dict) -> dict:
    """``spawn_agent {profile}``: the profile's moniker and config, with the
    call's config applied as a create's overrides would be (profiles/resolve.py).
    KeyError (unknown or broken profile) or ValueError (an override it refuses)."""
    from profiles.resolve import resolve

    found = library.lookup(name)
    if overrides:
        found["config"] = resolve(library.get(name), overrides)
    return found


async def start_tools(args: argparse.Namespace, store: Store, worker_id: str, monikers=None, profiles=None):
    """The tools this worker can run: built-ins, plugins, and the tools of the
    operator's MCP servers (connected here, before any session steps, so a
    resumed session finds them).  The catalog is recorded in the store for
    app.py's GET /api/tools, again whenever an MCP server's tools or status change."""
    tools = catalog.service_registry(store, monikers or default_registry(), settings.fetch_policy(args), profiles)
    bridge = None
    if args.mcp_config:
        config = load_config(args.mcp_config)  # a bad file stops the start, saying why
        bridge = McpBridge(config, tools, on_change=lambda: catalog.publish(store, worker_id, tools, bridge))
        known = [entry for row in await asyncio.to_thread(store.tool_catalog.all)
                 for entry in (row.get("tools") if isinstance(row.get("tools"), list) else [])]
        await bridge.start(known=known)  # publishes the catalog
    else:
        catalog.publish(store, worker_id, tools)
    return tools, bridge


def rate_limiter(args: argparse.Namespace, store: Store, worker_id: str) -> RateLimiter | None:
    """The shared per-model rate limits (runtime/base/rate_limits.py), installed as the
    gate of every model call; None (no limits) when none are configured.  A bad
    file or flag stops the start, saying why."""
    config = load_rate_limits(args.rate_limits, args.rate_limit, endpoint_limits=endpoints.catalog().rate_limits())
    if not config.models:
        return None
    limiter = RateLimiter(config, store.rate_ledger, worker_id)
    llm_gate.install(limiter)
    log.info("rate limits (per %g s, shared by every worker): %s", config.window_s,
             ", ".join(f"{m} {l.requests_per_minute or '-'} req / {l.tokens_per_minute or '-'} tok"
                       for m, l in config.models.items()))
    return limiter


# Where the store is on object storage every read and commit is a billed request:
# the periods an option left at 0 take there (BENCHMARKS.md, "What the store costs
# on S3"; docs/deploy.md, "What the bucket will cost"), and on a local disk.
PERIODS = {  # option: (local disk, object storage), seconds
    "dead_after": (15.0, 30.0),  # takeover after a crash; the heartbeat is every dead_after / 4 there
    "idle_poll": (1.0, 2.0),  # a control sent to an idle worker waits up to this long
    "archive_every": (30.0, 120.0),
}


def resolve_periods(args: argparse.Namespace, store: Store) -> None:
    """Options left at 0 take their default for where the store is (``PERIODS``)."""
    for name, (local, remote) in PERIODS.items():
        if not getattr(args, name):
            setattr(args, name, remote if store.on_object_storage else local)
    log.info("periods: dead-after %g s, heartbeat %s, idle-poll %g s, archive-every %g s, idle saving %s",
             args.dead_after, f"{args.heartbeat:g} s" if args.heartbeat else "auto", args.idle_poll,
             args.archive_every, "on" if idle_saving(args, store) else "off")


def idle_saving(args: argparse.Namespace, store: Store) -> bool:
    """``--idle-saving``: auto is on where the store is on object storage."""
    return store.on_object_storage if args.idle_saving == "auto" else args.idle_saving == "on"


def declared_chores(args: argparse.Namespace, monikers, maintainer) -> list[Chore]:
    """What agents.py runs around its service, each with what it needs
    (runtime/worker/chores.py starts them in an order that satisfies the needs,
    keeping this list's order otherwise: observers hear events in the order
    they were added, and the relay must publish a call's ``tool_call`` event
    before the question desk posts its question)."""

    def service(p):
        return AgentService(p["store"], monikers, tools=p["tools"], worker_id=p["worker_id"],
                            destroy_grace_s=args.destroy_grace, maintainer=maintainer, watch_s=args.watch_interval,
                            idle_poll_s=args.idle_poll, full_poll_s=args.full_poll, dead_after_s=args.dead_after,
                            heartbeat_s=args.heartbeat or None, idle_saving=idle_saving(args, p["store"]),
                            create_grace_s=args.create_grace, max_attempts=args.max_attempts,
                            session_heartbeat_s=args.session_heartbeat, stop_grace_s=args.stop_grace,
                            keep_model_io=args.keep_model_io,
                            monitor_options={"pause_expiry_s": args.pause_expiry, "retention_s": args.retention,
                                             "keep_summaries": args.retention_keep_summaries,
                                             # retention asks the archive for missing summaries first
                                             "archiver": p["record-keeping"].archiver})

    def observing(p, observer):
        p["service"].observers.add(observer)
        return observer

    def metrics(p):
        if not (args.metrics_port or args.health_port):
            return None
        found = observing(p, RuntimeMetrics(p["service"], p["store"]))
        if p["limiter"] is not None:
            found.watch_rate_limits(p["limiter"])
        if p["tracing"] is not None:
            found.watch_trace_drops(p["tracing"].drops)
        if args.metrics_port:
            start_http_server(args.metrics_port, addr="127.0.0.1", registry=found.registry)
        return found

    def traces(p):
        found = tracing.start(p["store"])
        return observing(p, found) if found is not None else None

    def health(p):
        if not args.health_port:
            return None
        return HealthServer(p["service"], p["store"], asyncio.get_running_loop(), port=args.health_port,
                            registry=p["metrics"].registry).start()

    return [
        # summaries and embeddings (runtime/record/record_keeping.py); registers the search_history tool
        Chore("record-keeping", needs=("store", "tools", "worker_id", "embedder"),
              start=lambda p: RecordKeeping(p["store"], p["tools"], worker_id=p["worker_id"],
                                            quiet_s=args.archive_quiet, every_s=args.archive_every,
                                            embedder=p["embedder"]),
              run=lambda record, stopping: record.run(stopping), close=lambda record: record.close()),
        Chore("service", needs=("store", "tools", "worker_id", "record-keeping"), start=service),
        Chore("archive-observer", needs=("service", "record-keeping"),
              start=lambda p: observing(p, p["record-keeping"].archiver)),
        # a row per turn, with its summary (runtime/record/turn_tracker.py)
        Chore("turns", needs=("service", "store"), start=lambda p: observing(p, TurnKeeper(p["store"])),
              close=lambda turns: turns.close()),
        # OpenTelemetry spans from the record, when OTEL_EXPORTER_OTLP_ENDPOINT is set (runtime/record/tracing.py)
        Chore("tracing", needs=("service", "store"), start=traces, close=lambda traces: traces.close()),
        Chore("metrics", needs=("service", "store", "limiter", "tracing"), start=metrics),
        Chore("health", needs=("service", "store", "metrics"), start=health, close=lambda server: server.close()),
        # agent messages in conversations, and live events relayed to app.py
        Chore("relay", needs=("service", "store"),
              start=lambda p: fanout_targets.attach(p["service"], p["store"], events_url=args.events_url,
                                                    token=events_token(args.data_dir)),
              close=lambda relay: relay.close()),
        # ask_user: post questions, apply answers, time out (after the relay: see above)
        Chore("questions", needs=("service", "relay"),
              start=lambda p: fanout_targets.attach_questions(p["service"], p["relay"])),
        # eval runs (issue 29): replay a set's sessions through the queue and score them
        Chore("eval-runs", needs=("store", "worker_id"),
              start=lambda p: EvalRunner(p["store"], default_scorers(), worker_id=p["worker_id"],
                                         idle_every_s=EVAL_IDLE_EVERY_S if idle_saving(args, p["store"])
                                         else 1.0),
              run=lambda runner, stopping: runner.run(stopping)),
    ]


async def serve(args: argparse.Namespace) -> None:
    if args.log_prompts:
        os.environ["AGENTSVC_LOG_PROMPTS"] = "1"  # read by the baml moniker when it loads
    catalog = settings.llm_endpoints(args)  # before any config is checked (profiles, resumed sessions)
    log.info("model endpoints: %s", ", ".join(f"{name} ({e.base_url})" for name, e in catalog.endpoints().items()))
    # A llama.cpp model with no chat template of its own: said once in the log (monikers/chat_template.py).
    threading.Thread(target=chat_template.warnings().check_all, args=(catalog,), name="chat template check",
                     daemon=True).start()
    uri = settings.db_uri(args)
    embedding = EmbeddingSettings.from_env()
    store = Store(uri, **settings.store_kwargs(args), embedding=embedding.store_option() if embedding else None,
                  commit_turns=True)  # the workers of this machine take turns to commit (store/commit_lock.py)
    resolve_periods(args, store)
    embedder = semantic_search(store, embedding)
    trimmer = MemoryTrimmer(args.trim_memory_every).start()  # domain/memory.py: RSS follows what is in use
    identity = WorkerIdentity(args.worker_id) if args.worker_id else WorkerIdentity.claim(
        None if "://" in uri else args.data_dir)
    monikers = default_registry()
    limiter = rate_limiter(args, store, identity.worker_id)
    # Sessions carry their resolved profile in their config, so running them needs
    # no files; the library is for sessions started here by name (sub-agents).
    service_profiles = ProfileLibrary(args.profiles_dir, monikers=monikers, tool_names=lambda: set(tools.names()))
    tools, mcp_bridge = await start_tools(args, store, identity.worker_id, monikers,
                                          profiles=lambda name, overrides: subagent_profile(service_profiles, name,
                                                                                            overrides))
    service_profiles.load()
    maintainer = (Maintainer(store, every_versions=args.maintain_every_versions, keep_versions_s=args.keep_versions)
                  if args.maintain_every_versions > 0 else None)
    parts = {"store": store, "tools": tools, "worker_id": identity.worker_id, "limiter": limiter,
             "embedder": embedder}
    chores = Chores(declared_chores(args, monikers, maintainer), parts)
    service = chores.start()["service"]
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: stop(service, stopping))
    loop.add_signal_handler(signal.SIGHUP, service_profiles.load)
    log.info("agents.py started: db=%s monikers=%s tools=%s plugins=%s", store.uri, ",".join(monikers.names()),
             ",".join(tools.names()), ",".join(plugin_modules()) or "-")
    chores.run(stopping)
    try:
        await service.run(stopping)
    finally:
        await chores.close()
        if limiter is not None:
            await limiter.close()
        if mcp_bridge is not None:
            await mcp_bridge.close()
        trimmer.close()
        store.close()


def stop(service: AgentService, stopping: asyncio.Event) -> None:
    """SIGTERM / SIGINT: not ready from now on; finish what is in flight, then exit."""
    if not stopping.is_set():
        log.info("agents.py stopping: steps in flight get up to %.0f s to finish", service.stop_grace_s)
    service.ready = False
    stopping.set()


def supervise(args: argparse.Namespace, argv: list[str]) -> None:
    """--processes N > 1: become the supervisor of N workers of this script (runtime/worker/processes.py)."""
    argvs = [processes.worker_argv(argv, i, worker_id=args.worker_id, health_port=args.health_port,
                                   metrics_port=args.metrics_port, commit_interval_s=args.commit_interval,
                                   processes=args.processes) for i in range(args.processes)]
    processes.become_supervisor(os.path.abspath(__file__), argvs, args.stop_grace, args.log_level)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.processes < 1:
        raise SystemExit("agents.py: --processes must be at least 1")
    if args.processes > 1:
        supervise(args, argv)  # does not return
    malloc_tuned = tune_allocator(args.malloc_arenas, args.malloc_mmap_threshold_kb)  # first: domain/memory.py
    lance_log.route_to_logging()
    settings.configure_logging(args.log_level)
    processes.die_with_supervisor()  # a worker of a supervisor: not to outlive it
    settings.private_files(args.data_dir)
    if malloc_tuned:
        log.info("glibc malloc: %s", ", ".join(malloc_tuned))
    run_bounded(serve(args))


if __name__ == "__main__":
    main()
