"""Every model call of the service, one HTTP attempt at a time.

:func:`call` runs one BAML function (``RunMonikerStep``, ``DecideNextMove``,
``SummarizeRecord``) and is the only place the service calls a model.  The life
of a call:

1. **Admission.**  Each HTTP attempt waits for a permit of the model-call gate
   (monikers/llm_gate.py), where the model's shared rate limits hold, and
   hands it back with the attempt's tokens and status.
2. **Shape.**  The reply's JSON Schema (monikers/output_schemas.py) goes along
   as OpenAI-style ``response_format`` when the server takes it (``structured``
   mode ``json_schema``; ``json_object`` asks only for JSON; ``off`` relies on
   the prompt).  ``auto`` starts with ``json_schema`` and steps down, once per
   base URL for the life of the process, when the server answers a 4xx that
   names the field.  BAML passes client options it does not know (here
   ``response_format``, ``seed``, ``stream_options``) into the request body, so
   this needs no HTTP client of our own.
3. **Streaming.**  With ``stream`` on, BAML streams the reply (``on_tick``);
   :class:`StreamTap` reads the text so far and hands it to ``live`` at most
   ten times a second, for the dashboard's "generating…" view.  Nothing of it
   is stored: the step row that follows is the record.
4. **Time.**  Every attempt's request timeout is cut to what is left of the
   step's deadline (``deadline``, a ``time.monotonic()`` value), so the step ends
   with a clear error of ours rather than being cancelled from outside.  A
   request that timed out is tried at most once more, and not as it was: when
   it was generating, the retry's ``max_tokens`` is cut to what the measured
   rate can write in time.  A cancelled call aborts its HTTP request
   (BAML's ``AbortController``), so a stopped step stops costing tokens.
5. **Retries.**  5xx and connection errors: up to :data:`RETRIES` more, with
   backoff; a 429 after its ``Retry-After`` (the gate holds the model back for
   every session), up to :data:`RATE_LIMITED_RETRIES`.  Unparseable output is not
   retried here: the moniker re-asks, telling the model what was wrong.
6. **Counting.**  Every attempt, failed ones included, is an :class:`Attempt`
   in ``info.attempts``: its tokens (the server's usage, else an estimate marked
   ``estimated``), duration and outcome (ok, timeout, 5xx, 429, unparseable,
   cancelled, unreachable, error).  :func:`usage_entry` turns them into one
   usage call of the step, so budgets, rate limits and cost see every token a
   server was asked for.
"""
import asyncio
import functools
import json
import logging
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Callable

from monikers import output_schemas
from monikers.frame import StepError
from monikers.llm_gate import gate, retry_after_s
from monikers.llm_settings import LLMSettings

log = logging.getLogger("monikers.llm")

CLIENT_NAME = "AgentSession"
RETRIES = 4  # 5xx, connection errors: the first try and 4 more
TIMEOUT_RETRIES = 1  # a request that timed out: at most one more
RETRY_BASE_S = 0.15
RATE_LIMITED_RETRIES = 8  # 429s, each after its Retry-After (or the backoff without one)
MIN_ATTEMPT_S = 1.0  # an attempt with less time than this left before the deadline is not started
DEADLINE_MARGIN_S = 0.5  # ends our attempts this long before the step is cancelled from outside
LIVE_INTERVAL_S = 0.1  # at most ten live deltas a second
LIVE_CHARS = 4000  # the newest characters of the reply a delta carries
MODES = ("json_schema", "json_object", "off")
FIELD_REFUSED = re.compile(r"response_format|json_schema|json_object|structured", re.IGNORECASE)
UNREACHABLE = re.compile(r"connection refused|error sending request|tcp connect|failed to connect|dns error|"
                         r"connecterror|no route to host|name or service not known", re.IGNORECASE)

_learned_modes: dict[str, str] = {}  # base URL -> the structured mode its server takes (``auto``)
_learned_lock = threading.Lock()


# ---- BAML ---------------------------------------------------------------------

