"""Search and the archive against the real service: unique words from a step,
a message and a summary are found right after they are written; filters
narrow; hostile queries get a 4xx or an empty answer and change nothing;
finished sessions get summaries (by the session's LLM through the fake
server, extractive otherwise); quiet conversations get one; retention keeps
summaries when told to."""
import json

import pytest

from tests.fake_openai import FakeOpenAI, Reply
from tests.harness import Service, wait_for


def warm_up(service: Service) -> None:
    """Wait until agents.py runs sessions: on a loaded machine it can take longer
    to start than an action's default wait."""
    made = service.create("countdown", "warm up", config={"interval_s": 0, "n": 1})
    service.wait_status(made["session_id"], "done", timeout=120)

ARCHIVE_ARGS = ["--archive-quiet", "2", "--archive-every", "0.5"]


def frame(step, next_step, state, *, done=False, text=None) -> str:
    return json.dumps({"step": step, "next_step": next_step, "state": state, "text": text, "data": None,
                       "done": done, "notes": None})


def llm(request):
    """Steps of a baml session, and the archive's summary request."""
    if "archive entry" in request.prompt:
        return Reply(json.dumps({"summary": "The agent planned a voyage to Quokkaland and finished it.",
                                 "key_points": ["destination Quokkaland", "two steps"]}))
    if "This is step 0." in request.prompt:
        return Reply(frame("0", "1", {"n": 1}, text="packing the bags"))
    return Reply(frame("1", "2", {"n": 2}, text="arrived", done=True))


@pytest.fixture(scope="module")
def fake():
    with FakeOpenAI(llm) as server:
        yield server


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    root = tmp_path_factory.mktemp("record")
    (root / "logs").mkdir()
    service = Service(str(root / "data"), str(root / "logs"), agents_args=ARCHIVE_ARGS).start()
    warm_up(service)
    yield service
    service.stop()


def search(svc, q, **params) -> dict:
    r = svc.get("/api/search", q=q, **params)
    assert r.status_code == 200, r.text
    return r.json()


def ids(result) -> set:
    return {(h["kind"], h["id"]) for h in result["hits"]}


def new_conversation(svc) -> str:
    r = svc.post("/api/conversations", json={"title": "search test"})
    assert r.status_code == 201, r.text
    return r.json()["conversation_id"]


def test_search_finds_steps_messages_and_summaries_and_filters_narrow(svc):
    made = svc.create("echo", "repeat after me", config={"interval_s": 0.2})
    svc.control(made["agent_id"], "interrupt", guidance="the xylographer carved a quixotic woodcut")
    step = wait_for(lambda: next((s for s in svc.steps(made["session_id"]) if "xylographer" in (s["text"] or "")),
                                 None), what="the guided step")
    svc.control(made["agent_id"], "destroy")

    found = search(svc, "xylographer")  # no maintenance in between: the unindexed row is scanned
    assert found["mode"] == "fts" and found["semantic"] == "not configured"
    hit = next(h for h in found["hits"] if h["kind"] == "step")
    assert (hit["id"], hit["session_id"], hit["agent_id"], hit["iteration"]) == (
        step["id"], made["session_id"], made["agent_id"], step["iteration"])
    assert hit["link"] == f"#/session/{made['session_id']}?iteration={step['iteration']}"
    start, end = hit["highlights"][0]
    assert hit["snippet"][start:end].lower() == "xylographer"

    cid = new_conversation(svc)
    r = svc.post(f"/api/conversations/{cid}/messages", json={"text": "Who ordered the marmalade zeppelin?"})
    message = r.json()["message"]
    found = search(svc, "zeppelin marmalade")
    assert ("message", message["message_id"]) in ids(found)
    assert next(h for h in found["hits"] if h["kind"] == "message")["link"] == (
        f"#/conversation/{cid}?message={message['message_id']}")

    counted = svc.create("countdown", "count the pelicans on the pier", config={"interval_s": 0, "n": 3})
    svc.wait_status(counted["session_id"], "done")
    summary = wait_for(lambda: svc.get("/api/summaries", session_id=counted["session_id"]).json()["summaries"],
                       what="the session's summary")[0]
    assert summary["method"] == "extractive" and summary["kind"] == "session"
    assert "pelicans" in summary["text"] and "liftoff" in summary["text"] and summary["data"]["steps"] == 3
    found = search(svc, "pelicans", kind="summary")
    assert [h["kind"] for h in found["hits"]] == ["summary"] and found["hits"][0]["session_id"] == counted["session_id"]

    # filters narrow
    in_session = search(svc, "xylographer", session_id=made["session_id"])["hits"]
    assert ("step", step["id"]) in ids({"hits": in_session})  # (its summary may quote it too, once destroyed)
    assert {h["session_id"] for h in in_session} == {made["session_id"]}
    assert search(svc, "xylographer", session_id=counted["session_id"])["hits"] == []
    assert search(svc, "xylographer", agent_id="someone-else")["hits"] == []
    assert search(svc, "xylographer", kind="message")["hits"] == []
    assert search(svc, "xylographer", status="ok", kind="step")["hits"]
    assert search(svc, "xylographer", status="error")["hits"] == []
    assert search(svc, "xylographer", moniker="echo")["hits"] and not search(svc, "xylographer", moniker="joke")["hits"]
    assert search(svc, "xylographer", since="2999-01-01T00:00:00Z")["hits"] == []
    assert search(svc, "xylographer", until="2001-01-01T00:00:00Z")["hits"] == []
    in_conversation = search(svc, "zeppelin", conversation_id=cid)["hits"]
    assert ("message", message["message_id"]) in ids({"hits": in_conversation})
    # (the conversation's summary may quote it too, once it has been quiet 30 s: a loaded run got there)
    assert {h["kind"] for h in in_conversation} <= {"message", "summary"}
    assert {h["conversation_id"] for h in in_conversation} == {cid}
    assert len(search(svc, "liftoff pelicans to go", limit=1)["hits"]) == 1


