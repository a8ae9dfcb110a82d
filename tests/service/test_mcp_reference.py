"""The official reference MCP servers ``mcp-server-time`` and ``mcp-server-git``
(PyPI, installed into .venv-mcp by scripts/test_deps/mcp_reference.sh) as the
operator configures them with ``--mcp-config``: first through McpBridge and the
tool registry (as test_mcp_tools.py does with the home-made demo server), then
through the real service (agents.py and app.py as subprocesses), where a
``scripted`` session calls them and what is persisted is read over HTTP.

The git server is confined (``--repository``) to a small repository made here
with two commits; the time server's local timezone is fixed to UTC.
"""
import asyncio
import json
import re
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from tests import mcp_reference
from tests.harness import Service, wait_for
from tools.mcp import McpBridge, McpConfig, ToolFailed
from tools.tool_registry import ToolContext, ToolRegistry

CTX = ToolContext(tool_call_id="t1", agent_id="a1", session_id="s1", iteration=0)
GIT_TOOLS = {"git_status", "git_diff_unstaged", "git_diff_staged", "git_diff", "git_commit", "git_add", "git_reset",
             "git_log", "git_create_branch", "git_checkout", "git_show", "git_branch"}
BAD_TZ = "Mars/Olympus_Mons"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """The git server's repository and its commits' shas, oldest first."""
    path = tmp_path_factory.mktemp("reference") / "repo"
    return path, mcp_reference.git_repo(path)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def call(registry: ToolRegistry, name: str, args: dict):
    return await registry.get(name).run(args, CTX)


def near_now(text: str, tolerance_s: float = 600) -> bool:
    return abs(datetime.fromisoformat(text) - datetime.now(timezone.utc)) < timedelta(seconds=tolerance_s)


def with_bridge(repo_path, scenario):
    """Run ``scenario(registry, bridge)`` with both reference servers connected;
    afterwards neither server process is left running."""
    mark = uuid.uuid4().hex

    async def main():
        registry = ToolRegistry()
        bridge = McpBridge(McpConfig(servers=mcp_reference.servers(repo_path, mark)), registry)
        await bridge.start()
        try:
            assert {s.status for s in bridge.servers.values()} == {"connected"}, \
                {n: s.error for n, s in bridge.servers.items()}
            assert len(mcp_reference.running(mark)) == 2  # one process per server (what must end with close)
            return await scenario(registry, bridge)
        finally:
            await bridge.close()
    try:
        return run(main())
    finally:
        wait_for(lambda: not mcp_reference.running(mark), timeout=90, what="the reference servers to exit")


# ---- through the bridge and the registry ----------------------------------

def test_their_tools_are_listed_with_their_schemas(repo):
    async def scenario(registry, bridge):
        names = set(registry.names())
        assert {n for n in names if n.startswith("time.")} == {"time.get_current_time", "time.convert_time"}
        assert {n for n in names if n.startswith("git.")} == {f"git.{t}" for t in GIT_TOOLS}
        now = registry.get("time.get_current_time")
        assert now.description == "Get current time in a specific timezone"
        assert now.args_schema["required"] == ["timezone"]
        assert now.args_schema["properties"]["timezone"]["type"] == "string"
        assert "Use 'UTC' as local timezone" in now.args_schema["properties"]["timezone"]["description"]
        assert registry.get("time.convert_time").args_schema["required"] == [
            "source_timezone", "time", "target_timezone"]
        log = registry.get("git.git_log")
        assert log.description == "Shows the commit logs"
        assert log.args_schema["required"] == ["repo_path"]
        assert log.args_schema["properties"]["max_count"] == {"default": 10, "title": "Max Count", "type": "integer"}
        assert registry.get("git.git_add").args_schema["properties"]["files"]["minItems"] == 1
        assert bridge.describe("git.git_status") == {"server": "git", "tool": "git_status", "status": "connected",
                                                     "error": None}
    with_bridge(repo[0], scenario)


