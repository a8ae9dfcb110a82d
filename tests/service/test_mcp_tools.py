"""MCP servers' tools through the tool registry (tools/mcp.py), against a real
MCP server written with the same SDK (tests/mcp_demo_server.py, over stdio and
streamable HTTP).  Their listing by app.py and their calls from sessions are in
test_tool_edges_service.py."""
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import free_port, until, wait_for
from tools.mcp import McpBridge, McpConfig, ServerConfig, ToolFailed, load_config
from tools.tool_registry import ToolContext, ToolRegistry

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "tests" / "mcp_demo_server.py")
CTX = ToolContext(tool_call_id="t1", agent_id="a1", session_id="s1", iteration=0)


def demo(log_path=None, **options) -> ServerConfig:
    env = {"MCP_DEMO_LOG": str(log_path)} if log_path else {}
    return ServerConfig(command=sys.executable, args=[DEMO], env=env, **options)


def executions(log_path, tool: str) -> int:
    if not os.path.exists(log_path):
        return 0
    return sum(1 for line in open(log_path) if line.split()[0] == tool)


async def call(registry: ToolRegistry, name: str, args: dict):
    return await registry.get(name).run(args, CTX)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_tools_are_listed_registered_called_and_checked(tmp_path):
    log_path = tmp_path / "calls.log"

    async def scenario():
        registry = ToolRegistry()
        changes = []
        bridge = McpBridge(McpConfig(servers={"demo": demo(log_path, needs_approval=["add"])}), registry,
                           on_change=lambda: changes.append(1))
        await bridge.start()
        try:
            assert {"demo.add", "demo.echo", "demo.sleep", "demo.fail"} <= set(registry.names())
            add = registry.get("demo.add")
            assert add.args_schema["properties"]["a"]["type"] == "integer"
            assert add.schema()["required"] == ["a", "b"]
            assert add.description == "Add two integers."
            assert add.needs_approval and not registry.get("demo.echo").needs_approval
            assert changes, "the catalog is published after discovery"
            assert await call(registry, "demo.add", {"a": 2, "b": 40}) == {"result": 42}
            assert await call(registry, "demo.echo", {"text": "héllo"}) == {"result": "héllo"}
            # calls from concurrent tasks share one connection
            both = await asyncio.gather(call(registry, "demo.add", {"a": 1, "b": 1}),
                                        call(registry, "demo.echo", {"text": "x"}))
            assert both == [{"result": 2}, {"result": "x"}]
            assert bridge.describe("demo.add") == {"server": "demo", "tool": "add", "status": "connected",
                                                   "error": None}
            # bad args are refused before the server sees them
            with pytest.raises(ToolFailed, match=r"invalid args for demo.add: a: 'x' is not of type 'integer'"):
                await call(registry, "demo.add", {"a": "x", "b": 1})
            with pytest.raises(ToolFailed, match="'b' is a required property"):
                await call(registry, "demo.add", {"a": 1})
            with pytest.raises(ToolFailed, match="nope, on purpose"):  # the tool's own error reaches the model
                await call(registry, "demo.fail", {"reason": "nope, on purpose"})
        finally:
            await bridge.close()
    run(scenario())
    assert executions(log_path, "add") == 2  # the two good calls only
    assert executions(log_path, "fail") == 1


