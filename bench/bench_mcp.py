"""What an MCP tool costs through the bridge (tools/mcp.py), next to the same
round trip made directly with the SDK's client, in one run.

    python bench/bench_mcp.py [--calls 200]

Against tests/mcp_demo_server.py over stdio: the time to start the server and
list its tools (the bridge's start), then ``add`` called ``--calls`` times one
after another (a) directly on an SDK ``Client`` and (b) through the tool
registry (schema check, connection check, result conversion), interleaved so
drift hits both alike; then 8 concurrent calls at a time through the bridge.
Prints one JSON object; the ratio (b)/(a) is the figure to compare across runs.
"""
import argparse
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import emit, machine, progress, summary  # noqa: E402
from tools.mcp import McpBridge, McpConfig, ServerConfig  # noqa: E402
from tools.tool_registry import ToolContext, ToolRegistry  # noqa: E402

DEMO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "mcp_demo_server.py")
CTX = ToolContext(tool_call_id="b", agent_id="b", session_id="b", iteration=0)


async def measure(calls: int) -> dict:
    from mcp import Client, StdioServerParameters

    registry = ToolRegistry()
    bridge = McpBridge(McpConfig(servers={"demo": ServerConfig(command=sys.executable, args=[DEMO])}), registry)
    started = time.perf_counter()
    await bridge.start()
    start_ms = (time.perf_counter() - started) * 1000
    add = registry.get("demo.add")
    direct, bridged = [], []
    async with Client(StdioServerParameters(command=sys.executable, args=[DEMO])) as client:
        await client.list_tools()
        for i in range(calls):
            t0 = time.perf_counter()
            await client.call_tool("add", {"a": i, "b": 1})
            t1 = time.perf_counter()
            await add.run({"a": i, "b": 1}, CTX)
            t2 = time.perf_counter()
            direct.append((t1 - t0) * 1000)
            bridged.append((t2 - t1) * 1000)
    progress(f"{calls} sequential calls done")
    t0 = time.perf_counter()
    for start in range(0, calls, 8):
        await asyncio.gather(*(add.run({"a": i, "b": 1}, CTX) for i in range(start, min(calls, start + 8))))
    concurrent_s = time.perf_counter() - t0
    await bridge.close()
    d, b = summary(direct), summary(bridged)
    return {"bridge_start_ms": round(start_ms, 1), "direct_sdk": d, "through_registry": b,
            "ratio_p50": round(b["p50_ms"] / d["p50_ms"], 2) if d["p50_ms"] else None,
            "concurrent_8_calls_per_s": round(calls / concurrent_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    emit({"machine": machine(), **asyncio.run(measure(args.calls))})


if __name__ == "__main__":
    main()