def snapshot_of_everything(svc) -> str:
    agents = svc.get("/api/agents", limit=1000).json()["agents"]
    sessions = sorted(a["session_id"] for a in agents)
    return json.dumps({"steps": [svc.steps(s) for s in sessions],
                       "summaries": svc.get("/api/summaries", limit=1000).json()["summaries"],
                       "conversations": svc.get("/api/conversations", limit=1000).json()}, sort_keys=True)


def test_hostile_queries_get_a_4xx_or_an_empty_answer_and_change_nothing(svc):
    made = svc.create("countdown", "hostile", config={"interval_s": 0, "n": 2})
    svc.wait_status(made["session_id"], "done")
    wait_for(lambda: svc.get("/api/summaries", session_id=made["session_id"]).json()["summaries"])
    conversations = svc.get("/api/conversations", limit=1000).json()["conversations"]
    for c in conversations:  # the archive writes while we compare otherwise: let quiet ones get theirs
        if svc.get(f"/api/conversations/{c['conversation_id']}/messages").json()["messages"]:
            wait_for(lambda: svc.get("/api/summaries", conversation_id=c["conversation_id"]).json()["summaries"],
                     timeout=60, what="the quiet conversations' summaries")
    before = snapshot_of_everything(svc)
    empty_ok = ['"', "'", "\"unbalanced", "text:liftoff OR 1=1", "' OR '1'='1", "'; DROP TABLE agent_steps; --",
                "*", "(", ")", "AND OR NOT", "~!@#$%^&*()_+", "\\", "\x00", "%", "NEAR(a b)", "title:x^5",
                "x" * 999, "日本語の検索"]
    for q in empty_ok:
        r = svc.get("/api/search", q=q)
        assert r.status_code == 200, (q, r.text)
        assert all(h["kind"] in ("step", "message", "summary", "tool_call") for h in r.json()["hits"])
    refused = {"10 kB": {"q": "x" * 10_000}, "empty": {"q": ""}, "no q": {},
               "bad kind": {"q": "a", "kind": "steps' OR 1=1"}, "bad status": {"q": "a", "status": "ok' OR '1"},
               "bad id": {"q": "a", "session_id": "x' OR '1'='1"}, "bad moniker": {"q": "a", "moniker": "a b"},
               "bad date": {"q": "a", "since": "yesterday"}, "bad limit": {"q": "a", "limit": 100000},
               "unknown param": {"q": "a", "drop": "1"}, "bad mode": {"q": "a", "mode": "sql"}}
    for what, params in refused.items():
        r = svc.http.get(svc.url + "/api/search", params=params, timeout=10)
        assert r.status_code == 400, (what, r.text)
        assert set(r.json()["error"]) == {"code", "message"}, what
    # an injected clause did not widen the answer: the quote-laden query finds what plain words find
    assert ids(search(svc, "' OR '1'='1 liftoff")) == ids(search(svc, "or 1 liftoff"))
    assert snapshot_of_everything(svc) == before