def test_a_dying_server_fails_its_call_and_is_reconnected_on_the_next(tmp_path, caplog):
    log_path = tmp_path / "calls.log"

    async def scenario():
        registry = ToolRegistry()
        published = []
        bridge = McpBridge(McpConfig(servers={"demo": demo(log_path)}), registry,
                           on_change=lambda: published.append(bridge.describe("demo.add")["status"]))
        await bridge.start()
        try:
            with pytest.raises(ToolFailed, match="'demo' closed the connection during the call"):
                await call(registry, "demo.crash", {})
            assert bridge.describe("demo.crash")["status"] == "unavailable"
            assert await call(registry, "demo.add", {"a": 1, "b": 2}) == {"result": 3}
            assert bridge.describe("demo.add")["status"] == "connected"
            assert published == ["connected", "unavailable", "connected"]  # the catalog follows the server
            # calls in flight when it dies all fail, and the one connection is closed once
            outcomes = await asyncio.gather(call(registry, "demo.sleep", {"seconds": 30}),
                                            call(registry, "demo.sleep", {"seconds": 30}),
                                            crash_soon(registry, log_path), return_exceptions=True)
            assert all(isinstance(o, ToolFailed) for o in outcomes), outcomes
            assert await call(registry, "demo.add", {"a": 2, "b": 2}) == {"result": 4}
            # killed between two calls: the next call starts it again instead of failing
            first = (await call(registry, "demo.pid", {}))["result"]
            os.kill(first, 9)
            await asyncio.sleep(0)
            second = await wait_until_answers(registry)
            assert second != first
        finally:
            await bridge.close()
    run(scenario())
    assert executions(log_path, "crash") == 2
    assert "mcp server demo unavailable" in caplog.text


async def crash_soon(registry, log_path):
    """Crash the server once both sleeps have reached it (it logs each call as it starts)."""
    await until(lambda: executions(log_path, "sleep") >= 2, timeout=90, what="both sleeps to reach the server")
    return await call(registry, "demo.crash", {})


