"""``ask_user`` through the real service (agents.py and app.py as subprocesses,
the ``scripted`` moniker asking): the session waits with reason ``user``, the
question is posted to the session's and its root's conversations, answers
arrive through the API or a conversation reply exactly once, across restarts
of both processes, and a timeout delivers the default.  Assertions are on the
persisted rows (tool_calls, agent_steps, conversation_messages, actions)."""
from tests.harness import wait_for


def conversation(svc, title: str) -> str:
    r = svc.post("/api/conversations", json={"title": title})
    assert r.status_code == 201, r.text
    return r.json()["conversation_id"]


def messages(svc, conversation_id: str) -> list[dict]:
    return svc.get(f"/api/conversations/{conversation_id}/messages", limit=1000).json()["messages"]


def calls(svc, session_id: str) -> list[dict]:
    return svc.get("/api/tool-calls", session_id=session_id, limit=1000).json()["tool_calls"]


def asking(svc, question_args: dict, *, then=None, **fields) -> dict:
    """A scripted session whose first step asks, and whose second says what it got."""
    frames = [{"text": "let me ask", "tool_calls": [{"id": "ask", "name": "ask_user", "args": question_args}]},
              *(then or [{"text": "thanks", "done": True}])]
    return svc.create("scripted", config={"interval_s": 0, "tools": ["ask_user"], "frames": frames}, **fields)


def open_question(svc, session_id: str) -> dict:
    row = wait_for(lambda: [c for c in calls(svc, session_id) if c["status"] == "waiting_result"],
                   what=f"the question of {session_id}")[0]
    snap = svc.wait_status(session_id, "waiting")
    assert snap["status_reason"] == "user"
    return row


def results_of(step: dict) -> list[dict]:
    return (step.get("inputs") or {}).get("tool_results") or []


# ---- test 9: a child asks; restart both; answer through the root's conversation ---

