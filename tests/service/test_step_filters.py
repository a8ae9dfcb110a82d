"""The timeline's step filters over HTTP (``GET /api/agent-steps?only=...&attempt_outcome=...``),
through the real service: a ``scripted`` session takes a tool-call step, a
step whose model call timed out once, a step handed a person's guidance (sent
while it waited), and a step that fails; each filter answers exactly its
iterations, in either order, paged, with how many match; a value outside the
documented set is a 400."""
import pytest

from tests.harness import wait_for

FRAMES = [
    {"text": "adding", "tool_calls": [{"name": "add", "args": {"numbers": [1, 2]}}]},
    {"text": "thinking", "usage": {"input_tokens": 5, "output_tokens": 5,
                                   "attempts": [{"n": 1, "outcome": "timeout"}, {"n": 2, "outcome": "ok"}]}},
    {"text": "as you say", "usage": {"input_tokens": 5, "output_tokens": 5, "attempts": [{"n": 1, "outcome": "ok"}]},
     "tool_calls": [{"name": "add", "args": {"numbers": [3]}}]},
    {"tool_calls": "not a list"},  # not a frame: the step fails
]


@pytest.fixture(scope="module")
def session(shared_service):
    svc = shared_service
    created = svc.create("scripted", config={"interval_s": 0, "when_idle": "wait", "tools": ["add"],
                                             "frames": FRAMES})
    sid = created["session_id"]
    svc.wait_status(sid, "waiting", timeout=120)  # after step 1: its turn ended
    wait_for(lambda: len(svc.steps(sid)) == 2, timeout=60, what="steps 0 and 1")
    assert svc.control(created["agent_id"], "interrupt", session_id=sid, guidance="go on")["status"] == "done"
    svc.wait_status(sid, "error", timeout=120)
    steps = svc.steps(sid)
    assert [s["status"] for s in steps] == ["ok", "ok", "ok", "error"], steps
    assert [g["text"] for g in steps[2]["guidance"]] == ["go on"]  # kind left out: "guidance" (runtime/base/inbox.py)
    return svc, sid


def filtered(svc, sid, **params) -> dict:
    r = svc.get("/api/agent-steps", session_id=sid, **params)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("params,iterations", [
    ({"only": "errors"}, [3]),
    ({"only": "tool_calls"}, [0, 2]),
    ({"only": "guided"}, [2]),
    ({"only": "interrupted"}, []),
    ({"attempt_outcome": "timeout"}, [1]),
    ({"attempt_outcome": "ok"}, [1, 2]),
    ({"attempt_outcome": "429"}, []),
    ({"only": "tool_calls", "attempt_outcome": "ok"}, [2]),
])
def test_each_filter_answers_exactly_its_steps(session, params, iterations):
    svc, sid = session
    page = filtered(svc, sid, **params)
    assert [s["iteration"] for s in page["steps"]] == iterations
    assert page["matched"] == len(iterations)
    newest_first = filtered(svc, sid, order="desc", **params)
    assert [s["iteration"] for s in newest_first["steps"]] == iterations[::-1]


def test_filtered_pages(session):
    svc, sid = session
    first = filtered(svc, sid, only="tool_calls", order="desc", limit=1)
    second = filtered(svc, sid, only="tool_calls", order="desc", limit=1, offset=1)
    assert [s["iteration"] for s in first["steps"] + second["steps"]] == [2, 0]
    assert first["matched"] == second["matched"] == 2
    assert filtered(svc, sid, attempt_outcome="ok", limit=1, offset=1)["steps"][0]["iteration"] == 2
    assert "matched" not in filtered(svc, sid) or filtered(svc, sid)["matched"] is None  # unfiltered: as before


@pytest.mark.parametrize("params", [{"only": "bogus"}, {"only": "error"}, {"attempt_outcome": "slow"},
                                    {"attempt_outcome": "%"}, {"attempt_outcome": "x' OR 1=1 --"}])
def test_values_outside_the_documented_sets_are_refused(session, params):
    svc, sid = session
    r = svc.get("/api/agent-steps", session_id=sid, **params)
    assert r.status_code == 400, r.text


def test_the_parameters_are_documented(shared_service):
    doc = shared_service.get("/api/openapi.json").json()
    params = {p["name"]: p for p in doc["paths"]["/api/agent-steps"]["get"]["parameters"]}
    only = params["only"]["schema"]
    words = set(only.get("enum") or [w for alt in only.get("anyOf", []) for w in alt.get("enum", [])])
    assert words == {"errors", "tool_calls", "interrupted", "guided"}
    outcome = params["attempt_outcome"]["schema"]
    words = set(outcome.get("enum") or [w for alt in outcome.get("anyOf", []) for w in alt.get("enum", [])])
    assert {"ok", "timeout", "5xx", "429", "unparseable", "cancelled", "unreachable", "error"} <= words
