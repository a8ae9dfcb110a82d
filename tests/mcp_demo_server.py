"""A small MCP server (stdio) written with the official SDK, for the tests.

    python tests/mcp_demo_server.py              # over stdio
    python tests/mcp_demo_server.py --http PORT  # streamable HTTP on 127.0.0.1:PORT/mcp

Every executed call appends a line "<tool> <pid>" to the file named by
MCP_DEMO_LOG (if set), so tests can count executions across restarts.
"""
import asyncio
import os

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("demo")


def _count(tool: str) -> None:
    path = os.environ.get("MCP_DEMO_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{tool} {os.getpid()}\n")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    _count("add")
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    _count("echo")
    return text


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep for the given seconds, then answer."""
    _count("sleep")
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def fail(reason: str) -> str:
    """Fail on purpose with the given reason."""
    _count("fail")
    raise ToolError(reason)


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    _count("crash")
    os._exit(3)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
