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
   names the field.  ``grammar``, the operator's choice for a llama.cpp
   server, sends the schema as a compact GBNF grammar instead
   (monikers/gbnf.py), so a small model's frame holds no indentation.
3. **Request and reply.**  BAML renders the request (prompt, model, options:
   ``b.stream_request``/``b.request``) and parses the reply (``b.parse``), and
   :func:`_send` sends it.  Why not let BAML send it: BAML keeps client
   options, ``response_format`` among them, in unordered maps, so each request
   listed the schema's properties in a new random order, and llama.cpp builds
   its grammar in that order; a small model then often wrote the bulky state
   first and ran out of tokens before the step's own fields (7 of 12 frames
   valid, against 12 of 12 in a fixed order).  Sending it ourselves keeps the
   schema as written, streams on the event loop (no thread per call) and
   cancels the request for real.
4. **Streaming.**  With ``stream`` on, the reply streams as Server-Sent
   Events; :class:`StreamTap` gathers the text and hands it to ``live`` at most
   ten times a second, for the dashboard's "generating…" view.  Nothing of it
   is stored: the step row that follows is the record.
5. **Time.**  Every attempt's request timeout is cut to what is left of the
   step's deadline (``deadline``, a ``time.monotonic()`` value), so the step ends
   with a clear error of ours rather than being cancelled from outside.  A
   request that timed out is tried at most once more, and not as it was: when
   it was generating, the retry's ``max_tokens`` is cut to what the measured
   rate can write in time.  A cancelled call closes its HTTP request, so a
   stopped step stops costing tokens.
6. **Retries.**  5xx and connection errors: up to :data:`RETRIES` more, with
   backoff; a 429 after its ``Retry-After`` (the gate holds the model back for
   every session), up to :data:`RATE_LIMITED_RETRIES`.  Unparseable output is not
   retried here: the moniker re-asks, telling the model what was wrong.
7. **Counting.**  Every attempt, failed ones included, is an :class:`Attempt`
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

import aiohttp

from monikers import gbnf, output_schemas
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
ERROR_BODY_CHARS = 65_536  # of an error reply, read to find its message (a JSON body must be whole to parse)
ERROR_EXCERPT_CHARS = 200  # of that message, kept (in last_error, the attempts): the body is the server's, not ours
MODES = ("json_schema", "json_object", "off")
FIELD_REFUSED = re.compile(r"response_format|json_schema|json_object|structured|grammar", re.IGNORECASE)

_learned_modes: dict[str, str] = {}  # base URL -> the structured mode its server takes (``auto``)
_learned_lock = threading.Lock()


# ---- BAML ---------------------------------------------------------------------

def quiet_baml_logs(environ=os.environ) -> None:
    """Keep prompts (which may hold user data) out of stderr unless asked for."""
    if environ.get("AGENTSVC_LOG_PROMPTS") != "1":
        environ.setdefault("BAML_LOG", "error")


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
    return SimpleNamespace(b=b, StepFrameIn=StepFrameIn, errors=baml_py.errors, ClientRegistry=baml_py.ClientRegistry)


# ---- how an HTTP attempt fails ------------------------------------------------------

class CallFailed(Exception):
    """An HTTP attempt that brought no reply to parse."""

    outcome = "error"
    status: int | None = None


class Truncated(Exception):
    """A reply cut at ``max_tokens`` (finish_reason ``length``): not a whole
    reply, so not parsed (BAML's lenient parser would close the cut object and
    call it a frame).  Raised only for callers that ask (``whole=True``); the
    step moniker re-asks it shorter once, then fails."""

    outcome = "truncated"

    def __init__(self, text: str | None, max_tokens: int):
        super().__init__(f"the reply was cut at max_tokens ({max_tokens} tokens) before it ended")
        self.raw_output = text
        self.max_tokens = max_tokens


class TimedOut(CallFailed):
    outcome = "timeout"


class Unreachable(CallFailed):
    outcome = "unreachable"


