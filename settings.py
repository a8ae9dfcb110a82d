"""Command-line options and environment variables shared by agents.py, app.py and serve.py.

Each option has an environment variable; a flag wins over the variable, which
wins over the default.
"""
import argparse
import json
import logging
import os

from domain.memory import MMAP_THRESHOLD_MAX_KIB

DEFAULT_DATA_DIR = "./data"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


def env_int(name: str, default: int | None) -> int | None:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


# The process serving the API and dashboard reads pages of any session at any
# point of its history: it keeps more of the step index (store/db.py).
APP_INDEX_CACHE_MB = 16


def _mmap_threshold_kib(text: str) -> int:
    """An mmap threshold in KiB that glibc accepts (0 = leave glibc's own)."""
    value = int(text)
    if not 0 <= value <= MMAP_THRESHOLD_MAX_KIB:
        raise argparse.ArgumentTypeError(f"must be 0 to {MMAP_THRESHOLD_MAX_KIB} KiB, not {value}")
    return value


def add_storage_args(parser: argparse.ArgumentParser, index_cache_mb: int | None = None) -> None:
    """``index_cache_mb``: this process's default for ``--index-cache-mb``; None
    = the same as ``--cache-mb`` (serve.py: each child keeps its own default)."""
    parser.add_argument("--data-dir", default=os.environ.get("AGENTSVC_DATA_DIR", DEFAULT_DATA_DIR),
                        help=f"directory of the local LanceDB database [AGENTSVC_DATA_DIR, {DEFAULT_DATA_DIR}]")
    parser.add_argument("--db-uri", default=os.environ.get("AGENTSVC_DB_URI"),
                        help="any LanceDB URI, e.g. s3://bucket/path; overrides --data-dir [AGENTSVC_DB_URI]")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a LanceDB storage option (repeatable), e.g. aws_endpoint=http://127.0.0.1:9000 "
                             "[AGENTSVC_STORAGE_OPTIONS as a JSON object]")
    parser.add_argument("--cache-mb", type=int, default=env_int("AGENTSVC_LANCE_CACHE_MB", 4),
                        help="size of each of LanceDB's two caches (index, metadata) in this process, MiB; "
                             "0 for LanceDB's own defaults [AGENTSVC_LANCE_CACHE_MB, 4]")
    parser.add_argument("--index-cache-mb", type=int,
                        default=env_int("AGENTSVC_LANCE_INDEX_CACHE_MB", index_cache_mb),
                        help="size of LanceDB's index cache in this process, MiB, if not --cache-mb "
                             "[AGENTSVC_LANCE_INDEX_CACHE_MB, app.py 16, agents.py --cache-mb]")
    parser.add_argument("--trim-memory-every", type=float, default=env_float("AGENTSVC_TRIM_MEMORY_S", 30.0),
                        help="return freed native memory to the system this often (glibc's malloc_trim; "
                             "domain/memory.py), seconds, 0 = never [AGENTSVC_TRIM_MEMORY_S, 30]")
    parser.add_argument("--malloc-arenas", type=int, default=env_int("AGENTSVC_MALLOC_ARENAS", 2),
                        help="most heaps glibc's malloc keeps for all threads (domain/memory.py); fewer heaps "
                             "keep RSS flat, 0 = glibc's default of 8 per core; a MALLOC_ARENA_MAX in the "
                             "environment wins [AGENTSVC_MALLOC_ARENAS, 2]")
    # A string default: argparse checks it with ``type`` too, so a bad variable is a usage error.
    parser.add_argument("--malloc-mmap-threshold-kb", type=_mmap_threshold_kib,
                        default=os.environ.get("AGENTSVC_MALLOC_MMAP_THRESHOLD_KB") or "128",
                        help="glibc's malloc serves blocks of this many KiB or more from mappings of their own, "
                             "and stops raising the threshold, so large buffers do not stay in its heaps "
                             f"(domain/memory.py), at most {MMAP_THRESHOLD_MAX_KIB}, 0 = glibc's moving threshold; a "
                             "MALLOC_MMAP_THRESHOLD_ in the environment wins [AGENTSVC_MALLOC_MMAP_THRESHOLD_KB, 128]")
    parser.add_argument("--commit-interval", type=float, default=env_float("AGENTSVC_COMMIT_INTERVAL_S", 0.05),
                        help="least time between two commits of one table while writes keep coming (the queue "
                             "is not paced), seconds; under agents.py --processes N each worker paces N times this "
                             "[AGENTSVC_COMMIT_INTERVAL_S, 0.05]")