def test_a_child_asks_the_root_conversation_answers_once_across_restarts(service):
    svc = service
    root_conv, child_conv = conversation(svc, "main chat"), conversation(svc, "researcher's thread")
    # tools: what its children may use (a child never has more than its parent)
    root = svc.create("scripted", name="Orchestrator", conversation_id=root_conv,
                      config={"interval_s": 0, "tools": ["ask_user"], "frames": [{"text": "I'll delegate", "done": True}]})
    svc.wait_status(root["session_id"], "done")
    child = asking(svc, {"question": "Which city?", "choices": ["Paris", "Rome"]}, name="Researcher",
                   conversation_id=child_conv, parent_session_id=root["session_id"],
                   then=[{"text": "going there", "done": True}])
    sid = child["session_id"]
    row = open_question(svc, sid)
    snap = svc.session(sid)
    assert snap["parent_session_id"] == root["session_id"] and snap["parent_agent_id"] == root["agent_id"]
    assert row["name"] == "ask_user" and row["call_id"] == "ask" and len(svc.steps(sid)) == 1

    def posted(conv):
        return [m for m in messages(svc, conv) if m["message_id"] == row["id"]]
    (own,) = wait_for(lambda: posted(child_conv), what="the question in the child's conversation")
    assert own["text"] == "Which city?" and own["sender_type"] == "agent" and own["session_id"] == sid
    assert own["data"]["choices"] == ["Paris", "Rome"] and own["data"]["tool_call_id"] == row["id"]
    (notice,) = wait_for(lambda: posted(root_conv), what="the notice in the root's conversation")
    assert notice["text"] == "Researcher needs more information: Which city?"
    assert notice["data"]["child"] == {"agent_id": child["agent_id"], "session_id": sid, "name": "Researcher"}
    assert notice["data"]["root_session_id"] == root["session_id"]

    waiting = svc.get("/api/waiting", session_id=sid).json()
    assert waiting["total"] == 1 and waiting["waiting"][0]["kind"] == "question"
    assert waiting["waiting"][0]["question"] == "Which city?"
    assert waiting["waiting"][0]["session"]["parent_session_id"] == root["session_id"]

    # A second child whose question answers itself: its deadline may pass while the service is down.
    hurried = asking(svc, {"question": "Hotel or hostel?", "timeout_s": 3, "default": "hotel"}, name="Booker",
                     parent_session_id=root["session_id"])
    wait_for(lambda: [m for m in messages(svc, root_conv) if m["text"].startswith("Booker needs")],
             what="the second child's notice in the root's conversation")

    svc.stop()  # both processes
    svc.start()
    assert svc.session(sid)["status"] == "waiting" and svc.session(sid)["status_reason"] == "user"
    assert svc.get(f"/api/tool-calls/{row['id']}").json()["status"] == "waiting_result"
    assert len(svc.steps(sid)) == 1  # no step (no model call) while it waits

    svc.kill_agents()  # the answer arrives while no worker runs: it waits in the queue
    r = svc.post(f"/api/conversations/{root_conv}/messages", json={"text": " rome ", "user_id": "ann"})
    assert r.status_code == 201, r.text
    reply = r.json()
    assert reply["deliveries"] == [] and reply["answer"]["tool_call_id"] == row["id"]
    assert reply["message"]["data"] == {"tool_call_id": row["id"]}  # the question it answered
    svc.start_agents()
    assert svc.action(reply["answer"]["action_id"], timeout=60)["status"] == "done"
    svc.wait_status(sid, "done")

    steps = svc.steps(sid)
    assert [s["iteration"] for s in steps] == [0, 1]
    assert results_of(steps[1]) == [{"id": "ask", "name": "ask_user", "status": "success", "error": None,
                                     "result": {"answer": " rome ", "choice": "Rome", "answered_by": "ann",
                                                "via": "conversation"}}]
    assert not (steps[1].get("inputs") or {}).get("inbox")  # the answer came once: as the tool result
    final = svc.get(f"/api/tool-calls/{row['id']}").json()
    assert final["status"] == "success" and final["decided_by"] == reply["answer"]["action_id"]
    # Posted once per conversation, across the restart.
    assert len(posted(child_conv)) == 1 and len(posted(root_conv)) == 1
    answers = [m for m in messages(svc, root_conv) if m["message_id"] == reply["message"]["message_id"]]
    assert answers[0]["user_id"] == "ann"

    second = svc.post(f"/api/sessions/{sid}/answer", json={"text": "Paris"})
    assert second.status_code == 409 and second.json()["error"]["code"] == "conflict"
    assert svc.post(f"/api/sessions/{sid}/answer", json={"text": "Paris", "tool_call_id": row["id"]}).status_code == 409
    later = svc.post(f"/api/conversations/{child_conv}/messages", json={"text": "actually Paris"}).json()
    assert later.get("answer") is None  # no open question there any more: ordinary guidance
    assert svc.get("/api/waiting", session_id=sid).json()["total"] == 0
    assert len(svc.steps(sid)) == 2
    answer_actions = svc.get("/api/actions", session_id=sid, type="answer").json()["actions"]
    assert [a["status"] for a in answer_actions] == ["done"]

    # The timed-out child got its default, once.
    svc.wait_status(hurried["session_id"], "done", timeout=60)
    (timed,) = calls(svc, hurried["session_id"])
    assert timed["status"] == "success" and timed["result"]["answer"] == "hotel" and timed["result"]["timed_out"]
    assert results_of(svc.steps(hurried["session_id"])[1])[0]["result"]["answer"] == "hotel"
    timeouts = svc.get("/api/actions", session_id=hurried["session_id"], type="answer").json()["actions"]
    assert timed["decided_by"] in [a["id"] for a in timeouts if a["status"] == "done"]
    assert len(svc.steps(hurried["session_id"])) == 2


# ---- timeouts ------------------------------------------------------------------

def test_a_question_times_out_to_its_default_or_unanswered(shared_service):
    svc = shared_service
    with_default = asking(svc, {"question": "Proceed?", "choices": ["yes", "no"], "timeout_s": 1,
                                           "default": "yes"})
    without = asking(svc, {"question": "Anything else?", "timeout_s": 1})
    for made in (with_default, without):
        svc.wait_status(made["session_id"], "done", timeout=90)
    (row,) = calls(svc, with_default["session_id"])
    assert row["status"] == "success"
    assert row["result"] == {"answer": "yes", "choice": "yes", "answered_by": None, "via": "timeout",
                             "timed_out": True}
    assert results_of(svc.steps(with_default["session_id"])[1])[0]["result"]["timed_out"] is True
    (row,) = calls(svc, without["session_id"])
    assert row["status"] == "failed" and row["error"].startswith("unanswered:")
    told = results_of(svc.steps(without["session_id"])[1])[0]
    assert told["status"] == "failed" and told["error"].startswith("unanswered:")
    # Too late: the question is closed.
    late = svc.post(f"/api/sessions/{without['session_id']}/answer", json={"text": "hello?"})
    assert late.status_code == 409