def quiet_baml_logs(environ=os.environ) -> None:
    """Keep prompts (which may hold user data) out of stderr unless asked for."""
    if environ.get("AGENTSVC_LOG_PROMPTS") != "1":
        environ.setdefault("BAML_LOG", "error")


class _BamlStreamNoise(logging.Filter):
    """BAML drives each streamed call on its own thread with ``asyncio.run(...,
    debug=True)``, whose slow-callback warnings ("Executing <Task … took 0.2
    seconds") say nothing about our loop; they are dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "BamlStream" not in record.getMessage()


@functools.cache
def baml_api() -> SimpleNamespace:
    """Import the generated client on first use, after quieting BAML's logs."""
    quiet_baml_logs()
    import baml_py
    import baml_py.errors
    import baml_py.logging
    from baml_client import b
    from baml_client.types import StepFrameIn

    if "BAML_LOG" in os.environ:  # also applies when baml_py was imported before us
        baml_py.logging.set_log_level(os.environ["BAML_LOG"])
    logging.getLogger("asyncio").addFilter(_BamlStreamNoise())
    return SimpleNamespace(b=b, StepFrameIn=StepFrameIn, errors=baml_py.errors, ClientRegistry=baml_py.ClientRegistry,
                           Collector=baml_py.Collector, AbortController=baml_py.AbortController)


# ---- what a call records ----------------------------------------------------------

@dataclass
class Attempt:
    """One HTTP request of a call and how it ended."""

    n: int
    outcome: str  # ok | timeout | 5xx | 429 | unparseable | cancelled | unreachable | error
    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False  # the server gave no usage: tokens are our estimate
    duration_ms: float = 0.0
    status: int | None = None
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.outcome != "ok"

    def describe(self) -> str:
        what = self.outcome + (f" {self.status}" if self.status and self.outcome == "error" else "")
        return f"attempt {self.n}: {what} after {self.duration_ms / 1000:.1f}s, {self.output_tokens} tokens out" + \
            (" (estimated)" if self.estimated else "")


@dataclass
class CallInfo:
    """What one call took: its attempts, its wait at the gate, its mode, its raw reply."""

    attempts: list[Attempt] = field(default_factory=list)
    waited_s: float = 0.0
    mode: str = "off"
    raw: str | None = None  # the last attempt's reply text, as the model wrote it

    @property
    def http_calls(self) -> int:
        return len(self.attempts)

    def summary(self) -> str:
        return "; ".join(a.describe() for a in self.attempts)


def usage_entry(settings: LLMSettings, info: CallInfo, **extra) -> dict | None:
    """One usage call of a step (``StepContext.record_usage``'s keywords): the sum
    of every attempt, failed ones included, with the attempts listed."""
    if not info.attempts and not info.waited_s:
        return None
    tokens_in = sum(a.input_tokens for a in info.attempts)
    tokens_out = sum(a.output_tokens for a in info.attempts)
    return {"model": settings.model, "input_tokens": tokens_in, "output_tokens": tokens_out,
            "duration_ms": round(sum(a.duration_ms for a in info.attempts), 1),
            "cost": settings.cost(tokens_in, tokens_out), "http_calls": info.http_calls,
            "rate_wait_ms": round(info.waited_s * 1000, 1), "structured": info.mode,
            "attempts": [asdict(a) for a in info.attempts], **extra}


# ---- live output ------------------------------------------------------------------