def add_logging_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default=os.environ.get("AGENTSVC_LOG_LEVEL", "INFO"),
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper,
                        help="[AGENTSVC_LOG_LEVEL, INFO]")


def add_tool_args(parser: argparse.ArgumentParser) -> None:
    """What tools may reach: set by the operator only, never by a session's config."""
    parser.add_argument("--mcp-config", default=os.environ.get("AGENTSVC_MCP_CONFIG") or None, metavar="FILE",
                        help="JSON or TOML file listing the MCP servers whose tools agents may call "
                             "(README: MCP servers) [AGENTSVC_MCP_CONFIG, none]")
    parser.add_argument("--http-fetch-allow", default=os.environ.get("AGENTSVC_HTTP_FETCH_ALLOW", ""),
                        metavar="HOSTS",
                        help="comma-separated hosts the http_fetch tool may GET: names (example.com, "
                             "*.example.com) and addresses or ranges (127.0.0.1:8080, 10.0.0.0/8, [::1]:8080), "
                             "with a port: only that port. A name that resolves to a loopback, private, link-local "
                             "or metadata address also needs that address listed (tools/http_fetch.py) "
                             "[AGENTSVC_HTTP_FETCH_ALLOW, none: every URL is refused]")
    parser.add_argument("--http-fetch-max-bytes", type=int,
                        default=env_int("AGENTSVC_HTTP_FETCH_MAX_BYTES", 1 << 20),
                        help="http_fetch refuses bodies larger than this [AGENTSVC_HTTP_FETCH_MAX_BYTES, 1048576]")
    parser.add_argument("--http-fetch-max-chars", type=int,
                        default=env_int("AGENTSVC_HTTP_FETCH_MAX_CHARS", 20_000),
                        help="http_fetch cuts the text it returns at this many characters, with a note "
                             "[AGENTSVC_HTTP_FETCH_MAX_CHARS, 20000]")
    parser.add_argument("--http-fetch-timeout", type=float,
                        default=env_float("AGENTSVC_HTTP_FETCH_TIMEOUT_S", 20.0),
                        help="seconds for a whole http_fetch, redirects included [AGENTSVC_HTTP_FETCH_TIMEOUT_S, 20]")


def add_llm_args(parser: argparse.ArgumentParser) -> None:
    """Where model calls may go: set by the operator only, never by a session's config.
    agents.py and app.py take the same file (app.py checks configs against it)."""
    parser.add_argument("--llm-endpoints", default=os.environ.get("AGENTSVC_LLM_ENDPOINTS") or None, metavar="FILE",
                        help="JSON or TOML file naming the model endpoints sessions may use: name -> base_url, "
                             "api_key_env, models, default_model, structured, rate_limits (docs/llm.md); read again "
                             "when it changes. Without it (or when it names no 'default') the default endpoint "
                             "is AGENTSVC_LLM_BASE_URL / _API_KEY / _MODEL [AGENTSVC_LLM_ENDPOINTS, none]")


def llm_endpoints(args: argparse.Namespace):
    """This process's model endpoints (monikers/endpoints.py), installed before
    anything checks a config; a bad file stops the start, saying why."""
    from monikers import endpoints

    try:
        return endpoints.install(endpoints.EndpointCatalog(args.llm_endpoints))
    except endpoints.EndpointError as exc:
        raise SystemExit(f"--llm-endpoints: {exc}") from None


DEFAULT_PROFILES_DIR = "./profiles"
# The example profiles that ship with the code (profiles/*.yaml, in a checkout
# and in an installed wheel alike: this module sits beside the profiles package).
SHIPPED_PROFILES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profiles")


def default_profiles_dir() -> str:
    """./profiles where it exists (the operator's own, or the checkout's), else
    the shipped examples: an installed service started in an empty folder
    still has profiles to offer."""
    return DEFAULT_PROFILES_DIR if os.path.isdir(DEFAULT_PROFILES_DIR) else SHIPPED_PROFILES_DIR


def add_profile_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profiles-dir", default=os.environ.get("AGENTSVC_PROFILES_DIR") or default_profiles_dir(),
                        help="directory of agent profiles (*.yaml), read at start and on SIGHUP (app.py also "
                             "on POST /api/profiles/reload) [AGENTSVC_PROFILES_DIR, "
                             f"{DEFAULT_PROFILES_DIR}, or the shipped examples where it does not exist]")


