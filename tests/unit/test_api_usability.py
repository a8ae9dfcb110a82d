"""The API as people use it: config checked at create, names, agents
paged and filtered with a total, the action log filtered, and an OpenAPI
document that says exactly what is accepted.  In process: app.py's Flask app on
a real store, no agents.py (actions stay queued, which is what these read)."""
import pytest
from pydantic import BaseModel, ConfigDict
from ulid import ULID

from app import create_app
from monikers import Moniker, default_registry
from store import Store


async def _noop(frame, ctx):
    return {"step": frame.step, "next_step": frame.step}


class PluginConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    depth: int = 1


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    st = Store(str(tmp_path_factory.mktemp("usability") / "db"))
    yield st
    st.close()


@pytest.fixture(scope="module")
def client(store):
    registry = default_registry()
    registry.register(Moniker("plugin_free", _noop, "a plugin declaring no config model"))
    registry.register(Moniker("plugin_typed", _noop, "a plugin with a config model", config_model=PluginConfig))
    return create_app(store, registry).test_client()


def create(client, **body):
    return client.post("/api/agents", json=body)


# ---- config checked at create ----------------------------------------------------------

@pytest.mark.parametrize("moniker,config,named", [
    ("countdown", {"intervl_s": 1}, "config.intervl_s"),            # a misspelt runner key
    ("countdown", {"n": "five"}, "config.n"),                        # wrong type of a moniker key
    ("countdown", {"n": "5"}, "config.n"),                           # a string is not a number
    ("countdown", {"n": 0}, "config.n"),                             # out of range
    ("countdown", {"fail_at": 3}, "config.fail_at"),                 # another moniker's key
    ("chaos", {"mode": "explode"}, "config.mode"),                   # not one of the modes
    ("echo", {"n": 3}, "config.n"),                                  # echo has no keys of its own
    ("countdown", {"interval_s": "x"}, "config.interval_s"),         # wrong type of a runner key
    ("countdown", {"max_steps": False}, "config.max_steps"),         # a boolean is not a number
    ("countdown", {"retries": {"transient": 1, "often": 2}}, "config.retries.often"),
    ("baml", {"llm": {"modle": "x"}}, "config.llm.modle"),           # nested keys are checked too
    ("baml", {"llm": {"api_key": "sk-1"}}, "llm.api_key is not accepted"),  # keys are never stored
    ("baml", {"llm": {"endpoint": "nowhere"}}, "no endpoint 'nowhere'"),      # only the operator's endpoints
    ("plugin_free", {"llm": {"base_url": "http://127.0.0.1:1/v1"}}, "llm.base_url is not accepted"),  # even unchecked
    ("plugin_typed", {"depth": "deep"}, "config.depth"),
    ("plugin_typed", {"width": 2}, "config.width"),
])
def test_a_bad_config_key_is_a_400_naming_it_and_enqueues_nothing(client, store, moniker, config, named):
    before = store.actions.count()
    r = create(client, moniker=moniker, config=config)
    assert r.status_code == 400, r.json
    assert named in r.json["error"]["message"], r.json
    assert store.actions.count() == before


def test_a_good_config_is_stored_normalised_with_the_moniker_keys(client, store):
    r = create(client, moniker="countdown", name="five", config={"n": 5.0, "interval_s": 0.05})
    assert r.status_code == 202, r.json
    action = store.actions.get(r.json["action_id"])
    assert action["payload"]["config"]["n"] == 5 and isinstance(action["payload"]["config"]["n"], int)
    assert action["payload"]["config"]["interval_s"] == 0.05
    assert action["payload"]["name"] == "five"
    view = client.get(f"/api/sessions/{r.json['session_id']}").json  # still queued: the pending view
    assert view["name"] == "five" and view["status"] == "pending"


def test_a_plugin_without_a_config_model_gets_its_keys_unchecked(client, store):
    r = create(client, moniker="plugin_free", config={"anything": {"goes": [1, 2]}, "interval_s": 2})
    assert r.status_code == 202, r.json
    assert store.actions.get(r.json["action_id"])["payload"]["config"]["anything"] == {"goes": [1, 2]}
    assert create(client, moniker="plugin_free", config={"interval_s": "soon"}).status_code == 400