async def wait_until_answers(registry):
    """The pid of the server once the killed one is gone: the first call after
    the kill either finds it dead (and restarts it) or races its exit."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return (await call(registry, "demo.pid", {}))["result"]
        except ToolFailed:
            if time.monotonic() > deadline:
                raise AssertionError("the server never came back") from None
            await asyncio.sleep(0.1)


def test_a_call_that_outlives_its_timeout_fails():
    async def scenario():
        registry = ToolRegistry()
        bridge = McpBridge(McpConfig(servers={"demo": demo(timeout_s=1.0)}), registry)
        await bridge.start()
        try:
            assert registry.get("demo.sleep").timeout_s == 1.0 + 30.0  # the call's, plus a reconnect
            with pytest.raises(ToolFailed, match=r"demo.sleep timed out after 1s"):
                await call(registry, "demo.sleep", {"seconds": 30})
        finally:
            await bridge.close()
    run(scenario())


def test_a_server_that_cannot_start_keeps_its_known_tools_and_never_raises(tmp_path, caplog):
    known = [{"name": "gone.lookup", "description": "Look a word up.", "source": "mcp",
              "args_schema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
              "mcp": {"server": "gone", "tool": "lookup", "status": "connected", "error": None}}]

    async def scenario():
        registry = ToolRegistry()
        missing = ServerConfig(command=str(tmp_path / "no-such-server"), connect_timeout_s=5)
        bridge = McpBridge(McpConfig(servers={"gone": missing, "demo": demo()}), registry)
        await bridge.start(known=known)
        try:
            assert "demo.add" in registry.names()  # the healthy server is not held back
            assert "gone.lookup" in registry.names()
            assert bridge.describe("gone.lookup")["status"] == "unavailable"
            with pytest.raises(ToolFailed, match="invalid args"):  # still validated against the known schema
                await call(registry, "gone.lookup", {})
            with pytest.raises(ToolFailed, match=r"MCP server 'gone' is unavailable: cannot start"):
                await call(registry, "gone.lookup", {"word": "x"})
        finally:
            await bridge.close()
    run(scenario())
    assert "mcp server gone unavailable: cannot start" in caplog.text


def start_http_server(port: int, log_path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, DEMO, "--http", str(port)], env={**os.environ, "MCP_DEMO_LOG": str(log_path)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def listening():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False
    wait_for(listening, timeout=60, what="the MCP HTTP server to listen")
    return proc


def test_a_streamable_http_server_is_called_and_reconnected(tmp_path):
    port, log_path = free_port(), tmp_path / "calls.log"
    proc = start_http_server(port, log_path)
    config = ServerConfig(url=f"http://127.0.0.1:{port}/mcp", headers={"X-Test": "1"})

    async def scenario():
        nonlocal proc
        registry = ToolRegistry()
        bridge = McpBridge(McpConfig(servers={"web": config}), registry)
        await bridge.start()
        try:
            assert "web.add" in registry.names()
            assert await call(registry, "web.add", {"a": 20, "b": 22}) == {"result": 42}
            proc.kill()
            proc.wait()
            with pytest.raises(ToolFailed, match="'web'"):
                await call(registry, "web.add", {"a": 1, "b": 1})
            proc = await asyncio.to_thread(start_http_server, port, log_path)
            deadline = time.monotonic() + 60
            while True:  # the next call connects again (a call racing the old session may fail first)
                try:
                    assert await call(registry, "web.add", {"a": 1, "b": 1}) == {"result": 2}
                    break
                except ToolFailed:
                    if time.monotonic() > deadline:
                        raise AssertionError("the HTTP server was never reconnected") from None
                    await asyncio.sleep(0.2)
        finally:
            await bridge.close()
    try:
        run(scenario())
    finally:
        proc.kill()
        proc.wait()
    assert executions(log_path, "add") == 2


def test_config_files_json_and_toml(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"mcpServers": {
        "files": {"command": "python", "args": ["-m", "x"], "env": {"K": "v"}},
        "web": {"url": "https://mcp.example.com/mcp", "timeout_s": 5, "idempotent": True}}}))
    config = load_config(str(tmp_path / "a.json"))
    assert config.servers["files"].args == ["-m", "x"] and config.servers["web"].timeout_s == 5
    assert config.servers["web"].flag("idempotent", "anything")
    (tmp_path / "b.toml").write_text('[servers.demo]\ncommand = "python"\nargs = ["demo.py"]\n'
                                     'needs_approval = ["delete"]\n')
    config = load_config(str(tmp_path / "b.toml"))
    assert config.servers["demo"].flag("needs_approval", "delete")
    assert not config.servers["demo"].flag("needs_approval", "read")
    for bad, message in [({"servers": {"x": {"command": "a", "url": "http://h/"}}}, "exactly one"),
                         ({"servers": {"x": {}}}, "exactly one"),
                         ({"servers": {"bad.name": {"command": "a"}}}, "server name"),
                         ({"servers": {"x": {"command": "a", "shell": True}}}, "Extra inputs")]:
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(SystemExit, match=message):
            load_config(str(tmp_path / "bad.json"))
    with pytest.raises(SystemExit, match="cannot read"):
        load_config(str(tmp_path / "missing.json"))


def test_schema_checks(caplog):
    from tools import schema

    add = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
           "required": ["a", "b"], "additionalProperties": False}
    assert schema.args_problem(add, {"a": 1, "b": 2}) is None
    assert schema.args_problem(add, {"a": "x", "c": 1}) == (
        "args: 'b' is a required property; args: Additional properties are not allowed ('c' was unexpected); "
        "a: 'x' is not of type 'integer'")
    with pytest.raises(schema.BadSchema):
        schema.validator({"type": "no-such-type"})
    # a tool whose schema is broken is skipped (logged), not registered half-checked
    registry = ToolRegistry()
    bridge = McpBridge(McpConfig(servers={"x": ServerConfig(command="/no/such/server")}), registry)
    bridge._register_known(bridge.servers["x"], [
        {"name": "x.bad", "mcp": {"server": "x", "tool": "bad"}, "args_schema": {"type": "no-such-type"}},
        {"name": "x.good", "mcp": {"server": "x", "tool": "good"}, "args_schema": add}])
    assert registry.names() == ["x.good"]
    assert "mcp tool x.bad skipped: its inputSchema is not a valid JSON schema" in caplog.text