def test_a_baml_session_is_summarised_by_its_llm(svc, fake):
    made = svc.create("baml", "Plan a voyage", config={"interval_s": 0, "llm": svc.endpoints.llm(fake, model="fake")})
    svc.wait_status(made["session_id"], "done")
    summary = wait_for(lambda: svc.get("/api/summaries", session_id=made["session_id"]).json()["summaries"],
                       what="the LLM summary")[0]
    assert summary["method"] == "llm", summary
    assert "Quokkaland" in summary["text"] and summary["data"]["key_points"] == ["destination Quokkaland", "two steps"]
    prompt = next(r.prompt for r in fake.requests if "archive entry" in r.prompt)
    assert "packing the bags" in prompt and "Plan a voyage" in prompt
    assert search(svc, "Quokkaland", kind="summary")["hits"][0]["session_id"] == made["session_id"]


def test_a_quiet_conversation_gets_a_summary_and_a_new_one_after_new_messages(svc):
    cid = new_conversation(svc)
    svc.post(f"/api/conversations/{cid}/messages", json={"text": "first note about the aubergine harvest"})
    first = wait_for(lambda: svc.get("/api/summaries", conversation_id=cid).json()["summaries"], timeout=60,
                     what="the quiet conversation's summary")[0]
    assert first["kind"] == "conversation" and first["method"] == "extractive" and "aubergine" in first["text"]
    last = svc.post(f"/api/conversations/{cid}/messages", json={"text": "second note: the harvest is in"}).json()
    second = wait_for(lambda: [s for s in svc.get("/api/summaries", conversation_id=cid).json()["summaries"]
                               if s["last_message_id"] == last["message"]["message_id"]], timeout=60,
                      what="the summary after the new message")
    assert len(svc.get("/api/summaries", conversation_id=cid).json()["summaries"]) == 1  # replaced, not added
    assert second[0]["data"]["messages"] == 2


def test_retention_keeps_summaries_when_told_to(tmp_path):
    (tmp_path / "logs").mkdir()
    svc = Service(str(tmp_path / "data"), str(tmp_path / "logs"),
                  agents_args=[*ARCHIVE_ARGS, "--retention", "1", "--retention-keep-summaries"]).start()
    try:
        made = svc.create("countdown", "count the flamingos", config={"interval_s": 0, "n": 2})
        svc.wait_status(made["session_id"], "done", timeout=120)  # agents.py may start slowly
        wait_for(lambda: svc.get("/api/summaries", session_id=made["session_id"]).json()["summaries"])
        wait_for(lambda: not svc.steps(made["session_id"]), timeout=60, what="retention to remove the steps")
        # The snapshot goes last (a crash in between leaves it for the next round to find),
        # and then only the session's create action is left.
        wait_for(lambda: svc.session(made["session_id"])["status"] == "pending", timeout=60,
                 what="retention to remove the snapshot")
        assert search(svc, "flamingos", kind="summary")["hits"][0]["session_id"] == made["session_id"]
        assert search(svc, "liftoff", kind="step")["hits"] == []
    finally:
        svc.stop()


def test_tool_calls_are_found_by_their_result_and_error(svc):
    made = svc.create("scripted", config={"interval_s": 0, "tools": ["repeat", "fail"], "frames": [
        {"text": "calling", "tool_calls": [{"id": "r", "name": "repeat", "args": {"text": "wombat", "times": 2}},
                                           {"id": "f", "name": "fail", "args": {"message": "the quokkagate broke"}}]},
        {"text": "done", "done": True}]})
    svc.wait_status(made["session_id"], "done", timeout=60)
    found = search(svc, "wombatwombat", kind="tool_call")  # only in the result: "wombat" twice
    (hit,) = found["hits"]
    assert (hit["name"], hit["status"], hit["field"], hit["session_id"], hit["iteration"]) == (
        "repeat", "success", "result", made["session_id"], 0)
    assert hit["link"] == f"#/session/{made['session_id']}?iteration=0&tool_call={hit['id']}"
    failed = search(svc, "quokkagate", status="failed")["hits"]
    assert [(h["kind"], h["name"]) for h in failed] == [("tool_call", "fail")]
    assert search(svc, "quokkagate", status="success")["hits"] == []
