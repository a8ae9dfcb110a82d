"""The Python client (client/) against the real service (agents.py and app.py
as subprocesses), never a mock.

What these prove: its models agree with the OpenAPI document a running
service serves; a session is created, waited for, paused, interrupted,
resumed and destroyed through it, each action waited to done; a POST whose
answer is lost is sent again with its Idempotency-Key and queues one action;
errors arrive as the exceptions that carry the service's body; listings are
read whole through their pages; a tool call is approved (with changed args)
and a question answered; a replay is made and diffed against its source, and
an eval run scored; the stream follows a session through a restart of app.py
with every step once, in order; and the async client does the same create,
wait and stream, its stream too across a restart of app.py.
"""
import asyncio
import threading

import httpx
import pytest

from client import AsyncClient, Client, NotFound, Unreachable, models
from client.calls import control
from client.models import Control
from store import Store
from tests.client_contract import disagreements
from tests.harness import free_port, wait_for


@pytest.fixture
def api(shared_service):
    with Client(shared_service.url) as client:
        yield client


def test_the_models_agree_with_the_live_document(api):
    assert disagreements(api.request("GET", "/api/openapi.json")) == []


def test_create_wait_control_and_errors(api):
    made = api.create_agent("echo", "hi", config={"interval_s": 0.05, "stop_on_done": False}, name="client echo")
    assert isinstance(made, models.Accepted) and made.status == "pending"
    assert api.wait_action(made.action_id).status == "done"
    assert api.wait_for_status(made.session_id, "running", timeout=120).name == "client echo"

    paused = api.pause(made.agent_id)
    assert paused.session_id == made.session_id and api.wait_action(paused.action_id, 120).status == "done"
    assert api.session(made.session_id).status == "paused"
    interrupted = api.interrupt(made.agent_id, "say the word heliotrope", session_id=made.session_id)
    assert api.wait_action(interrupted.action_id, 120).status == "done"
    assert api.wait_action(api.resume(made.agent_id).action_id, 120).status == "done"
    wait_for(lambda: any("heliotrope" in (s.text or "") for s in api.steps(made.session_id)), timeout=120,
             what="the guidance to reach a step")
    steps = list(api.steps(made.session_id, page_size=2))
    assert [s.iteration for s in steps] == list(range(len(steps))) and all(isinstance(s, models.Step) for s in steps)
    destroyed = api.destroy(made.agent_id, made.session_id)
    assert api.wait_action(destroyed.action_id, 120).status == "done"
    assert api.wait_for_status(made.session_id, ["stopped"], timeout=120).status == "stopped"
    # An action applied and failed is an answer, not an error: pausing a stopped session.
    failed = api.wait_action(api.pause(made.agent_id).action_id, 120)
    assert failed.status == "failed" and "stopped" in failed.error
    types = [a.type for a in api.actions(session_id=made.session_id, order="oldest", page_size=2)]
    assert types == ["create", "pause", "interrupt", "resume", "destroy", "pause"], types

    with pytest.raises(NotFound) as missing:
        api.session("01NOSUCHSESSION")
    assert missing.value.status == 404 and missing.value.body["error"]["code"] == "not_found"
    with Client(f"http://127.0.0.1:{free_port()}", retries=1) as nowhere, pytest.raises(Unreachable):
        nowhere.agent_page()


def test_a_post_whose_answer_is_lost_is_applied_once(shared_service, api):
    """The first try reaches the service and its answer is lost on the way back;
    the client sends it again with the same Idempotency-Key and gets the first
    answer: one pause queued, not two."""
    made = api.create_agent("echo", config={"interval_s": 0.05, "stop_on_done": False})
    api.wait_for_status(made.session_id, "running", timeout=120)
    lost = []

    class LosingTransport(httpx.HTTPTransport):
        def handle_request(self, request):
            response = super().handle_request(request)
            if request.method == "POST" and not lost:
                response.read()
                lost.append(request.headers["Idempotency-Key"])
                raise httpx.ReadError("the answer was lost")
            return response

    with Client(shared_service.url, transport=LosingTransport()) as flaky:
        call = control(made.agent_id, "pause", Control(session_id=made.session_id))
        accepted = flaky.send(call)
    assert lost == [call.key] and accepted.action_id
    assert api.wait_action(accepted.action_id, 120).status == "done"
    pauses = [a for a in api.actions(session_id=made.session_id) if a.type == "pause"]
    assert [a.id for a in pauses] == [accepted.action_id]
    api.destroy(made.agent_id)


