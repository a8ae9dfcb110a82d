"""The ``search_history`` tool, called directly over a store (as
tools/catalog.py builds it): scopes, the permission for ``all``, summaries
first, hits from another finished session of the same agent."""
import asyncio

import pytest

from store import Store
from tools.tool_registry import ToolContext
from tools.catalog import history_search
from tools.search_history import NAME, ScopeNotAllowed, SearchHistoryArgs, build


def step(store, agent, session, iteration, text):
    store.steps.append({"agent_id": agent, "session_id": session, "iteration": iteration, "status": "ok",
                        "text": text, "step_token": str(iteration), "next_step_token": str(iteration + 1)})


@pytest.fixture
def store(tmp_path):
    store = Store(str(tmp_path / "db"))
    step(store, "ann", "old-1", 0, "looked up the walrus census for the north shore")
    step(store, "ann", "old-1", 1, "the walrus count was 41")
    store.summaries.save({"kind": "session", "agent_id": "ann", "session_id": "old-1", "method": "extractive",
                          "status": "done", "text": "Counted walrus on the north shore: 41."})
    step(store, "ann", "now-2", 0, "starting a new census, walrus again")
    step(store, "bob", "bob-1", 0, "bob also saw a walrus")
    yield store
    store.close()


def call(tool, ctx, **args):
    return asyncio.run(tool.run(SearchHistoryArgs(**args), ctx))


def test_scopes_permission_and_summaries_first(store):
    tool = build(history_search(store))
    assert tool.name == NAME and tool.idempotent and "query" in tool.schema()["properties"]
    ctx = ToolContext(tool_call_id="tc1", agent_id="ann", session_id="now-2", iteration=3, config={})

    found = call(tool, ctx, query="walrus")  # scope agent: ann's sessions, the finished one included
    assert found["scope"] == "agent"
    assert found["hits"][0]["kind"] == "summary" and found["hits"][0]["session_id"] == "old-1"
    assert "41" in found["hits"][0]["text"]
    sessions = {h["session_id"] for h in found["hits"]}
    assert sessions == {"old-1", "now-2"}  # never bob's
    assert [h["kind"] for h in found["hits"]].count("summary") == 1

    assert {h["session_id"] for h in call(tool, ctx, query="walrus", scope="session")["hits"]} == {"now-2"}
    with pytest.raises(ScopeNotAllowed):
        call(tool, ctx, query="walrus", scope="all")
    allowed = ToolContext(tool_call_id="tc2", agent_id="ann", session_id="now-2", iteration=3,
                          config={"search_history": {"allow_all": True}})
    assert "bob-1" in {h["session_id"] for h in call(tool, allowed, query="walrus", scope="all")["hits"]}
    assert call(tool, ctx, query="\"' OR 1=1 --")["hits"] == []
    with pytest.raises(ValueError):
        SearchHistoryArgs(query="x", scope="everything")