def add_auth_args(parser: argparse.ArgumentParser) -> None:
    """Who may use the API and from where (app.py; docs/security.md)."""
    parser.add_argument("--api-token", default=os.environ.get("AGENTSVC_API_TOKEN") or None,
                        help="one token, named admin, with the admin role: every route but /api/health needs "
                             "'Authorization: Bearer TOKEN' (or a login) [AGENTSVC_API_TOKEN, none]")
    parser.add_argument("--tokens-file", default=os.environ.get("AGENTSVC_TOKENS_FILE") or None, metavar="FILE",
                        help="named tokens with roles, hashed (domain/tokens.py; `agentsvc token new`), re-read when "
                             "it changes [AGENTSVC_TOKENS_FILE, none]")
    parser.add_argument("--allowed-hosts", type=_names, default=_names(os.environ.get("AGENTSVC_ALLOWED_HOSTS", "")),
                        metavar="NAMES", help="Host names the service answers to besides the bind address, "
                                              "localhost, 127.0.0.1 and ::1; comma-separated, '*' for any "
                                              "[AGENTSVC_ALLOWED_HOSTS, none]")
    parser.add_argument("--allowed-origins", type=_names,
                        default=_names(os.environ.get("AGENTSVC_ALLOWED_ORIGINS", "")), metavar="ORIGINS",
                        help="origins (scheme://host[:port]) whose pages may POST and open live events besides "
                             "the service's own, e.g. behind a reverse proxy [AGENTSVC_ALLOWED_ORIGINS, none]")


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def check_exposure(args: argparse.Namespace) -> None:
    """Refuse to serve an API without any token on an address other machines
    can reach.  (Refuse rather than make a token and print it, as Jupyter does:
    an operator binding to a network means to be reached by other programs,
    which need a token they were given, not one from a log.)"""
    if not is_loopback(args.host) and not args.api_token and not args.tokens_file:
        raise SystemExit(f"refusing to serve on {args.host} without a token: anyone who can reach it could run "
                         "agents and read everything. Give --api-token or --tokens-file (docs/security.md), or "
                         "bind to 127.0.0.1.")


def fetch_policy(args: argparse.Namespace):
    from tools.http_fetch import FetchPolicy

    return FetchPolicy(allow=tuple(args.http_fetch_allow.split(",")), max_bytes=args.http_fetch_max_bytes,
                       max_chars=args.http_fetch_max_chars, timeout_s=args.http_fetch_timeout)


def db_uri(args: argparse.Namespace) -> str:
    if args.db_uri:
        return args.db_uri
    path = os.path.join(args.data_dir, "lancedb")
    os.makedirs(path, exist_ok=True)
    return path


def store_kwargs(args: argparse.Namespace) -> dict:
    """How to open the store, from the storage flags: Store(db_uri(args), **store_kwargs(args))."""
    return {"storage_options": storage_options(args), "cache_mb": args.cache_mb,
            "index_cache_mb": args.index_cache_mb,
            "min_commit_interval_s": args.commit_interval}


def storage_options(args: argparse.Namespace) -> dict | None:
    options = json.loads(os.environ.get("AGENTSVC_STORAGE_OPTIONS") or "{}")
    if not isinstance(options, dict):
        raise SystemExit("AGENTSVC_STORAGE_OPTIONS must be a JSON object")
    for item in args.storage_option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--storage-option takes KEY=VALUE, got {item!r}")
        options[key] = value
    return options or None


class RedactingFilter(logging.Filter):
    """Replaces credentials in a log line (a bearer token, ``api_key=…``,
    ``"password": "…"``: domain/redact.py) before any handler writes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        from domain.redact import redact_text
        message = record.getMessage()
        cleaned = redact_text(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
        return True


def private_files(data_dir: str) -> None:
    """Files this process makes are its user's alone (0600, folders 0700), and so
    is the data directory: the record holds every agent's task, state and
    messages, and the directory the events token and the login key."""
    os.umask(0o077)
    os.makedirs(data_dir, exist_ok=True)
    try:
        os.chmod(data_dir, 0o700)
    except OSError:  # not ours to change (a directory the operator made and owns)
        pass


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # credentials in a message or a traceback are replaced
        handler.addFilter(RedactingFilter())
    # LanceDB and werkzeug are chatty at INFO; operators want our events.
    for noisy in ("lancedb", "werkzeug", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
