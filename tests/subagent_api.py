"""Sub-agent sessions through the real service, for tests: a ``scripted``
parent that spawns, the spawn calls it made, and frames of plain work."""
from tests.harness import wait_for


def parent(svc, frames, **config) -> dict:
    # "human": the tool its sub-agents (tests/service/test_subagents.py child_spec) use, which a child may
    # only have when its parent does (domain/session_config.within_parent)
    config = {"interval_s": 0, "tools": ["spawn_agent", "message_agent", "wait", "human"], "frames": frames, **config}
    return svc.create("scripted", task="delegate", config=config)


def tool_rows(svc, session_id) -> list[dict]:
    return svc.get("/api/tool-calls", session_id=session_id, limit=1000).json()["tool_calls"]


def spawned_ids(svc, session_id, n=1) -> list[str]:
    """The session ids of the sub-agents a session's spawn calls started (call order)."""
    rows = wait_for(lambda: (rows := [r for r in tool_rows(svc, session_id) if r["name"] == "spawn_agent"
                                      and r["status"] in ("success", "waiting_result")]) and len(rows) >= n and rows,
                    what=f"{n} spawn calls of {session_id}")
    return [r["result"]["session_id"] for r in sorted(rows, key=lambda r: (r["iteration"], r["seq"]))]


def working(n, **extra):
    return [{"text": f"working {i}", **extra} for i in range(n)]