def test_time_calls_answer_and_a_bad_timezone_fails_with_the_servers_reason(repo):
    async def scenario(registry, bridge):
        now = await call(registry, "time.get_current_time", {"timezone": "UTC"})
        assert set(now) == {"timezone", "datetime", "day_of_week", "is_dst"}  # the structured content
        assert now["timezone"] == "UTC" and now["is_dst"] is False and near_now(now["datetime"])
        assert now["day_of_week"] == datetime.fromisoformat(now["datetime"]).strftime("%A")
        converted = await call(registry, "time.convert_time",
                               {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})
        assert converted["source"]["datetime"].endswith("T12:00:00+00:00")
        assert converted["target"]["datetime"].endswith("T21:00:00+09:00")  # Japan keeps no summer time
        assert converted["time_difference"] == "+9.0h"
        # the server's own refusals reach the model as the call's error
        with pytest.raises(ToolFailed, match=rf"Invalid timezone: 'No time zone found with key {BAD_TZ}'"):
            await call(registry, "time.get_current_time", {"timezone": BAD_TZ})
        with pytest.raises(ToolFailed, match=r"Invalid time format. Expected HH:MM \[24-hour format\]"):
            await call(registry, "time.convert_time",
                       {"source_timezone": "UTC", "time": "25:99", "target_timezone": "Asia/Tokyo"})
        with pytest.raises(ToolFailed, match="Missing required argument: timezone"):
            await call(registry, "time.get_current_time", {"timezone": ""})
        # args that break the tool's inputSchema are refused before the server sees them
        with pytest.raises(ToolFailed, match=r"invalid args for time.get_current_time: .*'timezone' is a required"):
            await call(registry, "time.get_current_time", {})
        with pytest.raises(ToolFailed, match=r"timezone: 5 is not of type 'string'"):
            await call(registry, "time.get_current_time", {"timezone": 5})
        # a tool the server does not have is its protocol error (-32602), reported as a refusal
        with pytest.raises(ToolFailed, match=r"MCP server 'time' refused the call: Unknown tool: no_such_tool"):
            await bridge.servers["time"].call("no_such_tool", {})
        # and the connection is still good afterwards
        assert (await call(registry, "time.get_current_time", {"timezone": "Europe/Paris"}))["timezone"] == \
            "Europe/Paris"
        assert bridge.describe("time.get_current_time")["status"] == "connected"
    with_bridge(repo[0], scenario)


def test_git_calls_read_the_repository_and_bad_args_fail_with_the_servers_reason(repo):
    path, (first, second) = repo

    async def scenario(registry, bridge):
        status = await call(registry, "git.git_status", {"repo_path": str(path)})
        assert status.startswith("Repository status:\nOn branch main") and "working tree clean" in status
        log = await call(registry, "git.git_log", {"repo_path": str(path), "max_count": 5})
        assert log.startswith("Commit history:")
        assert [m for m in re.findall(r"Commit: ([0-9a-f]{40})", log)] == [second, first]  # newest first
        assert "Message: second: the notes" in log and "Author: Test Author" in log
        assert re.findall(r"Commit: ([0-9a-f]{40})", await call(
            registry, "git.git_log", {"repo_path": str(path), "max_count": 1})) == [second]
        shown = await call(registry, "git.git_show", {"repo_path": str(path), "revision": first})
        assert shown.startswith(f"commit {first}") and "+first: a README" in shown
        # the server's refusals: a path outside --repository, a revision that does not exist
        with pytest.raises(ToolFailed, match=rf"Repository path '{re.escape(str(path.parent))}' is outside "
                                             rf"the allowed repository '{re.escape(str(path))}'"):
            await call(registry, "git.git_log", {"repo_path": str(path.parent)})
        with pytest.raises(ToolFailed, match=r"Ref 'no-such-rev' did not resolve to an object"):
            await call(registry, "git.git_show", {"repo_path": str(path), "revision": "no-such-rev"})
        with pytest.raises(ToolFailed, match=r"Invalid revision: '--all' - cannot start with '-'"):
            await call(registry, "git.git_show", {"repo_path": str(path), "revision": "--all"})
        with pytest.raises(ToolFailed, match=r"invalid args for git.git_log: max_count: 'ten' is not of type"):
            await call(registry, "git.git_log", {"repo_path": str(path), "max_count": "ten"})
        assert bridge.describe("git.git_log")["status"] == "connected"
    with_bridge(path, scenario)