def test_a_timeout_that_loses_to_an_answer_changes_nothing(shared_service):
    svc = shared_service
    made = asking(svc, {"question": "Quick?", "timeout_s": 3, "default": "slow"})
    sid = made["session_id"]
    open_question(svc, sid)
    r = svc.post(f"/api/sessions/{sid}/answer", json={"text": "quick"})
    assert r.status_code == 202 and svc.action(r.json()["action_id"])["status"] == "done"
    svc.wait_status(sid, "done")
    (row,) = calls(svc, sid)
    assert row["result"]["answer"] == "quick" and row["result"]["via"] == "api"
    assert row["decided_by"] == r.json()["action_id"]


# ---- the answer route --------------------------------------------------------------

def test_answers_through_the_api_are_validated_and_applied_once(shared_service):
    svc = shared_service
    conv = conversation(svc, "colours")
    made = asking(svc, {"question": "Name a colour"}, conversation_id=conv)
    sid = made["session_id"]
    row = open_question(svc, sid)
    assert svc.post("/api/sessions/01NOSUCHSESSION/answer", json={"text": "x"}).status_code == 404
    assert svc.post(f"/api/sessions/{sid}/answer", json={"text": "  "}).status_code == 400
    assert svc.post(f"/api/sessions/{sid}/answer", json={}).status_code == 400
    assert svc.post(f"/api/sessions/{sid}/answer", json={"text": "x", "bogus": 1}).status_code == 400
    assert svc.post(f"/api/sessions/{sid}/answer",
                    json={"text": "x", "tool_call_id": "01NOSUCHCALL"}).status_code == 404
    # A session with no open question.
    other = svc.create("scripted", config={"interval_s": 0, "frames": [{"done": True}]})
    svc.wait_status(other["session_id"], "done")
    assert svc.post(f"/api/sessions/{other['session_id']}/answer", json={"text": "x"}).status_code == 409
    assert svc.post(f"/api/sessions/{other['session_id']}/answer",
                    json={"text": "x", "tool_call_id": row["id"]}).status_code == 404  # not its question

    first = svc.post(f"/api/sessions/{sid}/answer", json={"text": "teal", "user_id": "bo"})
    second = svc.post(f"/api/sessions/{sid}/answer", json={"text": "red"})
    assert first.status_code == 202 and first.json()["tool_call_id"] == row["id"]
    assert second.status_code == 409  # an answer is queued already (or applied)
    assert svc.action(first.json()["action_id"])["status"] == "done"
    svc.wait_status(sid, "done")
    final = svc.get(f"/api/tool-calls/{row['id']}").json()
    assert final["result"] == {"answer": "teal", "choice": None, "answered_by": "bo", "via": "api"}
    # The thread reads whole: the question, then the answer given elsewhere, echoed once.
    thread = [(m["sender_type"], m["text"], m.get("event_type")) for m in messages(svc, conv)]
    assert ("agent", "Name a colour", "question") in thread
    assert thread.count(("user", "teal", "answer")) == 1
    echo = [m for m in messages(svc, conv) if m["text"] == "teal"][0]
    assert echo["user_id"] == "bo" and echo["message_id"] == first.json()["action_id"]
    assert svc.post(f"/api/sessions/{sid}/answer", json={"text": "red"}).status_code == 409