class HttpStatus(CallFailed):
    """The server answered with an error status; ``message`` is a short excerpt
    of what it said (its headers are kept apart, for ``Retry-After``)."""

    def __init__(self, status: int, message: str, headers: dict):
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message, self.headers = status, message, headers
        self.outcome = "429" if status == 429 else "5xx" if status >= 500 else "timeout" if status == 408 else "error"


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
    truncated: bool = False  # the reply stopped at max_tokens (finish_reason "length")

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
    request: dict | None = None  # the last attempt's request body as sent (no headers)

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
    """Gathers a reply as it arrives and reports it to ``live``.

    Each content chunk is counted as a token (OpenAI-compatible servers send
    about one token a chunk) until the server's own usage arrives;
    ``live`` gets ``{attempt, text, tokens, final, at}`` at most every
    :data:`LIVE_INTERVAL_S`, and once more when the attempt ends."""

    def __init__(self, live: Callable[[dict], None] | None, attempt: int):
        self.live, self.attempt = live, attempt
        self.tokens = 0
        self.usage: dict | None = None
        self.finish_reason: str | None = None
        self._parts: list[str] = []
        self._last_emit = 0.0

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def feed(self, event: dict) -> None:
        """One streamed ``chat.completion.chunk``."""
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        for choice in event.get("choices") or []:
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                self._parts.append(piece)
                self.tokens += 1
        now = time.monotonic()
        if self.live is not None and self._parts and now - self._last_emit >= LIVE_INTERVAL_S:
            self._last_emit = now
            self._emit(final=False)

    def finish(self) -> None:
        """The attempt ended: send the last delta."""
        if self.live is not None and self._parts:
            self._emit(final=True)

    def _emit(self, *, final: bool) -> None:
        self.live({"attempt": self.attempt, "text": self.text[-LIVE_CHARS:], "tokens": self.tokens, "final": final,
                   "at": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")})


# ---- the request ---------------------------------------------------------------------

def structured_mode(settings: LLMSettings, schema: dict | None) -> str:
    """The mode of one call: the setting's, except that a reply with no schema can
    at most be asked for JSON, and ``auto`` follows what its server took."""
    if schema is None and settings.structured in ("auto", "json_schema", "grammar"):
        return "off" if settings.structured == "auto" else "json_object"
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


def shape_fields(function: str, schema: dict | None, mode: str) -> dict:
    """The request body's fields that hold the reply to ``mode``'s shape."""
    if mode == "json_schema":
        strict = output_schemas.STRICT.get(function, False)
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": function, "schema": output_schemas.strict_form(schema) if strict else schema, "strict": strict}}}
    if mode == "grammar":
        return {"grammar": _grammar(json.dumps(schema, sort_keys=False))}
    if mode == "json_object":
        return {"response_format": {"type": "json_object"}}
    return {}


@functools.lru_cache(maxsize=256)
def _grammar(schema_json: str) -> str:
    """A schema's grammar, once per distinct schema (a session's frame schema
    depends on its tools, so a few sessions share each)."""
    return gbnf.to_gbnf(json.loads(schema_json))


def _registry(api, options: dict):
    """A per-call client, so two sessions can use two endpoints or models."""
    registry = api.ClientRegistry()
    registry.add_llm_client(CLIENT_NAME, "openai-generic", options)
    registry.set_primary(CLIENT_NAME)
    return registry


async def _render(api, settings: LLMSettings, function: str, args: tuple, max_tokens: int):
    """BAML's rendering of the request: URL, headers and body (prompt, model, options)."""
    options = {**settings.client_options(), "max_tokens": max_tokens}
    if settings.stream:
        options["stream_options"] = {"include_usage": True}  # usage in the stream's last chunk
    kind = api.b.stream_request if settings.stream else api.b.request
    request = await getattr(kind, function)(*args, baml_options={"client_registry": _registry(api, options)})
    headers = {k: v for k, v in request.headers.items() if not k.lower().startswith("baml-")}
    return request.url, headers, request.body.json()


async def _send(url: str, headers: dict, body: dict, timeout_s: float,
                tap: StreamTap | None) -> tuple[str, dict | None, str | None]:
    """One HTTP attempt: the reply's text, the server's usage (None if it gave none)
    and its finish_reason."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:
            async with http.post(url, headers=headers, data=json.dumps(body)) as response:
                if response.status != 200:
                    text = await _read_at_most(response, ERROR_BODY_CHARS)
                    raise HttpStatus(response.status, excerpt(_error_message(text)), dict(response.headers))
                if tap is None:
                    reply = await response.json(content_type=None)
                    choice = (reply.get("choices") or [{}])[0]
                    return (choice.get("message") or {}).get("content") or "", reply.get("usage"), \
                        choice.get("finish_reason")
                async for line in response.content:
                    data = line.decode("utf-8", "replace").strip()
                    if data.startswith("data:") and data[5:].strip() != "[DONE]":
                        tap.feed(_json_or_empty(data[5:]))
                return tap.text, tap.usage, tap.finish_reason
    except asyncio.TimeoutError:
        raise TimedOut(f"no complete reply within {timeout_s:.1f}s") from None
    except aiohttp.ClientConnectorError as exc:
        raise Unreachable(excerpt(f"connection refused or failed: {exc}")) from None
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        raise Unreachable(excerpt(f"the connection broke: {type(exc).__name__}: {exc}")) from None


async def _read_at_most(response, limit: int) -> str:
    """The body's first ``limit`` bytes as text (a server's error page can be any size)."""
    data = bytearray()
    while len(data) < limit and (chunk := await response.content.read(limit - len(data))):
        data += chunk
    return data.decode(response.charset or "utf-8", "replace")


def excerpt(text: str, limit: int = ERROR_EXCERPT_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters: what a server said
    reaches the record (last_error, summaries) only as a short excerpt."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _error_message(text: str) -> str:
    try:
        error = json.loads(text).get("error")
        return (error.get("message") if isinstance(error, dict) else str(error)) or text
    except (ValueError, AttributeError):
        return text


def _json_or_empty(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# ---- the call -----------------------------------------------------------------------

async def call(api, settings: LLMSettings, function: str, args: tuple, *, info: CallInfo, prompt_tokens: int,
               schema: dict | None = None, deadline: float | None = None,
               live: Callable[[dict], None] | None = None, whole: bool = False):
    """Call the BAML ``function`` until an attempt succeeds or the rules above give
    up.  Raises BAML's ``BamlValidationError`` for a reply that does not parse,
    :class:`CallFailed` for an attempt that brought none, or a :class:`StepError`
    when the deadline left no time for another attempt.  ``prompt_tokens`` is the
    request's estimated prompt size, for the gate and for attempts the server
    gives no usage for.  ``whole``: a reply cut at ``max_tokens`` raises
    :class:`Truncated` (its attempt's outcome ``truncated``) instead of being
    parsed."""
    info.mode = structured_mode(settings, schema)
    max_tokens = settings.tokens_for(function, info.mode)
    failures = rate_limited = timeouts = 0
    while True:
        url, headers, body = await _render(api, settings, function, args, max_tokens)
        body.update(shape_fields(function, schema, info.mode))
        info.request = body
        permit = await gate().acquire(settings.model, prompt_tokens + max_tokens)
        info.waited_s += permit.waited_s
        try:  # after the wait for a permit (a Retry-After may have used up the step's time)
            timeout_s = _time_for_attempt(settings, deadline, info)
        except StepError:
            gate().release(permit, tokens=0, status=None, retry_after=None)
            raise
        tap = StreamTap(live, len(info.attempts) + 1) if settings.stream else None
        started, error, text, usage, finish = time.monotonic(), None, None, None, None
        try:
            text, usage, finish = await _send(url, headers, body, timeout_s, tap)
            if whole and finish == "length":
                raise Truncated(text, max_tokens)
            return _parse(api, function, text)
        except asyncio.CancelledError as exc:
            error = exc
            raise
        except (CallFailed, Truncated, api.errors.BamlValidationError) as exc:
            error = exc
        finally:
            attempt = _finish_attempt(info, tap, error, text, usage, started, prompt_tokens)
            attempt.truncated = finish == "length"
            retry_after = retry_after_s(error.headers) if isinstance(error, HttpStatus) and error.status == 429 \
                else None
            gate().release(permit, tokens=attempt.input_tokens + attempt.output_tokens, status=attempt.status,
                           retry_after=retry_after)
        if isinstance(error, (api.errors.BamlValidationError, Truncated)):
            raise error  # the moniker re-asks, telling the model what was wrong
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


def _parse(api, function: str, text: str):
    """BAML's parse of the reply; a reply it cannot read is a ``BamlValidationError``
    with the raw text, as BAML's own calls raise it."""
    try:
        return getattr(api.b.parse, function)(text)
    except api.errors.BamlValidationError:
        raise
    except api.errors.BamlError as exc:
        raise api.errors.BamlValidationError("", f"Failed to parse LLM response: {exc}", text, str(exc)) from None


def _finish_attempt(info: CallInfo, tap: StreamTap | None, error, text: str | None, usage: dict | None,
                    started: float, prompt_tokens: int) -> Attempt:
    if tap is not None:
        tap.finish()
    outcome = "ok" if error is None else "cancelled" if isinstance(error, asyncio.CancelledError) \
        else error.outcome if isinstance(error, (CallFailed, Truncated)) else "unparseable"
    status = getattr(error, "status", None) if isinstance(error, CallFailed) else (200 if text is not None else None)
    text = text if text is not None else (tap.text if tap is not None else None)
    tokens_in, tokens_out, estimated = _tokens(usage, tap, text, prompt_tokens, outcome)
    message = None if error is None or outcome == "cancelled" else " ".join(str(error).split())[:300]
    attempt = Attempt(n=len(info.attempts) + 1, outcome=outcome, input_tokens=tokens_in, output_tokens=tokens_out,
                      estimated=estimated, duration_ms=round((time.monotonic() - started) * 1000, 1),
                      status=status, error=message)
    info.attempts.append(attempt)
    info.raw = text or None
    if attempt.failed:
        log.info("model call attempt failed: %s", attempt.describe())
    return attempt


def _tokens(usage: dict | None, tap: StreamTap | None, text: str | None, prompt_tokens: int,
            outcome: str) -> tuple[int, int, bool]:
    """An attempt's tokens: the server's usage when it gave one; else an estimate
    (marked).  A request refused before the model ran (429, 4xx, 5xx,
    unreachable) with nothing streamed costs nothing; one cut off while the
    model ran (timeout, cancelled) costs its prompt and what it wrote."""
    if usage:
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), False
    written = max(tap.tokens if tap else 0, len(text or "") // 4)
    if not written and outcome not in ("timeout", "cancelled", "ok", "unparseable"):
        return 0, 0, False
    return prompt_tokens, written, True


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
    which attempt failed how.  The endpoint is named, not its URL (the
    operator's), and what the server said is only an excerpt."""
    where = f"{settings.model} at endpoint {settings.endpoint!r}"
    tried = f"\n{info.summary()}" if info is not None and info.attempts else ""
    if isinstance(exc, Unreachable):
        fix = ("start Ollama, or have the operator set AGENTSVC_LLM_BASE_URL to a running OpenAI-compatible server"
               if settings.endpoint == "default" else "the operator's endpoints file says where it is")
        log.warning("cannot reach LLM endpoint %s at %s: %s", settings.endpoint, settings.base_url, exc)
        return StepError(f"cannot reach the LLM endpoint {settings.endpoint!r} — {fix}\n{excerpt(str(exc))}{tried}")
    if isinstance(exc, TimedOut) or getattr(exc, "outcome", None) == "timeout":
        count = len(info.attempts) if info is not None else 1
        return StepError(f"LLM call timed out after {settings.timeout_s:g}s ({where}), {count} attempt(s); "
                         f"raise llm.timeout_s or lower llm.max_tokens ({settings.max_tokens or 'default'}){tried}")
    if isinstance(exc, HttpStatus):
        return StepError(f"LLM endpoint answered HTTP {exc.status} ({where})\n{excerpt(exc.message)}{tried}")
    return StepError(f"LLM call failed ({where})\n{type(exc).__name__}: {excerpt(str(exc))}{tried}")