# ---- through the service: agents.py runs them, app.py lists them ----------

@pytest.fixture(scope="module")
def service(tmp_path_factory, repo):
    root = tmp_path_factory.mktemp("reference-svc")
    (root / "logs").mkdir()
    mark = uuid.uuid4().hex
    config = mcp_reference.write_config(root / "mcp.json", repo[0], mark)
    svc = Service(str(root / "data"), str(root / "logs"), agents_args=["--mcp-config", str(config)])
    try:
        svc.start()
        wait_for(lambda: {"time.get_current_time", "git.git_log"} <= {t["name"] for t in tools(svc)},
                 timeout=90, what="the reference servers' tools in GET /api/tools")
        assert len(mcp_reference.running(mark)) == 2  # agents.py runs one process per server
        yield svc
    finally:
        svc.stop()
    wait_for(lambda: not mcp_reference.running(mark), timeout=90, what="the reference servers to exit with agents.py")


def tools(svc) -> list[dict]:
    return svc.get("/api/tools").json()["tools"]


def test_the_service_lists_their_tools(service):
    listed = {t["name"]: t for t in tools(service)}
    assert {"time.get_current_time", "time.convert_time"} | {f"git.{t}" for t in GIT_TOOLS} <= set(listed)
    now = listed["time.get_current_time"]
    assert now["source"] == "mcp" and now["description"] == "Get current time in a specific timezone"
    assert now["mcp"] == {"server": "time", "tool": "get_current_time", "status": "connected", "error": None}
    assert now["args_schema"]["required"] == ["timezone"] and len(now["workers"]) == 1
    log = listed["git.git_log"]
    assert log["source"] == "mcp" and log["mcp"]["status"] == "connected"
    assert log["args_schema"]["required"] == ["repo_path"]


def test_a_session_calls_them_and_what_is_persisted(service, repo):
    path, (first, second) = repo
    created = service.create("scripted", config={
        "tools": ["time.get_current_time", "git.git_log"], "interval_s": 0, "frames": [
            {"text": "asking", "tool_calls": [
                {"name": "time.get_current_time", "args": {"timezone": "UTC"}},
                {"name": "git.git_log", "args": {"repo_path": str(path), "max_count": 5}},
                {"name": "time.get_current_time", "args": {"timezone": BAD_TZ}}]},
            {"text": "done", "done": True}]})
    sid = created["session_id"]
    snap = wait_for(lambda: (s := service.session(sid))["status"] in ("done", "error", "stopped") and s,
                    timeout=90, what="the session to finish")
    assert snap["status"] == "done", snap
    calls = sorted(service.get("/api/tool-calls", session_id=sid).json()["tool_calls"], key=lambda c: c["seq"])
    assert [(c["name"], c["status"]) for c in calls] == [
        ("time.get_current_time", "success"), ("git.git_log", "success"), ("time.get_current_time", "failed")]
    now, log, bad = calls
    assert now["args"] == {"timezone": "UTC"} and now["result"]["timezone"] == "UTC"
    assert near_now(now["result"]["datetime"]) and now["error"] is None
    assert re.findall(r"Commit: ([0-9a-f]{40})", log["result"]) == [second, first]
    assert bad["result"] is None and f"Invalid timezone: 'No time zone found with key {BAD_TZ}'" in bad["error"]
    # the next step was given the three outcomes
    results = service.steps(sid)[1]["inputs"]["tool_results"]
    assert [(r["name"], r["status"]) for r in results] == [(c["name"], c["status"]) for c in calls]
    assert json.dumps(results[0]["result"], sort_keys=True) == json.dumps(now["result"], sort_keys=True)