def test_the_waiting_list_holds_questions_and_approvals_oldest_first(shared_service):
    svc = shared_service
    asked = asking(svc, {"question": "First?"})
    open_question(svc, asked["session_id"])
    approval = svc.create("scripted", config={"interval_s": 0, "tools": ["add"], "approve": ["add"], "frames": [
        {"tool_calls": [{"name": "add", "args": {"numbers": [1]}}]}, {"done": True}]})
    wait_for(lambda: [c for c in calls(svc, approval["session_id"]) if c["status"] == "waiting_approval"],
             what="the approval")
    page = svc.get("/api/waiting", limit=1000).json()
    mine = [w for w in page["waiting"] if w["session_id"] in (asked["session_id"], approval["session_id"])]
    assert [w["kind"] for w in mine] == ["question", "approval"]  # oldest first
    assert page["total"] >= 2 and page["total"] == len(page["waiting"])
    times = [w["created_at"] for w in page["waiting"]]
    assert times == sorted(times)
    gauges = {line.split('"')[1]: float(line.split()[-1]) for line in svc.get("/metrics").text.splitlines()
              if line.startswith("agentsvc_waiting{")}
    for kind in ("question", "approval", "result"):  # app.py's /metrics counts what the list counts
        assert gauges[kind] == svc.get("/api/waiting", kind=kind).json()["total"], (kind, gauges)
    assert gauges["question"] >= 1 and gauges["approval"] >= 1
    only = svc.get("/api/waiting", kind="approval", limit=1000).json()
    assert all(w["kind"] == "approval" for w in only["waiting"]) and only["total"] == len(only["waiting"])
    assert svc.get("/api/waiting", limit=1, offset=0).json()["waiting"][0] == page["waiting"][0]
    for bad in ({"kind": "bogus"}, {"limit": 0}, {"offset": -1}, {"agent_id": "bad'id"}, {"nope": 1}):
        r = svc.get("/api/waiting", **bad)
        assert r.status_code == 400 and "error" in r.json(), bad
    # An unknown parent is refused at create, and nothing is queued.
    r = svc.post("/api/agents", json={"moniker": "scripted", "parent_session_id": "01NOSUCHPARENT"})
    assert r.status_code == 404
    # Approving it in place removes it from the list.
    call = [w for w in mine if w["kind"] == "approval"][0]
    r = svc.post(f"/api/tool-calls/{call['tool_call_id']}/approve")
    assert svc.action(r.json()["action_id"])["status"] == "done"
    svc.wait_status(approval["session_id"], "done")
    ids = {w["tool_call_id"] for w in svc.get("/api/waiting", limit=1000).json()["waiting"]}
    assert call["tool_call_id"] not in ids


# ---- the command line ------------------------------------------------------------