@pytest.mark.parametrize("name", ["", " padded ", "a\nb", "x" * 201])
def test_a_bad_name_is_a_400(client, name):
    r = create(client, moniker="joke", name=name)
    assert r.status_code == 400 and "name" in r.json["error"]["message"]


def test_monikers_come_with_their_config_schemas(client):
    data = client.get("/api/monikers").json
    by_name = {m["name"]: m for m in data["monikers"]}
    assert by_name["countdown"]["config_schema"]["properties"]["n"]["type"] == "integer"
    assert by_name["countdown"]["config_schema"]["additionalProperties"] is False
    assert by_name["chaos"]["config_schema"]["properties"]["mode"]["enum"] == ["raise", "hang", "garbage",
                                                                                "transient"]
    assert "llm" in by_name["baml"]["config_schema"]["properties"]
    assert by_name["plugin_free"]["config_schema"] is None
    assert "interval_s" in data["session_config_schema"]["properties"]


# ---- agents: paging, total, filters, stable order -----------------------------------------

def seed(store, n=25):
    from datetime import datetime, timedelta, timezone
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = []
    for i in range(n):
        at = start + timedelta(seconds=i // 2)  # pairs share a created_at: the order must still be stable
        rows.append({"session_id": str(ULID()), "agent_id": f"agent-{i:02d}", "moniker": "joke" if i % 2 else "echo",
                     "name": f"Agent {i:02d}" if i % 5 else None, "task": f"task about {'owls' if i < 3 else 'cats'}",
                     "status": "error" if i % 7 == 0 else "done", "iteration": i, "created_at": at,
                     "updated_at": start + timedelta(seconds=100 - i), "config": {}})
    # an older session of agent-01 that failed: only the latest session counts
    rows.append({**rows[1], "session_id": str(ULID()), "status": "error", "created_at": start - timedelta(days=1),
                 "updated_at": start - timedelta(days=1)})
    store.writer.submit_upsert("agent_state", "session_id", rows).result()


@pytest.fixture(scope="module")
def agents(store, client):
    seed(store)
    return client.get("/api/agents", query_string={"limit": 1000, "q": "agent-"}).json


def test_agents_are_paged_with_a_total_and_a_stable_order(client, agents):
    assert agents["total"] == 25 and len(agents["agents"]) == 25
    ids = [a["agent_id"] for a in agents["agents"]]
    assert len(set(ids)) == 25
    pages = []
    for offset in range(0, 25, 10):
        page = client.get("/api/agents", query_string={"limit": 10, "offset": offset, "q": "agent-"}).json
        assert page["total"] == 25 and page["offset"] == offset
        pages += [a["agent_id"] for a in page["agents"]]
    assert pages == ids  # the pages put together are the whole list, once each, in one order
    again = client.get("/api/agents", query_string={"limit": 1000, "q": "agent-"}).json
    assert [a["agent_id"] for a in again["agents"]] == ids
    created = [(a["created_at"], a["agent_id"]) for a in agents["agents"]]
    assert created == sorted(created, reverse=True)  # newest first, ties by id


def test_agents_filters_apply_to_the_latest_session(client, agents):
    q = lambda **kw: client.get("/api/agents", query_string={"limit": 1000, "q": "agent-", **kw}).json
    failed = q(status="error")
    assert {a["agent_id"] for a in failed["agents"]} == {"agent-00", "agent-07", "agent-14", "agent-21"}
    assert failed["total"] == 4 and failed["counts"] == {"error": 4, "done": 21}
    assert {a["moniker"] for a in q(moniker="echo")["agents"]} == {"echo"}
    assert q(moniker="echo")["total"] == 13
    owls = q(q="OWLS")  # text matches name, task, ids; case-insensitive
    assert {a["agent_id"] for a in owls["agents"]} == {"agent-00", "agent-01", "agent-02"}
    by_name = [a["name"] for a in q(sort="name")["agents"]]
    named = [n for n in by_name if n]
    assert named == sorted(named, key=str.casefold) and by_name[-1] is None  # unnamed last
    updated = [a["updated_at"] for a in q(sort="updated")["agents"]]
    assert updated == sorted(updated, reverse=True)


def test_a_sub_agent_s_row_names_its_parent_also_when_the_parent_is_on_another_page(client, store):
    """The dashboard says "sub-agent of Planner", not the parent's id (issue 40):
    the row carries ``parent_name`` (null for an unnamed parent), whatever the page."""
    from datetime import datetime, timezone
    at = datetime.now(timezone.utc)
    named, unnamed = str(ULID()), str(ULID())
    rows = [{"session_id": named, "agent_id": "parent-named", "moniker": "echo", "name": "Planner Prime",
             "status": "running", "iteration": 0, "created_at": at, "updated_at": at, "config": {}},
            {"session_id": unnamed, "agent_id": "parent-unnamed", "moniker": "echo", "name": None,
             "status": "running", "iteration": 0, "created_at": at, "updated_at": at, "config": {}}]
    for i, parent in enumerate((named, unnamed)):
        rows.append({"session_id": str(ULID()), "agent_id": f"kidrow-{i}", "moniker": "echo", "name": f"kidrow {i}",
                     "status": "running", "iteration": 0, "created_at": at, "updated_at": at, "config": {},
                     "parent_session_id": parent, "parent_agent_id": "parent-named" if i == 0 else "parent-unnamed",
                     "root_session_id": parent})
    store.writer.submit_upsert("agent_state", "session_id", rows).result()
    page = client.get("/api/agents", query_string={"q": "kidrow", "limit": 10}).json  # no parent on this page
    assert {a["agent_id"]: a["parent_name"] for a in page["agents"]} == {"kidrow-0": "Planner Prime",
                                                                        "kidrow-1": None}
    parents = client.get("/api/agents", query_string={"q": "parent-", "limit": 10}).json["agents"]
    assert parents and all("parent_name" not in a for a in parents)  # a root has no parent to name


@pytest.mark.parametrize("params", [{"status": "exploded"}, {"sort": "random"}, {"limit": 0}, {"limit": 1001},
                                    {"moniker": "x' OR '1'='1"}, {"q": ""}, {"offset": -1}])
def test_agents_bad_filters_are_400(client, params):
    r = client.get("/api/agents", query_string=params)
    assert r.status_code == 400, r.json


# ---- the action log ---------------------------------------------------------------------

def test_actions_are_listed_and_filtered(client, store):
    made = create(client, moniker="joke", name="log").json
    agent, session = made["agent_id"], made["session_id"]
    ids = [client.post(f"/api/agents/{agent}/{verb}", json=body).json["action_id"]
           for verb, body in [("pause", {}), ("interrupt", {"guidance": "dogs"}), ("resume", {"budget_tokens": 99})]]
    store.actions.finish(ids[0], ok=True)
    store.actions.finish(ids[1], ok=False, error="cannot interrupt: session is stopped")
    get = lambda **kw: client.get("/api/actions", query_string=kw).json["actions"]
    mine = get(session_id=session)
    assert [a["type"] for a in mine] == ["resume", "interrupt", "pause", "create"]  # newest first
    assert [a["type"] for a in get(session_id=session, order="oldest")] == ["create", "pause", "interrupt", "resume"]
    assert [a["id"] for a in get(agent_id=agent, type="pause")] == [ids[0]]
    failed = get(session_id=session, status="failed")
    assert [a["id"] for a in failed] == [ids[1]] and "stopped" in failed[0]["error"]
    assert [a["type"] for a in get(session_id=session, status="pending")] == ["resume", "create"]
    assert get(session_id=session, type="resume")[0]["payload"] == {"budget_tokens": 99}
    assert len(get(session_id=session, limit=2)) == 2 and len(get(session_id=session, limit=2, offset=3)) == 1
    for bad in [{"type": "explode"}, {"status": "lost"}, {"session_id": "a'b"}, {"order": "sideways"}]:
        assert client.get("/api/actions", query_string=bad).status_code == 400, bad


def test_resume_checks_the_budget_it_raises(client):
    made = create(client, moniker="joke").json
    for bad in [{"budget_tokens": 0}, {"budget_tokens": "lots"}, {"budget_cost": -1}, {"budget": 5}]:
        r = client.post(f"/api/agents/{made['agent_id']}/resume", json=bad)
        assert r.status_code == 400, (bad, r.json)


# ---- the document states what the API does -------------------------------------------------

def test_405_says_which_methods_are_allowed(client):
    for method, path in [("TRACE", "/api/actions/x"), ("DELETE", "/api/agents"), ("PUT", "/api/monikers")]:
        r = client.open(path, method=method)
        assert r.status_code == 405 and r.headers.get("Allow"), (method, path)
        assert r.json["error"]["code"] == "method_not_allowed"
    assert set(client.open("/api/agents", method="DELETE").headers["Allow"].replace(" ", "").split(",")) >= {
        "GET", "POST"}


def test_iterations_the_api_accepts_but_no_step_can_have_are_empty_pages_and_404s(client, store):
    """Up to 2**62 is a valid iteration in a request; far past any real one (the
    fuzz test once made the fork a 500 with 301165683434333888)."""
    from datetime import datetime, timezone

    store.states.save({"session_id": "huge-s", "agent_id": "huge-a", "moniker": "joke", "status": "running",
                       "iteration": 1, "created_at": datetime.now(timezone.utc)})
    store.steps.append({"agent_id": "huge-a", "session_id": "huge-s", "iteration": 0, "status": "ok"})
    huge = 301165683434333888
    for query in ({"min_iteration": huge}, {"min_iteration": 2 ** 62, "order": "desc"}):
        r = client.get("/api/agent-steps", query_string={"session_id": "huge-s", **query})
        assert r.status_code == 200 and r.json["steps"] == [], (query, r.json)
    assert [s["iteration"] for s in client.get("/api/agent-steps?session_id=huge-s&max_iteration=%d" % huge)
            .json["steps"]] == [0]
    r = client.post("/api/sessions/huge-s/fork", json={"from_iteration": huge})
    assert r.status_code == 404 and r.json["error"]["code"] == "not_found", r.json


def test_the_pages_tell_the_browser_to_load_and_run_only_the_apps_own_files(client):
    """The dashboard and the API reference carry a Content-Security-Policy that
    allows no other host and no inline script or style; the browser tests check
    that nothing on the pages breaks it."""
    for path in ("/", "/api/docs", "/assets/js/main.js", "/assets/api_docs.css"):
        r = client.get(path)
        assert r.status_code == 200, path
        directives = dict(d.strip().split(" ", 1) for d in r.headers["Content-Security-Policy"].split(";"))
        assert directives["default-src"] == "'self'" and directives["style-src"] == "'self'", path
        assert "script-src" not in directives and "unsafe" not in r.headers["Content-Security-Policy"], path
        assert directives["frame-ancestors"] == "'none'" and directives["object-src"] == "'none'", path
        assert r.headers["X-Content-Type-Options"] == "nosniff", path
    assert b"<style" not in client.get("/api/docs").data and b"<style" not in client.get("/").data


def test_a_browser_asking_for_the_favicon_gets_no_content_rather_than_an_error(client):
    """Chromium asks for /favicon.ico when it opens /metrics or a JSON endpoint."""
    r = client.get("/favicon.ico")
    assert r.status_code == 204 and r.data == b""
    assert r.headers["Content-Security-Policy"].startswith("default-src 'self'")


def test_openapi_states_required_bodies_shapes_and_statuses(client):
    doc = client.get("/api/openapi.json").json
    paths, schemas = doc["paths"], doc["components"]["schemas"]
    assert paths["/api/agents/{agent_id}/interrupt"]["post"]["requestBody"]["required"] is True
    assert paths["/api/agents/{agent_id}/pause"]["post"]["requestBody"]["required"] is False
    assert paths["/api/conversations/{conversation_id}/messages"]["post"]["requestBody"]["required"] is True
    variants = {ref["$ref"].rsplit("/", 1)[1] for ref in schemas["CreateAgentRequest"]["oneOf"]}
    assert {"CreateAgentRequest_countdown", "CreateAgentRequest_plugin_free"} <= variants
    countdown = schemas["CreateAgentRequest_countdown"]["properties"]
    assert countdown["moniker"]["const"] == "countdown"
    assert countdown["config"]["additionalProperties"] is False and "n" in countdown["config"]["properties"]
    assert "interval_s" in countdown["config"]["properties"]
    assert "oneOf" in schemas["JoinRequest"]
    assert "409" in paths["/api/conversations/{conversation_id}/participants"]["post"]["responses"]
    assert "/api/actions" in paths and "status" in {p["name"] for p in paths["/api/actions"]["get"]["parameters"]}
    agent_params = {p["name"]: p for p in paths["/api/agents"]["get"]["parameters"]}
    assert {"status", "moniker", "q", "sort", "limit", "offset"} <= set(agent_params)
    assert paths["/api/agents"]["post"]["responses"]["202"]["links"]["GetSession"]["operationId"] == "getSession"
