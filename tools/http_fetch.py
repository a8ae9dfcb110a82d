"""``http_fetch``: GET a web page or API, only from hosts the operator allowed,
and only at addresses the operator allowed.

Safe by default: the allowlist (``--http-fetch-allow``, env
``AGENTSVC_HTTP_FETCH_ALLOW``, comma-separated) is empty, so the tool refuses
every URL until the operator names hosts.  An entry is either

- a **name**: a host name (``example.com``) or a wildcard for subdomains
  (``*.example.com``, which does not match ``example.com`` itself); or
- an **address**: an IP address or a range (``127.0.0.1``, ``10.0.0.0/8``,
  IPv6 in brackets: ``[::1]``, ``[fd00::]/8``);

either with ``:port`` (only that port) or without (any port).  The model picks
the URL, so it must never reach a host nobody allowed, and names are not
enough: a name the operator allowed may resolve (or be made to resolve) to the
service's own machine, a private network or a cloud metadata address.  So
every hop, the first and each redirect, passes two checks:

1. **Who.**  A URL naming a host must match a name entry; a URL with an IP
   address must match an address entry.  Userinfo in URLs and schemes other
   than http and https are refused.
2. **Where.**  The host is resolved, and each address it resolves to is
   checked before anything connects: a public address is fine; a loopback,
   private, link-local, cloud metadata (169.254.169.254, fd00:ec2::254),
   shared (100.64/10), multicast, unspecified or reserved one only when an
   address entry lists it (with its port, if the entry names one).  The
   connection goes to a checked address and no other: the resolver of the
   HTTP client (:class:`CheckedResolver`) is the one that checks, so a DNS
   answer cannot change between the check and the connect.  A host none of
   whose addresses may be reached is refused, naming the address and why.

So a port-less name entry such as ``localhost`` no longer reaches the
service's own port: ``localhost`` resolves to loopback, which needs an
address entry (``127.0.0.1:8080``), and that one opens port 8080 only.
Redirects are followed by hand, each hop checked the same way.

Caps: the whole fetch takes at most ``timeout_s`` (``--http-fetch-timeout``),
a body over ``max_bytes`` (``--http-fetch-max-bytes``) is refused rather than
read on, and the text handed back to the model is cut at ``max_chars`` with a
note saying so.  The result is ``{url, status, content_type, text,
truncated, note?}``; a non-2xx status is a result, not a failure, since the
model may want to read the error page.
"""
import asyncio
import ipaddress
import os
import socket
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from pydantic import BaseModel, ConfigDict, Field

from tools.tool import Tool, ToolContext

NAME = "http_fetch"
MAX_REDIRECTS = 5
TEXTUAL = ("text/", "application/json", "application/xml", "application/xhtml+xml", "application/javascript",
           "application/ld+json", "application/rss+xml", "application/atom+xml")
METADATA = (ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"))
NAT64 = ipaddress.ip_network("64:ff9b::/96")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class FetchRefused(Exception):
    """The URL or the response is outside what the operator allowed."""


class FetchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=4096, description="absolute http:// or https:// URL on an allowed host")


def _split_entry(entry: str) -> tuple[str, int | None]:
    """An allowlist entry's host (name, address or range) and port (None: any)."""
    try:
        ipaddress.ip_network(entry, strict=False)
        return entry.lower(), None  # an IPv6 address written without brackets: all of it is the address
    except ValueError:
        pass
    host, sep, port = entry.rpartition(":")
    if sep and port.isdigit() and "]" not in port:
        return host.replace("[", "").replace("]", "").lower(), int(port)
    return entry.replace("[", "").replace("]", "").lower(), None


def _network(host: str) -> Network | None:
    """The address or range an entry names, or None for a host name."""
    try:
        return ipaddress.ip_network(host, strict=False)
    except ValueError:
        if "/" in host:
            raise ValueError(f"http_fetch allowlist entry {host!r} is neither a host name nor an address range") \
                from None
        return None


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return None


def _embedded(address: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, NAT64), which is where it leads."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def not_public(address: Address) -> str | None:
    """Why ``address`` is not a public one (None when it is)."""
    for candidate in dict.fromkeys((address, _embedded(address))):
        if candidate in METADATA:
            return "a cloud metadata address"
        for test, why in (("is_loopback", "loopback"), ("is_unspecified", "unspecified"),
                          ("is_link_local", "link-local"), ("is_multicast", "multicast"),
                          ("is_private", "private"), ("is_reserved", "reserved")):
            if getattr(candidate, test):
                return why
        if not candidate.is_global:
            return "not public"
    return None


