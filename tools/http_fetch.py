"""``http_fetch``: GET a web page or API, only from hosts the operator allowed.

Safe by default: the allowlist (``--http-fetch-allow``, env
``AGENTSVC_HTTP_FETCH_ALLOW``, comma-separated) is empty, so the tool refuses
every URL until the operator names hosts.  An entry is a host name
(``example.com``), a host and port (``127.0.0.1:8080``; without a port, any
port), or a wildcard for subdomains (``*.example.com``, which does not match
``example.com`` itself).  The model picks the URL, so it must never reach a
host nobody allowed: userinfo in URLs is refused, schemes other than http and
https are refused, and redirects are followed by hand, each hop checked
against the list.

Caps: the whole fetch takes at most ``timeout_s`` (``--http-fetch-timeout``),
a body over ``max_bytes`` (``--http-fetch-max-bytes``) is refused rather than
read on, and the text handed back to the model is cut at ``max_chars`` with a
note saying so.  The result is ``{url, status, content_type, text,
truncated, note?}``; a non-2xx status is a result, not a failure, since the
model may want to read the error page.
"""
import asyncio
import os
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from pydantic import BaseModel, ConfigDict, Field

from tools.tool import Tool, ToolContext

NAME = "http_fetch"
MAX_REDIRECTS = 5
TEXTUAL = ("text/", "application/json", "application/xml", "application/xhtml+xml", "application/javascript",
           "application/ld+json", "application/rss+xml", "application/atom+xml")


class FetchRefused(Exception):
    """The URL or the response is outside what the operator allowed."""


class FetchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=4096, description="absolute http:// or https:// URL on an allowed host")


def _split_entry(entry: str) -> tuple[str, int | None]:
    host, sep, port = entry.rpartition(":")
    if sep and port.isdigit() and "]" not in port:
        return host.strip("[]").lower(), int(port)
    return entry.strip("[]").lower(), None


@dataclass(frozen=True)
class FetchPolicy:
    """What the operator allows; built once from flags or environment."""

    allow: tuple[str, ...] = ()
    max_bytes: int = 1 << 20
    max_chars: int = 20_000
    timeout_s: float = 20.0
    _parsed: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self):
        entries = tuple(e.strip() for e in self.allow if e and e.strip())
        object.__setattr__(self, "allow", entries)
        object.__setattr__(self, "_parsed", tuple(_split_entry(e) for e in entries))

    @classmethod
    def from_env(cls, environ=os.environ) -> "FetchPolicy":
        def num(name, default, kind):
            value = environ.get(name)
            return kind(value) if value not in (None, "") else default
        return cls(allow=tuple((environ.get("AGENTSVC_HTTP_FETCH_ALLOW") or "").split(",")),
                   max_bytes=num("AGENTSVC_HTTP_FETCH_MAX_BYTES", 1 << 20, int),
                   max_chars=num("AGENTSVC_HTTP_FETCH_MAX_CHARS", 20_000, int),
                   timeout_s=num("AGENTSVC_HTTP_FETCH_TIMEOUT_S", 20.0, float))

    def allows(self, host: str, port: int) -> bool:
        host = host.lower().rstrip(".")
        for pattern, want_port in self._parsed:
            if want_port is not None and want_port != port:
                continue
            if pattern.startswith("*."):
                if host.endswith(pattern[1:]) and host != pattern[2:]:
                    return True
            elif host == pattern:
                return True
        return False

    def check(self, url: str) -> str:
        """The URL if it may be fetched; FetchRefused (saying why) if not."""
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise FetchRefused(f"not a valid URL: {url!r} ({exc})") from None
        if parts.scheme not in ("http", "https"):
            raise FetchRefused(f"only http and https URLs are fetched, not {parts.scheme or 'a relative URL'!r}")
        if parts.username is not None or parts.password is not None:
            raise FetchRefused("URLs with credentials (user:password@) are refused")
        if not parts.hostname:
            raise FetchRefused(f"URL has no host: {url!r}")
        if not self.allows(parts.hostname, port):
            allowed = ", ".join(self.allow) if self.allow else "none (the operator has not allowed any host)"
            raise FetchRefused(f"host {parts.hostname}:{port} is not on the operator's allowlist; "
                               f"allowed: {allowed}")
        return url


def _is_text(content_type: str) -> bool:
    return content_type.startswith(TEXTUAL) or content_type.endswith(("+json", "+xml"))


async def _read_capped(response, max_bytes: int) -> bytes:
    declared = response.content_length
    if declared is not None and declared > max_bytes:
        raise FetchRefused(f"response body is {declared} bytes, over the {max_bytes}-byte cap")
    body = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > max_bytes:
            raise FetchRefused(f"response body exceeds the {max_bytes}-byte cap")
    return bytes(body)


async def fetch(url: str, policy: FetchPolicy) -> dict:
    """GET ``url`` under ``policy``, following allowed redirects by hand."""
    import aiohttp  # on first use: app.py lists this tool but never runs it

    timeout = aiohttp.ClientTimeout(total=policy.timeout_s)
    current = policy.check(url)
    try:
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
            for _hop in range(MAX_REDIRECTS + 1):
                async with session.get(current, allow_redirects=False,
                                       headers={"User-Agent": "agentsvc-http_fetch"}) as response:
                    location = response.headers.get("Location")
                    if response.status in (301, 302, 303, 307, 308) and location:
                        target = urljoin(current, location)
                        try:
                            current = policy.check(target)
                        except FetchRefused as exc:
                            raise FetchRefused(f"redirect from {current} to {target} refused: {exc}") from None
                        continue
                    body = await _read_capped(response, policy.max_bytes)
                    return _result(current, response, body, policy)
            raise FetchRefused(f"more than {MAX_REDIRECTS} redirects")
    except asyncio.TimeoutError:
        raise FetchRefused(f"no complete response within {policy.timeout_s:g}s") from None
    except aiohttp.ClientError as exc:
        raise FetchRefused(f"request failed: {type(exc).__name__}: {exc}") from None


def _result(url: str, response, body: bytes, policy: FetchPolicy) -> dict:
    content_type = (response.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    result = {"url": url, "status": response.status, "content_type": content_type or None,
              "bytes": len(body), "truncated": False}
    if body and content_type and not _is_text(content_type):
        result["text"] = None
        result["note"] = f"binary content ({content_type}, {len(body)} bytes) is not shown"
        return result
    text = body.decode(response.charset or "utf-8", errors="replace")
    if len(text) > policy.max_chars:
        result["truncated"] = True
        result["note"] = f"text truncated to the first {policy.max_chars} of {len(text)} characters"
        text = text[:policy.max_chars]
    result["text"] = text
    return result


def make_tool(policy: FetchPolicy) -> Tool:
    """The ``http_fetch`` tool bound to the operator's ``policy``.  Its
    description names the allowed hosts, so a model knows where it may go."""
    hosts = ", ".join(policy.allow) if policy.allow else "none yet (every URL is refused)"

    async def run(args: FetchArgs, ctx: ToolContext) -> dict:
        if not isinstance(args, FetchArgs):
            args = FetchArgs.model_validate(args)
        return await fetch(args.url, policy)

    return Tool(name=NAME, run=run, args_model=FetchArgs, timeout_s=policy.timeout_s + 5, idempotent=True,
                description=(f"HTTP GET a URL and return its status, content type and text (text cut at "
                             f"{policy.max_chars} characters; bodies over {policy.max_bytes} bytes refused). "
                             f"Allowed hosts: {hosts}."))
