"""Tools from MCP servers, called through the official ``mcp`` SDK.

The operator (never an API caller: a session must not be able to start
processes) lists MCP servers in a file named by ``--mcp-config``
(``AGENTSVC_MCP_CONFIG``), JSON or TOML::

    {"servers": {
        "files": {"command": "python", "args": ["-m", "my_mcp_server"], "env": {"ROOT": "/srv"}},
        "search": {"url": "http://127.0.0.1:9000/mcp", "timeout_s": 20, "needs_approval": true}
    }}

(``mcpServers`` is accepted for ``servers``, as in other MCP clients.)  At
start agents.py connects to every server, lists its tools and registers each
as ``<server>.<tool>`` with the tool's ``inputSchema`` as its args schema.

A server that fails to start, or dies later, is logged with its name; it never
takes the service down.  Calls to its tools end ``failed`` with an error that
names the server and the reason, and the next call connects again.  A server
that was down at start keeps the tools recorded in the catalog by an earlier
run (so sessions that name them get a clear failure, not "unknown tool"), and
is retried in the background until it lists its tools.

A call is never sent twice by this module: a reconnect happens only *before*
a call, so a call whose outcome was lost with its connection ends ``failed``.
"""
import asyncio
import json
import logging
import re
import tomllib
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tools import schema
from tools.tool import Tool, ToolContext
from tools.tool_registry import ToolRegistry

log = logging.getLogger("tools.mcp")

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
RETRY_FIRST_S, RETRY_MAX_S = 5.0, 300.0


class ToolFailed(Exception):
    """A call that did not succeed; its message is what the model is told."""


class ServerConfig(BaseModel):
    """One MCP server: a stdio command (with args, env, cwd) or a streamable-HTTP URL."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = Field(None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="added to a minimal safe environment")
    cwd: str | None = None
    url: str | None = Field(None, pattern=r"^https?://\S+$")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP headers (url servers only)")
    timeout_s: float = Field(60.0, gt=0, le=86400, description="per call")
    connect_timeout_s: float = Field(30.0, gt=0, le=600)
    tools: list[str] | None = Field(None, description="expose only these tools (default: all)")
    needs_approval: bool | list[str] = False
    idempotent: bool | list[str] = False

    @model_validator(mode="after")
    def one_transport(self):
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of 'command' (stdio) or 'url' (streamable HTTP)")
        if self.headers and self.url is None:
            raise ValueError("'headers' applies to url servers only")
        return self

    def flag(self, which: str, tool: str) -> bool:
        value = getattr(self, which)
        return value if isinstance(value, bool) else tool in value


class McpConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    servers: dict[str, ServerConfig] = Field(default_factory=dict, alias="mcpServers")

    @model_validator(mode="after")
    def server_names(self):
        for name in self.servers:
            if not SERVER_NAME.match(name):
                raise ValueError(f"server name {name!r}: use 1-64 letters, digits, '_' or '-'")
        return self


def load_config(path: str) -> McpConfig:
    """Read the operator's file; a bad file stops the service at start (SystemExit)
    with a message that says what is wrong, rather than running without its tools."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        data = tomllib.loads(raw.decode()) if path.endswith(".toml") else json.loads(raw)
        if isinstance(data, dict) and "servers" in data and "mcpServers" not in data:
            data = {"mcpServers": data["servers"], **{k: v for k, v in data.items() if k != "servers"}}
        return McpConfig.model_validate(data)
    except OSError as exc:
        raise SystemExit(f"--mcp-config {path}: cannot read: {exc}") from None
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        if isinstance(exc, ValidationError):
            exc = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
        raise SystemExit(f"--mcp-config {path}: invalid: {exc}") from None


def result_value(result) -> Any:
    """A CallToolResult as the value the model sees: the structured content when
    the server gave one, else the text blocks joined (other blocks noted)."""
    if result.structured_content is not None and not result.is_error:
        return result.structured_content
    parts = []
    for block in result.content:
        text = getattr(block, "text", None)
        if text is not None:
            parts.append(text)
        else:
            kind = getattr(block, "type", type(block).__name__)
            mime = getattr(block, "mime_type", None)
            parts.append(f"[{kind}{' ' + mime if mime else ''} content omitted]")
    return "\n".join(parts)


