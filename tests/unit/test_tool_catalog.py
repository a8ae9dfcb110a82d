"""The tool catalog (tools/catalog.py, store/tool_catalog.py): what agents.py
records and how app.py merges it for GET /api/tools."""
import pytest

from store import Store
from tools import catalog
from tools.http_fetch import FetchPolicy
from tools.tool_registry import Tool, ToolRegistry


async def _noop(args, ctx):
    return None


def tool(name: str, description: str = "", **flags) -> Tool:
    return Tool(name=name, description=description, run=_noop, args_schema={"type": "object"}, **flags)


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def test_workers_catalogs_merge_over_the_local_registry(store):
    local = ToolRegistry()
    local.register(tool("http_fetch", "local description"))
    local.register(tool("only.local"))
    w1 = ToolRegistry()
    w1.register(tool("http_fetch", "worker one's"))
    w1.register(tool("demo.add", "Add.", needs_approval=True))
    catalog.publish(store, "w1", w1).result()
    w2 = ToolRegistry()
    w2.register(tool("demo.add", "Add, newer."))
    catalog.publish(store, "w2", w2).result()

    listed = {t["name"]: t for t in catalog.list_tools(store, local)}
    assert sorted(listed) == ["demo.add", "http_fetch", "only.local"]
    assert listed["demo.add"]["description"] == "Add, newer."  # the newest catalog wins
    assert listed["demo.add"]["workers"] == ["w1", "w2"]
    assert listed["http_fetch"]["description"] == "worker one's"  # a worker's view wins over app.py's
    assert listed["only.local"]["workers"] == []
    assert listed["demo.add"]["source"] == "installed" and "mcp" not in listed["demo.add"]

    # a worker's catalog is replaced whole: a dropped tool disappears
    catalog.publish(store, "w1", ToolRegistry()).result()
    catalog.publish(store, "w2", ToolRegistry()).result()
    assert [t["name"] for t in catalog.list_tools(store, local)] == ["http_fetch", "only.local"]
    assert len(store.tool_catalog.all()) == 2  # one row per worker, upserted


def test_mcp_entries_carry_their_server_status(store):
    class Bridge:
        def describe(self, name):
            return {"server": "demo", "tool": "add", "status": "unavailable", "error": "cannot start: boom"} \
                if name == "demo.add" else None
    registry = ToolRegistry()
    registry.register(tool("demo.add"))
    registry.register(tool("other"))
    catalog.publish(store, "w1", registry, Bridge()).result()
    listed = {t["name"]: t for t in catalog.list_tools(store)}
    assert listed["demo.add"]["source"] == "mcp"
    assert listed["demo.add"]["mcp"]["error"] == "cannot start: boom"
    assert listed["other"]["source"] == "installed"


def test_installed_registry_has_http_fetch_with_the_operators_policy():
    registry = catalog.installed_registry(FetchPolicy(allow=("example.org",)))
    assert "example.org" in registry.get("http_fetch").description


def test_app_py_alone_lists_the_store_bound_built_ins_and_accepts_a_profile_naming_them(store, caplog):
    """CI's app.py log said ``profile orchestrator refused: no tool 'spawn_agent'
    is installed`` at every start: app.py checked profiles against a registry
    without the built-ins agents.py binds to the store, so until a worker had
    published its catalog the shipped orchestrator profile was refused."""
    import app
    import settings

    with caplog.at_level("INFO", logger="profiles"):
        flask_app = app.create_app(store, profiles_dir=settings.DEFAULT_PROFILES_DIR)
    assert store.tool_catalog.all() == []  # no worker has published anything
    client = flask_app.test_client()
    names = {t["name"] for t in client.get("/api/tools").get_json()["tools"]}
    assert {"spawn_agent", "message_agent", "search_history", "http_fetch"} <= names
    profiles = {p["name"]: p for p in client.get("/api/profiles").get_json()["profiles"]}
    assert profiles["orchestrator"]["ok"], profiles["orchestrator"]["errors"]
    assert not [r for r in caplog.records if r.levelname == "ERROR"], [r.getMessage() for r in caplog.records]