def test_listings_are_read_through_their_pages(api):
    made = [api.create_agent("countdown", f"page {i}", config={"n": 1, "interval_s": 0}) for i in range(5)]
    for accepted in made:
        api.wait_for_status(accepted.session_id, "done", timeout=120)
    first = api.agent_page(limit=2, moniker="countdown")
    listed = list(api.agents(moniker="countdown", page_size=2))
    assert len(listed) == first.total >= 5 and len({a.agent_id for a in listed}) == len(listed)
    assert {a.agent_id for a in made} <= {a.agent_id for a in listed}
    assert len(list(api.agents(moniker="countdown", page_size=2, max_items=3))) == 3


def test_approve_a_tool_call_and_answer_a_question(api):
    made = api.create_agent("scripted", config={
        "interval_s": 0, "tools": ["add", "ask_user"], "approve": ["add"], "frames": [
            {"tool_calls": [{"name": "add", "args": {"numbers": [1, 2]}}]},
            {"tool_calls": [{"id": "ask", "name": "ask_user", "args": {"question": "Name a colour"}}]},
            {"text": "end", "done": True}]})
    sid = made.session_id
    call = wait_for(lambda: next(api.tool_calls(session_id=sid, status="waiting_approval"), None), timeout=120,
                    what="a call waiting for approval")
    assert isinstance(call, models.ToolCall) and call.name == "add"
    item = next(api.waiting(session_id=sid))
    assert item.kind == "approval" and item.tool_call_id == call.id
    approved = api.approve(call.id, args={"numbers": [2, 3]})
    assert approved.tool_call_id == call.id and api.wait_action(approved.action_id, 120).status == "done"

    question = wait_for(lambda: next(api.waiting(session_id=sid, kind="question"), None), timeout=120,
                        what="the question")
    assert question.question == "Name a colour"
    answered = api.answer(sid, "teal", user_id="bo")
    assert answered.tool_call_id == question.tool_call_id
    assert api.wait_action(answered.action_id, 120).status == "done"
    api.wait_for_status(sid, "done", timeout=120)
    ran = api.tool_call(call.id)
    assert ran.status == "success" and ran.result == {"sum": 5} and ran.original_args == {"numbers": [1, 2]}
    assert api.tool_call(question.tool_call_id).result["answer"] == "teal"
    assert list(api.waiting(session_id=sid)) == []


def test_replay_diff_and_an_eval_run(api):
    frames = [{"text": "adding", "tool_calls": [{"name": "add", "args": {"numbers": [4, 1]}}]},
              {"text": "the answer is 5", "done": True}]
    source = api.create_agent("scripted", "client replay", config={"interval_s": 0, "tools": ["add"],
                                                                   "frames": frames})
    api.wait_for_status(source.session_id, "done", timeout=120)

    replay = api.replay(source.session_id, tools="recorded")
    assert api.wait_action(replay.action_id, 120).status == "done"
    assert api.wait_for_status(replay.session_id, "done", timeout=120).status == "done"
    diff = api.diff(replay.session_id, source.session_id)
    assert isinstance(diff, models.SessionDiff) and diff.first_divergence is None
    assert diff.summary["differing"] == 0

    evalset = api.create_evalset("client set", session_ids=[source.session_id])
    assert evalset.session_ids == [source.session_id] and api.evalset(evalset.id).name == "client set"
    assert evalset.id in {s.id for s in api.evalsets().evalsets}
    run = api.start_eval_run(evalset.id, ["final_equal"])
    finished = api.wait_eval_run(run.id, timeout=300)
    assert finished.status == "done" and finished.progress["scored"] == 1, finished
    assert finished.results[0]["scores"]["final_equal"]["passed"] is True
    assert [r.id for r in api.eval_runs(evalset.id).runs] == [run.id]