def test_the_cli_lists_what_waits_and_answers(shared_service):
    import json

    svc = shared_service
    made = asking(svc, {"question": "Which port?"}, name="porter")
    sid = made["session_id"]
    row = open_question(svc, sid)
    listed = svc.cli("waiting", "--session", sid, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [w["tool_call_id"] for w in json.loads(listed.stdout)["waiting"]] == [row["id"]]
    table = svc.cli("waiting", "--kind", "question")
    assert table.returncode == 0 and "Which port?" in table.stdout
    done = svc.cli("answer", made["agent_id"], "8080", "--user", "ops")  # an agent id: its latest session
    assert done.returncode == 0, done.stderr
    assert "answer done" in done.stdout and row["id"] in done.stdout
    svc.wait_status(sid, "done")
    assert svc.get(f"/api/tool-calls/{row['id']}").json()["result"]["answered_by"] == "ops"
    again = svc.cli("answer", sid, "9090")
    assert again.returncode == 4 and "no open question" in again.stderr


# ---- an LLM agent asks: no model call while it waits ---------------------------------

def test_a_baml_agent_asks_and_no_model_is_called_until_the_answer(shared_service):
    import json

    from tests.fake_openai import FakeOpenAI, Reply, scripted

    def reply(**fields) -> Reply:
        return Reply(json.dumps({"step": "0", "next_step": "1", "state": {}, "done": False, **fields}))

    svc = shared_service
    ask = {"name": "ask_user", "args": {"question": "Which city shall I plan for?", "choices": ["Paris", "Rome"]}}
    steps_script = scripted(reply(text="I need to know the city", tool_calls=[ask]),
                            reply(text="Planning Rome", done=True))

    def respond(request):  # a turn's or the session's summary (runtime/record/turn_tracker.py, the archive) is not a step
        if "archive entry" in request.prompt:
            return Reply(json.dumps({"summary": "asked which city", "key_points": []}))
        return steps_script(request)

    def step_requests():
        return [r for r in llm.requests if "archive entry" not in r.prompt]

    with FakeOpenAI(respond) as llm:
        made = svc.create("baml", task="plan a trip", config={
            "interval_s": 0, "tools": ["ask_user"], "llm": svc.endpoints.llm(llm)})
        sid = made["session_id"]
        row = open_question(svc, sid)
        assert row["args"]["question"] == "Which city shall I plan for?"
        assert svc.settled_step_count(sid, quiet_s=1.5) == 1
        assert len(step_requests()) == 1  # no step's request while the question is open
        r = svc.post(f"/api/sessions/{sid}/answer", json={"text": "2"})  # the second choice, by number
        assert r.status_code == 202
        svc.wait_status(sid, "done")
        steps = svc.steps(sid)
        assert [s["text"] for s in steps] == ["I need to know the city", "Planning Rome"]
        assert results_of(steps[1])[0]["result"]["choice"] == "Rome"
        second = step_requests()[1].prompt
        assert "ask_user" in second and "Rome" in second  # the answer reached the model as the tool result
        turns = wait_for(lambda: (t := svc.get(f"/api/sessions/{sid}/turns").json()["turns"]) and len(t) == 2
                         and all(x["status"] == "ended" for x in t) and t, what="two ended turns")
        assert [(t["trigger_kind"], t["end_reason"]) for t in turns] == [("create", "waiting:user"),
                                                                          ("answer", "done:done")]
        assert turns[1]["trigger_text"] == "2"


# ---- several questions, approval first, destroy ---------------------------------------

def test_two_questions_of_one_step_are_answered_oldest_first_or_by_id(shared_service):
    svc = shared_service
    conv = conversation(svc, "two questions")
    made = svc.create("scripted", conversation_id=conv, config={"interval_s": 0, "tools": ["ask_user"], "frames": [
        {"tool_calls": [{"id": "q1", "name": "ask_user", "args": {"question": "First name?"}},
                        {"id": "q2", "name": "ask_user", "args": {"question": "Last name?"}}]},
        {"text": "nice to meet you", "done": True}]})
    sid = made["session_id"]
    rows = wait_for(lambda: (c := calls(svc, sid)) and all(r["status"] == "waiting_result" for r in c) and c,
                    what="both questions")
    first, second = sorted(rows, key=lambda r: r["seq"])
    wait_for(lambda: {m["message_id"] for m in messages(svc, conv)} >= {first["id"], second["id"]},
             what="both questions posted")
    # A reply naming the second question answers it; a plain reply answers the oldest still open.
    r = svc.post(f"/api/conversations/{conv}/messages",
                 json={"text": "Lovelace", "data": {"tool_call_id": second["id"]}})
    assert r.json()["answer"]["tool_call_id"] == second["id"]
    assert svc.action(r.json()["answer"]["action_id"])["status"] == "done"
    assert svc.session(sid)["status"] == "waiting"  # one question is still open: no step yet
    r = svc.post(f"/api/conversations/{conv}/messages", json={"text": "Ada"})
    assert r.json()["answer"]["tool_call_id"] == first["id"]
    svc.wait_status(sid, "done")
    told = results_of(svc.steps(sid)[1])
    assert [(t["id"], t["result"]["answer"]) for t in told] == [("q1", "Ada"), ("q2", "Lovelace")]
    assert len(svc.steps(sid)) == 2


def test_a_question_that_needs_approval_is_posted_once_approved(shared_service):
    svc = shared_service
    conv = conversation(svc, "approve the question")
    frames = [{"tool_calls": [{"name": "ask_user", "args": {"question": "May I email your boss?"}}]}, {"done": True}]
    made = svc.create("scripted", conversation_id=conv,
                      config={"interval_s": 0, "tools": ["ask_user"], "approve": ["ask_user"], "frames": frames})
    sid = made["session_id"]
    row = wait_for(lambda: [c for c in calls(svc, sid) if c["status"] == "waiting_approval"], what="approval")[0]
    assert svc.wait_status(sid, "waiting")["status_reason"] == "approval"
    assert [w["kind"] for w in svc.get("/api/waiting", session_id=sid).json()["waiting"]] == ["approval"]
    assert svc.post(f"/api/sessions/{sid}/answer", json={"text": "yes"}).status_code == 409  # not a question yet
    assert not [m for m in messages(svc, conv) if m["message_id"] == row["id"]]
    r = svc.post(f"/api/tool-calls/{row['id']}/approve")
    assert svc.action(r.json()["action_id"])["status"] == "done"
    open_question(svc, sid)  # now it waits for the answer, reason user
    wait_for(lambda: [m for m in messages(svc, conv) if m["message_id"] == row["id"]], what="the question posted")
    assert [w["kind"] for w in svc.get("/api/waiting", session_id=sid).json()["waiting"]] == ["question"]
    r = svc.post(f"/api/sessions/{sid}/answer", json={"text": "no"})
    assert svc.action(r.json()["action_id"])["status"] == "done"
    svc.wait_status(sid, "done")
    assert len([m for m in messages(svc, conv) if m["message_id"] == row["id"]]) == 1


def test_destroying_an_asking_session_closes_its_question(shared_service):
    svc = shared_service
    conv = conversation(svc, "destroyed")
    made = asking(svc, {"question": "Still there?", "timeout_s": 600, "default": "yes"}, conversation_id=conv)
    sid = made["session_id"]
    row = open_question(svc, sid)
    assert svc.control(made["agent_id"], "destroy")["status"] == "done"
    ended = svc.get(f"/api/tool-calls/{row['id']}").json()
    assert ended["status"] == "failed" and ended["error"].startswith("cancelled")
    assert svc.post(f"/api/sessions/{sid}/answer", json={"text": "yes"}).status_code == 409
    reply = svc.post(f"/api/conversations/{conv}/messages", json={"text": "hello?"}).json()
    assert reply.get("answer") is None  # closed: an ordinary message now
    assert row["id"] not in {w["tool_call_id"] for w in svc.get("/api/waiting", limit=1000).json()["waiting"]}
    assert len(svc.steps(sid)) == 1


# ---- kill -9 while answers arrive ---------------------------------------------------

def test_answers_racing_kill_9_apply_exactly_once_and_questions_post_once(service):
    svc = service
    conv = conversation(svc, "crashy")
    made = [asking(svc, {"question": f"Question {i}?"}, name=f"asker-{i}", conversation_id=conv) for i in range(6)]
    sids = [m["session_id"] for m in made]
    rows = {sid: open_question(svc, sid) for sid in sids}
    accepted: dict[str, list[tuple[str, str]]] = {sid: [] for sid in sids}  # (action id, text) accepted

    def answer_api(sid, text):
        r = svc.post(f"/api/sessions/{sid}/answer", json={"text": text})
        assert r.status_code in (202, 409), r.text
        if r.status_code == 202:
            accepted[sid].append((r.json()["action_id"], text))

    def answer_in_conversation(sid, text):
        r = svc.post(f"/api/conversations/{conv}/messages", json={"text": text,
                                                                  "data": {"tool_call_id": rows[sid]["id"]}})
        assert r.status_code == 201, r.text
        if r.json().get("answer"):
            accepted[sid].append((r.json()["answer"]["action_id"], text))

    answer_api(sids[0], "a0")
    answer_api(sids[1], "a1")
    svc.kill_agents()  # the answers may be applied, half applied or still queued
    svc.start_agents()
    answer_api(sids[0], "a0-again")  # 409 if the first is queued or applied
    answer_in_conversation(sids[2], "a2")
    answer_in_conversation(sids[3], "a3")
    svc.kill_agents()
    svc.start_agents()
    answer_in_conversation(sids[2], "a2-again")  # the question is closed or its answer queued: guidance
    answer_api(sids[4], "a4")
    answer_in_conversation(sids[5], "a5")
    answer_api(sids[5], "a5-again")

    for sid in sids:
        svc.wait_status(sid, "done", timeout=90)
    for i, sid in enumerate(sids):
        assert len(svc.steps(sid)) == 2, f"session {i} stepped {len(svc.steps(sid))} times"
        (row,) = calls(svc, sid)
        # An answer's action is marked done after it took effect: the session may
        # step and finish first (a loaded machine showed one still processing).
        actions = wait_for(lambda: (found := {a["id"]: a for a in svc.get(
            "/api/actions", session_id=sid, type="answer").json()["actions"]}) and all(
            a["status"] in ("done", "failed") for a in found.values()) and found,
            timeout=90, what=f"session {i}'s answer actions to finish")
        done = [a for a in actions.values() if a["status"] == "done"]
        assert len(done) == 1 and row["decided_by"] == done[0]["id"], (i, actions)
        assert all(a["error"].startswith("conflict") for a in actions.values() if a["status"] == "failed")
        assert (done[0]["id"], row["result"]["answer"]) in accepted[sid]
        assert row["result"]["answer"] == f"a{i}"  # the first accepted answer won
        told = results_of(svc.steps(sid)[1])
        assert [t["result"]["answer"] for t in told] == [f"a{i}"]
    thread = messages(svc, conv)
    for sid in sids:  # each question posted once, whatever the restarts found
        assert sum(m["message_id"] == rows[sid]["id"] for m in thread) == 1