class StreamTap:
    """Reads a streamed reply as BAML receives it and reports it to ``live``.

    BAML calls :meth:`on_tick` on its own thread for every chunk.  Each chunk is
    counted as a token (OpenAI-compatible servers send about one token a
    chunk); the text is read from the chunks at most every
    :data:`LIVE_INTERVAL_S`, and ``live`` is called on the event loop with
    ``{attempt, text, tokens, final}``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, live: Callable[[dict], None] | None, attempt: int):
        self.loop, self.live, self.attempt = loop, live, attempt
        self.tokens = 0
        self._parts: list[str] = []
        self._read = 0  # chunks whose text is in _parts
        self._last_log = None
        self._last_emit = 0.0
        self._lock = threading.Lock()

    def on_tick(self, _reason, function_log) -> None:
        with self._lock:
            self.tokens += 1
            self._last_log = function_log
            now = time.monotonic()
            if self.live is None or now - self._last_emit < LIVE_INTERVAL_S:
                return
            self._last_emit = now
            self._read_chunks()
            self._emit(final=False)

    def finish(self) -> None:
        """The attempt ended: read what is left and send the last delta."""
        with self._lock:
            self._read_chunks()
            if self.live is not None and (self.tokens or self._parts):
                self._emit(final=True)

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def _read_chunks(self) -> None:
        try:
            calls = self._last_log.calls if self._last_log is not None else None
            chunks = calls[-1].sse_responses() if calls else None
        except Exception:  # a log BAML is still writing; the next tick reads it
            return
        for chunk in (chunks or [])[self._read:]:
            self._parts.append(_chunk_text(chunk.text))
        self._read = max(self._read, len(chunks or []))

    def _emit(self, *, final: bool) -> None:
        delta = {"attempt": self.attempt, "text": self.text[-LIVE_CHARS:], "tokens": self.tokens, "final": final,
                 "at": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")}
        try:
            self.loop.call_soon_threadsafe(self.live, delta)
        except RuntimeError:  # the loop is closed: nobody is watching any more
            pass


def _chunk_text(data: str) -> str:
    try:
        choices = json.loads(data).get("choices") or []
        return "".join((c.get("delta") or {}).get("content") or "" for c in choices)
    except (ValueError, AttributeError):
        return ""  # "[DONE]" and keep-alives


# ---- the call -----------------------------------------------------------------------

def structured_mode(settings: LLMSettings, schema: dict | None) -> str:
    if schema is None and settings.structured in ("auto", "json_schema"):
        return "json_object" if settings.structured == "json_schema" else "off"
    if settings.structured != "auto":
        return settings.structured
    with _learned_lock:
        return _learned_modes.get(settings.base_url, "json_schema")


def _step_down(settings: LLMSettings, mode: str) -> str | None:
    """The next weaker mode after the server refused ``mode`` (``auto`` only), remembered for its base URL."""
    if settings.structured != "auto" or mode == "off":
        return None
    weaker = MODES[MODES.index(mode) + 1]
    with _learned_lock:
        _learned_modes[settings.base_url] = weaker
    log.warning("%s refused response_format %s; using %s for it from now on", settings.base_url, mode, weaker)
    return weaker


def request_options(settings: LLMSettings, function: str, schema: dict | None, mode: str, timeout_s: float,
                    max_tokens: int) -> dict:
    options = settings.client_options(timeout_s)
    options["max_tokens"] = max_tokens
    if mode == "json_schema":
        options["response_format"] = {"type": "json_schema", "json_schema": {
            "name": function, "schema": schema, "strict": output_schemas.STRICT.get(function, False)}}
    elif mode == "json_object":
        options["response_format"] = {"type": "json_object"}
    if settings.stream:
        options["stream_options"] = {"include_usage": True}  # usage in the stream's last chunk
    return options


def _registry(api, options: dict):
    """A per-call client, so two sessions can use two endpoints or models.  It has
    no retry policy: :func:`call` retries, one gated request at a time."""
    registry = api.ClientRegistry()
    registry.add_llm_client(CLIENT_NAME, "openai-generic", options)
    registry.set_primary(CLIENT_NAME)
    return registry


def outcome_of(api, exc: BaseException | None) -> tuple[str, int | None]:
    if exc is None:
        return "ok", 200
    if isinstance(exc, asyncio.CancelledError) or isinstance(exc, api.errors.BamlAbortError):
        return "cancelled", None
    if isinstance(exc, api.errors.BamlTimeoutError):
        return "timeout", None
    if isinstance(exc, api.errors.BamlValidationError):
        return "unparseable", 200
    if UNREACHABLE.search(str(exc)):
        return "unreachable", None
    if isinstance(exc, api.errors.BamlClientHttpError):
        status = exc.status_code
        return ("429" if status == 429 else "5xx" if status >= 500 else "timeout" if status == 408 else "error"), status
    return "error", None


def _measured(collector, tap: StreamTap | None, prompt_tokens: int, outcome: str) -> tuple[int, int, bool, str | None]:
    """An attempt's tokens and its reply text.  The server's usage when it gave
    one; else an estimate (marked): a request refused before the model ran (429,
    4xx, 5xx, unreachable) with nothing streamed costs nothing, and one cut off
    while the model ran (timeout, cancelled) costs its prompt and what it wrote."""
    entry = collector.last
    raw = entry.raw_llm_response if entry is not None else None
    used_in = entry.usage.input_tokens if entry is not None else None
    used_out = entry.usage.output_tokens if entry is not None else None
    if used_in is not None or used_out is not None:
        return used_in or 0, used_out or 0, False, raw
    text = raw or (tap.text if tap else "")
    written = max(tap.tokens if tap else 0, len(text) // 4)
    if not written and outcome not in ("timeout", "cancelled", "ok", "unparseable"):
        return 0, 0, False, raw
    return prompt_tokens, written, True, raw or (text or None)


def _headers(collector) -> dict | None:
    entry = collector.last
    calls = entry.calls if entry is not None else None
    response = calls[-1].http_response if calls else None
    return dict(response.headers) if response is not None else None


async def call(api, settings: LLMSettings, function: str, args: tuple, *, info: CallInfo, prompt_tokens: int,
               schema: dict | None = None, deadline: float | None = None,
               live: Callable[[dict], None] | None = None):
    """Call the BAML ``function`` until an attempt succeeds or the rules above give
    up; BAML's last error is raised (a :class:`StepError` when the deadline left
    no time for another attempt).  ``prompt_tokens`` is the request's estimated
    prompt size, for the gate and for attempts the server gives no usage for."""
    loop = asyncio.get_running_loop()
    fn = getattr(api.b, function)
    info.mode = structured_mode(settings, schema)
    max_tokens = settings.max_tokens
    failures = rate_limited = timeouts = 0
    while True:
        timeout_s = _time_for_attempt(settings, deadline, info)
        permit = await gate().acquire(settings.model, prompt_tokens + max_tokens)
        info.waited_s += permit.waited_s
        collector = api.Collector(name=f"{function}:{len(info.attempts) + 1}")
        tap = StreamTap(loop, live, len(info.attempts) + 1) if settings.stream else None
        abort = api.AbortController()
        options = {"client_registry": _registry(api, request_options(settings, function, schema, info.mode,
                                                                     timeout_s, max_tokens)),
                   "collector": collector, "abort_controller": abort}
        if tap is not None:
            options["on_tick"] = tap.on_tick
        started, error = time.monotonic(), None
        try:
            out = await fn(*args, baml_options=options)
        except asyncio.CancelledError as exc:
            abort.abort()  # the request goes on in BAML's thread otherwise, and is billed
            error = exc
            raise
        except api.errors.BamlError as exc:
            error = exc
        finally:
            attempt = _finish_attempt(api, info, collector, tap, error, started, prompt_tokens)
            retry_after = retry_after_s(_headers(collector)) if attempt.outcome == "429" else None
            gate().release(permit, tokens=attempt.input_tokens + attempt.output_tokens, status=attempt.status,
                           retry_after=retry_after)
        if error is None:
            return out
        if attempt.outcome == "error" and attempt.status in (400, 422) and FIELD_REFUSED.search(str(error)):
            weaker = _step_down(settings, info.mode)
            if weaker is not None:
                info.mode = weaker
                continue
        if attempt.outcome == "429" and rate_limited < RATE_LIMITED_RETRIES:
            rate_limited += 1
            log.info("%s answered 429 (retry after %s s); retrying %s", settings.model, retry_after, function)
            if retry_after is None:
                await asyncio.sleep(RETRY_BASE_S * 2 ** min(rate_limited - 1, 6))
            continue  # with a Retry-After, the gate holds the next permit back until it has passed
        if attempt.outcome == "timeout" and timeouts < TIMEOUT_RETRIES:
            timeouts += 1
            max_tokens = _tokens_that_fit(attempt, settings, deadline, max_tokens)
            continue
        if attempt.outcome in ("5xx", "unreachable") and failures < RETRIES:
            failures += 1
            await asyncio.sleep(RETRY_BASE_S * 2 ** (failures - 1))
            continue
        raise error


def _finish_attempt(api, info: CallInfo, collector, tap, error, started: float, prompt_tokens: int) -> Attempt:
    if tap is not None:
        tap.finish()
    outcome, status = outcome_of(api, error)
    tokens_in, tokens_out, estimated, raw = _measured(collector, tap, prompt_tokens, outcome)
    message = None if error is None or outcome == "cancelled" else " ".join(str(error).split())[:300]
    attempt = Attempt(n=len(info.attempts) + 1, outcome=outcome, input_tokens=tokens_in, output_tokens=tokens_out,
                      estimated=estimated, duration_ms=round((time.monotonic() - started) * 1000, 1),
                      status=status, error=message)
    info.attempts.append(attempt)
    info.raw = raw
    if attempt.failed:
        log.info("model call attempt failed: %s", attempt.describe())
    return attempt


def _time_for_attempt(settings: LLMSettings, deadline: float | None, info: CallInfo) -> float:
    """The next request's timeout: the configured one, cut to the step's deadline."""
    if deadline is None:
        return settings.timeout_s
    left = deadline - time.monotonic() - DEADLINE_MARGIN_S
    if left < MIN_ATTEMPT_S:
        tried = f" ({info.summary()})" if info.attempts else ""
        raise StepError(f"the step's deadline left no time for another model call{tried}")
    return min(settings.timeout_s, left)


def _tokens_that_fit(attempt: Attempt, settings: LLMSettings, deadline: float | None, max_tokens: int) -> int:
    """After a timeout while generating: the retry may write only what the measured
    rate writes in the time it will have, so it does not time out the same way."""
    if attempt.output_tokens < 8 or attempt.duration_ms <= 0:
        return max_tokens  # it timed out before writing: the server was busy, not the reply long
    rate = attempt.output_tokens / (attempt.duration_ms / 1000)
    window = settings.timeout_s if deadline is None else min(settings.timeout_s,
                                                              deadline - time.monotonic() - DEADLINE_MARGIN_S)
    return max(16, min(max_tokens, int(rate * max(window, 0) * 0.8)))


def endpoint_error(api, exc: Exception, settings: LLMSettings, info: CallInfo | None = None) -> StepError:
    """One plain sentence first (what failed, where, what to do), then the details
    on the next lines (the dashboard shows the first line and folds the rest):
    which attempt failed how."""
    where = f"{settings.model} at {settings.base_url}"
    tried = f"\n{info.summary()}" if info is not None and info.attempts else ""
    if UNREACHABLE.search(str(exc)):
        return StepError(f"cannot reach the LLM at {settings.base_url} — start Ollama, or set "
                         f"AGENTSVC_LLM_BASE_URL (or config.llm.base_url) to a running OpenAI-compatible server\n"
                         f"{type(exc).__name__}: {_short(str(exc))}{tried}")
    if isinstance(exc, api.errors.BamlTimeoutError):
        count = len(info.attempts) if info is not None else 1
        return StepError(f"LLM call timed out after {settings.timeout_s:g}s ({where}), {count} attempt(s); "
                         f"raise llm.timeout_s or lower llm.max_tokens ({settings.max_tokens}){tried}")
    if isinstance(exc, api.errors.BamlClientHttpError):
        return StepError(f"LLM endpoint answered HTTP {exc.status_code} ({where})\n{_short(exc.message)}{tried}")
    return StepError(f"LLM call failed ({where})\n{type(exc).__name__}: {_short(str(exc))}{tried}")


def _short(text: str, limit: int = 600) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."