@dataclass(frozen=True)
class FetchPolicy:
    """What the operator allows; built once from flags or environment."""

    allow: tuple[str, ...] = ()
    max_bytes: int = 1 << 20
    max_chars: int = 20_000
    timeout_s: float = 20.0
    _names: tuple = field(default=(), compare=False, repr=False)  # (pattern, port or None)
    _networks: tuple = field(default=(), compare=False, repr=False)  # (network, port or None)

    def __post_init__(self):
        entries = tuple(e.strip() for e in self.allow if e and e.strip())
        names, networks = [], []
        for host, port in (_split_entry(e) for e in entries):
            network = _network(host)
            (names if network is None else networks).append((host if network is None else network, port))
        object.__setattr__(self, "allow", entries)
        object.__setattr__(self, "_names", tuple(names))
        object.__setattr__(self, "_networks", tuple(networks))

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
        """Who: may a URL name this host (and port)?"""
        address = _address(host)
        if address is not None:
            return self.lists(address, port)
        host = host.lower().rstrip(".")
        for pattern, want_port in self._names:
            if want_port is not None and want_port != port:
                continue
            if pattern.startswith("*."):
                if host.endswith(pattern[1:]) and host != pattern[2:]:
                    return True
            elif host == pattern:
                return True
        return False

    def lists(self, address: Address, port: int) -> bool:
        """Does an address entry list ``address`` (on ``port``)?"""
        return any(address in network and (want_port is None or want_port == port)
                   for network, want_port in self._networks if network.version == address.version)

    def reaches(self, address: Address, port: int) -> str | None:
        """Where: None if a connection to ``address:port`` is allowed, else why not."""
        why = not_public(address)
        if why is None or self.lists(address, port):
            return None
        return why

    def check(self, url: str) -> str:
        """The URL if it may be fetched, FetchRefused (saying why) if not.  Who:
        its host matches an entry.  Where: an address in the URL matches an
        address entry, so it may be reached; a name's addresses are checked
        when it is resolved (:class:`CheckedResolver`)."""
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

    def refusal(self, host: str, port: int, refused: list[tuple[Address, str]]) -> FetchRefused:
        """The refusal of a host whose addresses may not be reached, saying which and how to allow one."""
        listed = ", ".join(f"{address} ({why})" for address, why in refused[:4])
        first = refused[0][0]
        entry = f"[{first}]:{port}" if ":" in str(first) else f"{first}:{port}"
        return FetchRefused(f"host {host}:{port} resolves only to addresses the operator has not allowed: {listed}; "
                            f"only an address entry allows one (e.g. {entry}, or a range)")


class CheckedResolver:
    """The HTTP client's resolver: resolves a host and hands back only the
    addresses the policy lets it reach, so the client connects to an address
    that was checked (and refuses the hop when none may be reached).  aiohttp
    does not resolve an address given in the URL: :meth:`FetchPolicy.check`
    has checked those already."""

    def __init__(self, policy: FetchPolicy):
        self.policy = policy

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_UNSPEC) -> list[dict]:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM, family=family)
        allowed, refused = [], []
        for fam, _type, proto, _name, sockaddr in infos:
            address = _address(sockaddr[0])
            why = "unreadable" if address is None else self.policy.reaches(address, port)
            if why is None:
                allowed.append({"hostname": host, "host": str(address), "port": port, "family": fam,
                                "proto": proto, "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV})
            elif (address or sockaddr[0], why) not in refused:
                refused.append((address or sockaddr[0], why))
        if not allowed:
            if not refused:
                raise FetchRefused(f"host {host} does not resolve")
            raise self.policy.refusal(host, port, refused)
        return allowed

    async def close(self) -> None:
        pass


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
    # Every connection goes to an address the resolver checked; none is cached past its check.
    connector = aiohttp.TCPConnector(resolver=CheckedResolver(policy), use_dns_cache=False)
    try:
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False, connector=connector) as session:
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

    def precheck(args: dict) -> str | None:
        """A URL the policy refuses fails when planned, before anyone is asked to approve it."""
        try:
            policy.check(FetchArgs.model_validate(args).url)
        except FetchRefused as exc:
            return f"{NAME} refused: {exc}"
        return None

    return Tool(name=NAME, run=run, args_model=FetchArgs, timeout_s=policy.timeout_s + 5, idempotent=True,
                precheck=precheck,
                description=(f"HTTP GET a URL and return its status, content type and text (text cut at "
                             f"{policy.max_chars} characters; bodies over {policy.max_bytes} bytes refused). "
                             f"Allowed hosts: {hosts}."))