def collect(client: Client, session_id: str, into: list, errors: list, notes: list) -> None:
    """Follow a session's stream (from its start) until its final state."""
    try:
        for event in client.stream(session_id=session_id, on_disconnect=notes.append):
            into.append(event)
            if isinstance(event, models.AgentStateEvent) and event.data.status in ("done", "stopped", "error"):
                return
    except Exception as exc:  # noqa: BLE001 - the test reports it
        errors.append(exc)


def collect_async(url: str, session_id: str, into: list, errors: list, notes: list) -> None:
    """:func:`collect` through the async client, on an event loop of its own."""
    async def follow():
        async with AsyncClient(url) as client:
            async for event in client.stream(session_id=session_id, on_disconnect=notes.append):
                into.append(event)
                if isinstance(event, models.AgentStateEvent) and event.data.status in ("done", "stopped", "error"):
                    return
    try:
        asyncio.run(follow())
    except Exception as exc:  # noqa: BLE001 - the test reports it
        errors.append(exc)


@pytest.mark.parametrize("follow", [collect, collect_async], ids=["sync", "async"])
def test_the_stream_follows_a_session_across_an_app_restart(service, follow):
    """A session steps on while app.py is stopped and started again: the stream
    (in another thread; the sync client's, or the async client's on its own
    event loop) reconnects from its last cursor and receives every step once,
    in order, the ones made while app.py was down from LanceDB."""
    svc = service
    events, errors, notes = [], [], []
    with Client(svc.url) as api, Client(svc.url) as reader:
        made = api.create_agent("joke", "cats", config={"interval_s": 0.05})
        api.wait_action(made.action_id, 120)
        source = reader if follow is collect else svc.url
        thread = threading.Thread(target=follow, args=(source, made.session_id, events, errors, notes), daemon=True)
        thread.start()

        def steps_seen() -> int:
            return sum(isinstance(e, models.StepEvent) for e in events)

        wait_for(lambda: steps_seen() >= 3, timeout=120, what="the stream to deliver steps")
        svc.stop_app()
        store = Store(svc.data_dir + "/lancedb")
        try:
            before = store.steps.count(made.session_id)
            wait_for(lambda: store.steps.count(made.session_id) >= before + 5, timeout=120,
                     what="steps while app.py is down")
        finally:
            store.close()
        svc.start_app()
        seen = steps_seen()
        wait_for(lambda: steps_seen() > seen + 5, timeout=120, what="the stream to resume after the restart")
        api.wait_action(api.destroy(made.agent_id).action_id, 120)
        thread.join(timeout=120)
        assert not thread.is_alive() and not errors, errors
        stored = [s.iteration for s in api.steps(made.session_id)]
    received = [e.data.iteration for e in events if isinstance(e, models.StepEvent)]
    assert received == stored == list(range(len(stored))), "the client missed or repeated steps"
    cursors = [e.cursor for e in events if e.cursor is not None]
    assert len(cursors) == len(set(cursors)) and notes, notes  # it did reconnect


def test_the_async_client_creates_waits_and_streams(shared_service):
    async def main():
        async with AsyncClient(shared_service.url) as api:
            made = await api.create_agent("countdown", "async", config={"n": 4, "interval_s": 0.02})
            assert (await api.wait_action(made.action_id, 120)).status == "done"
            assert (await api.wait_for_status(made.session_id, "done", timeout=120)).iteration >= 3
            events = [e async for e in api.stream(session_id=made.session_id, follow=False)]
            steps = [s async for s in api.steps(made.session_id, page_size=3)]
            return events, steps
    events, steps = asyncio.run(main())
    assert [e.data.iteration for e in events if isinstance(e, models.StepEvent)] == [0, 1, 2, 3]
    assert [s.iteration for s in steps] == [0, 1, 2, 3]
    assert isinstance(events[-1], models.AgentStateEvent) and events[-1].data.status == "done"
    assert [e.data.type for e in events if isinstance(e, models.ActionEvent)] == ["create"]