class McpServer:
    """One configured server and its connection, opened on demand.

    The SDK's ``Client`` is an async context manager built on anyio task
    groups, which must be entered and left in the same task: one owner task per
    connection holds it open until :meth:`disconnect` (or the server's death).
    Calls are made from the runner's tasks while the owner holds the session.
    """

    def __init__(self, name: str, config: ServerConfig, on_status: Callable[[], None] | None = None):
        self.name = name
        self.config = config
        self.on_status = on_status or (lambda: None)  # told when status flips (the catalog shows it)
        self.status = "not_started"  # connected | unavailable
        self.error: str | None = None
        self._client = None
        self._owner: asyncio.Task | None = None
        self._release: asyncio.Event | None = None
        self._lock = asyncio.Lock()

    def _target(self):
        from mcp import StdioServerParameters

        if self.config.url:
            if not self.config.headers:
                return self.config.url
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = httpx2.AsyncClient(headers=self.config.headers, timeout=httpx2.Timeout(30, read=300))
            return streamable_http_client(self.config.url, http_client=http)
        return StdioServerParameters(command=self.config.command, args=self.config.args,
                                     env=self.config.env or None, cwd=self.config.cwd)

    async def _own(self, ready: asyncio.Future, release: asyncio.Event) -> None:
        from mcp import Client

        client = None
        try:
            async with Client(self._target(), read_timeout_seconds=self.config.timeout_s) as client:
                self._client = client
                ready.set_result(None)
                await release.wait()
        except BaseException as exc:  # a failed start, or the server went away
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ToolFailed("connection cancelled"))
            if not isinstance(exc, (Exception, asyncio.CancelledError)):
                raise
        finally:
            if client is not None and self._client is client:  # never clear a newer connection
                self._client = None

    def _open(self) -> bool:
        """Whether the connection is up, as far as can be told without a request:
        the SDK's dispatcher marks itself closed when the server's stream ends
        (the server exited), so a server that died between calls is reconnected
        before the next call instead of failing it."""
        if self._client is None or self._owner is None or self._owner.done():
            return False
        session = getattr(self._client, "_session", None)
        return not getattr(getattr(session, "_dispatcher", None), "_closed", False)

    async def connect(self) -> None:
        """Open the connection if it is not open; raise ToolFailed if that fails."""
        async with self._lock:
            if self._open():
                return
            if self._owner is not None:
                self._mark_down("the server's connection closed")
                await self._stop_owner()
            ready = asyncio.get_running_loop().create_future()
            self._release = asyncio.Event()
            self._owner = asyncio.create_task(self._own(ready, self._release), name=f"mcp:{self.name}")
            try:
                await asyncio.wait_for(asyncio.shield(ready), self.config.connect_timeout_s)
            except BaseException as exc:
                await self._stop_owner()
                reason = (f"no answer within {self.config.connect_timeout_s:g}s"
                          if isinstance(exc, asyncio.TimeoutError) else _describe(exc))
                self._mark_down(f"cannot start: {reason}")
                if isinstance(exc, asyncio.CancelledError):
                    raise
                raise ToolFailed(f"MCP server {self.name!r} is unavailable: {self.error}") from None
            changed = self.status != "connected"
            self.status, self.error = "connected", None
            if changed:
                log.info("mcp server %s connected", self.name)
                self.on_status()

    async def list_tools(self) -> list:
        await self.connect()
        tools, cursor = [], None
        for _ in range(100):  # a paginator that never ends cannot hang the start
            page = await self._client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        wanted = self.config.tools
        return [t for t in tools if wanted is None or t.name in wanted]

    async def call(self, tool: str, args: dict) -> Any:
        await self.connect()
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        client = self._client
        try:
            result = await client.call_tool(tool, args, read_timeout_seconds=self.config.timeout_s)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise ToolFailed(f"MCP tool {self.name}.{tool} timed out after {self.config.timeout_s:g}s") from None
            if exc.code == CONNECTION_CLOSED:
                await self._lost(client, f"connection closed during a call to {tool}")
                raise ToolFailed(f"MCP server {self.name!r} closed the connection during the call "
                                 "(outcome unknown; it is reconnected on the next call)") from None
            raise ToolFailed(f"MCP server {self.name!r} refused the call: {exc}") from None
        except (OSError, EOFError) as exc:  # the transport broke under us
            await self._lost(client, _describe(exc))
            raise ToolFailed(f"MCP server {self.name!r} failed during the call: {_describe(exc)}") from None
        except Exception as exc:
            if type(exc).__module__.startswith("anyio"):  # ClosedResourceError, BrokenResourceError
                await self._lost(client, _describe(exc))
                raise ToolFailed(f"MCP server {self.name!r} connection broke: {_describe(exc)}") from None
            raise
        if result.is_error:
            raise ToolFailed(str(result_value(result)) or f"MCP tool {self.name}.{tool} reported an error")
        return result_value(result)

    def _mark_down(self, error: str) -> None:
        changed = self.status != "unavailable" or self.error != error
        self.status, self.error = "unavailable", error
        if changed:
            log.error("mcp server %s unavailable: %s", self.name, error)
            self.on_status()

    async def _lost(self, client, error: str) -> None:
        """The connection ``client`` broke.  Of several calls failing with it,
        only the first closes it; a newer connection is left alone."""
        async with self._lock:
            if self._client is client or self._client is None:
                self._mark_down(error)
                await self._stop_owner()

    async def _stop_owner(self) -> None:
        owner, self._owner = self._owner, None
        if self._release is not None:
            self._release.set()
        if owner is not None and not owner.done():
            try:
                await asyncio.wait_for(owner, 10)
            except (asyncio.TimeoutError, asyncio.CancelledError, Exception):
                owner.cancel()
        self._client = None

    async def disconnect(self) -> None:
        async with self._lock:
            await self._stop_owner()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0] if exc.exceptions else exc
        return _describe(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@dataclass
class McpToolInfo:
    """What the bridge knows of one MCP tool (also what the catalog records)."""

    server: str
    tool: str
    description: str
    input_schema: dict


class McpBridge:
    """All configured servers, and the registry entries of their tools."""

    def __init__(self, config: McpConfig, registry: ToolRegistry,
                 on_change: Callable[[], None] | None = None):
        self.on_change = on_change or (lambda: None)
        self._started = False  # status flips are published once start() has published the first catalog
        self.servers = {name: McpServer(name, cfg, on_status=self._status_changed)
                        for name, cfg in config.servers.items()}
        self.registry = registry
        self.tools: dict[str, McpToolInfo] = {}  # "<server>.<tool>" -> info
        self._retry: asyncio.Task | None = None

    async def start(self, known: list[dict] | None = None) -> None:
        """Connect to every server at once and register their tools.  ``known``
        is the catalog of an earlier run: a server down now keeps those tools."""
        results = await asyncio.gather(*(self.discover(s) for s in self.servers.values()), return_exceptions=True)
        for server, outcome in zip(self.servers.values(), results):
            if isinstance(outcome, BaseException):
                self._register_known(server, known or [])
        if any(s.status != "connected" for s in self.servers.values()):
            self._retry = asyncio.create_task(self._retry_down(), name="mcp-retry")
        self._started = True
        self.on_change()

    def _status_changed(self) -> None:
        if self._started:
            self.on_change()

    async def discover(self, server: McpServer) -> int:
        """List ``server``'s tools and (re)register them; raise ToolFailed when down."""
        try:
            listed = await server.list_tools()
        except ToolFailed:
            raise
        except Exception as exc:
            server._mark_down(f"listing tools failed: {_describe(exc)}")
            await server.disconnect()
            raise ToolFailed(server.error) from None
        for stale in [n for n, info in self.tools.items() if info.server == server.name]:
            del self.tools[stale]
        for tool in listed:
            self._register(server, McpToolInfo(server.name, tool.name, tool.description or tool.title or "",
                                               tool.input_schema or {"type": "object"}))
        log.info("mcp server %s: %d tool(s): %s", server.name, len(listed), ", ".join(t.name for t in listed))
        return len(listed)

    def _register_known(self, server: McpServer, known: list[dict]) -> None:
        for entry in known:
            mcp = entry.get("mcp") or {}
            if mcp.get("server") == server.name and mcp.get("tool") and entry.get("name") not in self.tools:
                self._register(server, McpToolInfo(server.name, mcp["tool"], entry.get("description") or "",
                                                   entry.get("args_schema") or {"type": "object"}))

    def _register(self, server: McpServer, info: McpToolInfo) -> None:
        try:
            schema.validator(info.input_schema)
        except schema.BadSchema as exc:
            log.error("mcp tool %s.%s skipped: its inputSchema is not a valid JSON schema: %s",
                      server.name, info.tool, exc)
            return

        async def run(args, ctx: ToolContext, _tool=info.tool):
            args = args.model_dump() if isinstance(args, BaseModel) else dict(args or {})
            problem = schema.args_problem(info.input_schema, args)  # also checked by the runner, if it can
            if problem:
                raise ToolFailed(f"invalid args for {server.name}.{_tool}: {problem}")
            return await server.call(_tool, args)

        name = f"{server.name}.{info.tool}"
        cfg = server.config
        self.registry.register(Tool(
            name=name, description=info.description, run=run, args_schema=info.input_schema,
            timeout_s=cfg.timeout_s + cfg.connect_timeout_s,  # a call may have to reconnect first
            idempotent=cfg.flag("idempotent", info.tool), needs_approval=cfg.flag("needs_approval", info.tool)))
        self.tools[name] = info

    async def _retry_down(self) -> None:
        """Try servers that were down at start again, with backoff, until all list."""
        delay = RETRY_FIRST_S
        while any(s.status != "connected" for s in self.servers.values()):
            await asyncio.sleep(delay)
            for server in self.servers.values():
                if server.status != "connected":
                    try:
                        await self.discover(server)
                        self.on_change()
                    except ToolFailed:
                        pass
            delay = min(delay * 2, RETRY_MAX_S)

    def describe(self, name: str) -> dict | None:
        """The ``mcp`` part of a catalog entry: server, tool, and the server's status."""
        info = self.tools.get(name)
        if info is None:
            return None
        server = self.servers[info.server]
        return {"server": info.server, "tool": info.tool, "status": server.status, "error": server.error}

    async def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
        await asyncio.gather(*(s.disconnect() for s in self.servers.values()), return_exceptions=True)

