"""The Python client's models against the OpenAPI document app.py builds
(tests/client_contract.py says what is compared); the same check runs against
a live service in tests/service/test_client.py.  Also: the check itself
notices a drift, and the SSE parser and error mapping of client/ behave."""
import pytest

from app import create_app
from client import errors, models
from client.stream import Raw, parse, typed
from monikers import default_registry
from store import Store
from tests.client_contract import disagreements


@pytest.fixture(scope="module")
def document(tmp_path_factory):
    store = Store(str(tmp_path_factory.mktemp("client_models") / "db"))
    try:
        yield create_app(store, default_registry()).test_client().get("/api/openapi.json").json
    finally:
        store.close()


def test_every_client_model_agrees_with_the_document(document):
    assert disagreements(document) == []


def test_a_drift_is_noticed(document):
    schemas = document["components"]["schemas"]
    step = schemas["Step"]
    changed = {**document, "components": {"schemas": {
        **schemas,
        "Step": {**step, "properties": {**step["properties"], "iteration": {"type": "string"},
                                        "attempt": {"type": "integer"}},
                 "required": [*step["required"], "attempt"]},
        "Action": {k: v for k, v in schemas["Action"].items() if k != "properties"} | {
            "properties": {k: v for k, v in schemas["Action"]["properties"].items() if k != "actor"}},
    }}}
    found = disagreements(changed)
    assert any(w.startswith("Step.iteration:") for w in found), found
    assert any("lacks attempt" in w for w in found), found
    assert any(w.startswith("Action.actor: not a property") for w in found), found


def test_sse_events_are_typed_and_a_live_one_has_no_cursor():
    lines = ["retry: 1000", "", "id: step:S=0", "event: agent_step",
             'data: {"id": "st", "stream": "agent_step:S", "data": {"id": "st", "agent_id": "A", "session_id": "S",'
             ' "iteration": 0, "status": "ok", "created_at": "2026-01-01T00:00:00Z", "extra": 1}}', "",
             ": keepalive", "event: step_delta",
             'data: {"id": "S", "stream": "x", "data": {"agent_id": "A", "session_id": "S", "iteration": 1}}', "",
             "event: mystery", 'data: {"id": "m", "data": {"x": 1}}', ""]
    events = [typed(raw) for raw in parse(lines)]
    assert [type(e) for e in events] == [models.StepEvent, models.StepDeltaEvent, models.Event]
    assert events[0].cursor == "step:S=0" and events[0].data.iteration == 0 and events[1].cursor is None
    assert events[0].data.as_dict()["extra"] == 1 and events[0].payload["stream"] == "agent_step:S"
    # A row that does not fit its model still arrives, untyped.
    odd = typed(Raw("agent_step", {"id": "x", "data": {"iteration": "?"}}, "c"))
    assert type(odd) is models.Event and odd.data == {"iteration": "?"}


def test_error_answers_become_exceptions_with_the_body():
    body = {"error": {"code": "not_found", "message": "no session X"}}
    error = errors.from_answer(404, body)
    assert isinstance(error, errors.NotFound) and error.code == "not_found" and error.body == body
    assert isinstance(errors.from_answer(503, None, "<html>down</html>"), errors.ServerError)
    assert errors.from_answer(502, None, "<html>").code == "http_error"
    limited = errors.from_answer(429, {"error": {"code": "slow_down", "message": "later"}}, retry_after="3")
    assert isinstance(limited, errors.RateLimited) and limited.retry_after == 3.0
    assert type(errors.from_answer(413, body)) is errors.ApiError
