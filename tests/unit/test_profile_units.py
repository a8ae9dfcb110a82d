"""Profiles in process: templates, predicates, overrides, the shipped files,
a profile's inbox priorities reaching the runner, and reconcile re-applying
what an after_step record decided."""
import os

import pytest

from monikers import default_registry
from profiles import hooks, template
from profiles.conditions import Facts, holds
from profiles.loader import ProfileLibrary, parse
from profiles.model import Condition
from profiles.resolve import ResolveError, base_config, resolve
from runtime.base import inbox
from domain.session_config import SessionConfig
from tools.catalog import installed_registry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_templates_fill_known_fields_only_and_never_evaluate():
    assert template.render("{{task}} on {{ date }}", {"task": "x {{ date }}", "date": "2026-01-01"}) == \
        "x {{ date }} on 2026-01-01"  # a value is not scanned again
    with pytest.raises(ValueError, match="unknown template field"):
        template.check_template("{{ __import__('os') }} {{ secret }}")
    assert template.render("{{ 1+1 }}", {}) == "{{ 1+1 }}"  # not a placeholder: left as text


def facts(**kw):
    base = dict(phase="after_step", iteration=2, state={"k": 1}, inbox=[{"kind": "child_result"}], usage=None,
                steps_without_tools=3, text="Shall I go on? yes", done=False)
    return Facts(**{**base, **kw})


@pytest.mark.parametrize("condition,expected", [
    ({"text_has_question": True}, True),
    ({"text_has_question": True, "done": True}, False),
    ({"any": [{"done": True}, {"no_tool_calls_for": 3}]}, True),
    ({"not": {"inbox_has": "child_result"}}, False),
    ({"all": [{"state_has": "k"}, {"iteration_at_least": 2}, {"text_matches": r"go\s+on"}]}, True),
    ({"text_contains": "SHALL"}, True),
    ({"tokens_over": 0}, False),
])
def test_predicates(condition, expected):
    assert holds(Condition.model_validate(condition), facts()) is expected


def test_a_question_mark_inside_a_word_or_url_is_not_a_question():
    cond = Condition.model_validate({"text_has_question": True})
    assert not holds(cond, facts(text="see https://x.org/a?b=1 for it"))
    assert holds(cond, facts(text='He asked "why?" and left'))


def test_overrides_narrow_tools_widen_approve_and_refuse_the_rest(tmp_path):
    path = write(tmp_path, "p.yaml", "name: p\nmoniker: joke\ntools: {allowed: [add, human], approve: [add]}\n"
                                     "limits: {max_steps: 5}\n")
    entry = parse(path)
    assert entry.profile is not None, entry.problems
    assert resolve(entry, {"max_steps": 2})["max_steps"] == 2
    narrowed = resolve(entry, {"tools": ["human"]})
    assert narrowed["tools"] == ["human"] and narrowed["approve"] == []
    with pytest.raises(ResolveError, match="may only narrow"):
        resolve(entry, {"tools": ["add", "fail"]})
    with pytest.raises(ResolveError, match="may only add"):
        resolve(entry, {"approve": []})
    with pytest.raises(ResolveError, match="does not let a create override"):
        resolve(entry, {"jokes": 3})
    assert base_config(entry)["profile"]["hash"] == entry.hash


def test_the_shipped_profiles_load_and_the_orchestrator_says_what_it_lacks():
    tools = installed_registry()
    lib = ProfileLibrary(os.path.join(ROOT, "profiles"), monikers=default_registry(),
                         tool_names=lambda: set(tools.names()))
    lib.load()
    problems = {e.name: lib.check(e) for e in lib.entries()}
    assert problems["researcher"] == [] and problems["planner"] == []
    orchestrator = problems["orchestrator"]
    if "orchestrator" not in default_registry():  # until the multi-agent issue's moniker is installed
        assert any(p.field == "moniker" and "orchestrator" in p.message for p in orchestrator)
    assert all(p.file == "orchestrator.yaml" and p.line for p in orchestrator)


def test_a_profile_sets_the_sessions_inbox_priorities():
    from monikers.builtin import BUILTINS
    from runtime.session.agent import SessionAgent

    config = SessionConfig(profile={"name": "p", "inbox_priorities": {"message": 1}}).model_dump()
    agent = SessionAgent(snapshot={"agent_id": "a", "session_id": "s", "status": "running", "iteration": -1,
                                   "config": config}, moniker=BUILTINS[0], persist=None)
    items = [{"action_id": "1", "kind": "child_result"}, {"action_id": "2", "kind": "message"}]
    assert [i["action_id"] for i in inbox.ordered(items, agent.inbox_priorities)] == ["2", "1"]


def test_reconcile_reapplies_an_after_step_record_once():
    step = {"iteration": 4, "observers": {"after": [
        {"name": "n", "fired": True, "action": "note", "text": "hi", "id": "observer:s:4:n:after"},
        {"name": "q", "fired": True, "action": "ask_user", "text": "?"}], "flow": None}}
    snap = hooks.caught_up({"status": "running", "pending_guidance": [], "used_guidance": []}, step)
    assert (snap["status"], snap["status_reason"]) == ("waiting", "user")
    assert [g["action_id"] for g in snap["pending_guidance"]] == ["observer:s:4:n:after"]
    again = hooks.caught_up(dict(snap, status="running"), step)
    assert len(again["pending_guidance"]) == 1  # the note is not queued twice
    used = hooks.caught_up({"status": "running", "pending_guidance": [], "used_guidance": ["observer:s:4:n:after"]},
                           step)
    assert used["pending_guidance"] == []


def test_lookup_gives_a_usable_profiles_moniker_and_config_or_says_why_not(tmp_path):
    write(tmp_path, "ok.yaml", "name: ok\nmoniker: countdown\nconfig: {n: 2}\n")
    write(tmp_path, "bad.yaml", "name: bad\nmoniker: nope\n")
    lib = ProfileLibrary(str(tmp_path), monikers=default_registry(), tool_names=lambda: set())
    lib.load()
    found = lib.lookup("ok")
    assert found["moniker"] == "countdown" and found["config"]["n"] == 2
    assert found["config"]["profile"]["name"] == "ok"
    with pytest.raises(KeyError, match="no moniker 'nope'"):
        lib.lookup("bad")
    with pytest.raises(KeyError, match="no profile"):
        lib.lookup("missing")


def test_a_python_observer_that_raises_or_hangs_is_recorded_and_skipped(monkeypatch):
    import asyncio

    from profiles import observers
    from profiles.model import Observer

    async def hangs(facts, args):
        await asyncio.sleep(3600)

    def raises(facts, args):
        raise RuntimeError("bad plugin")

    def notes(facts, args):
        return {"note": f"seen {args['what']}"}

    monkeypatch.setattr(observers, "observer_plugins", lambda: {"hangs": hangs, "raises": raises, "notes": notes})
    monkeypatch.setattr(observers, "TIMEOUT_S", 0.05)
    f = facts()
    run = lambda name, **w: asyncio.run(observers.evaluate(
        Observer.model_validate({"name": name, "when": "after_step", "python": name, "with": w}), f, {}))
    assert "TimeoutError" in run("hangs")["error"]
    assert run("raises") == {"name": "raises", "fired": False, "error": "RuntimeError: bad plugin"}
    assert run("notes", what="x") == {"name": "notes", "fired": True, "action": "note", "text": "seen x"}


def test_what_a_profile_counts_across_steps_survives_a_restart():
    """steps_without_tools and the ``once`` observers that fired are in each
    step's record; a session loaded again (restart, takeover) reads them back
    from its newest step instead of counting from zero and firing again."""
    import asyncio
    from types import SimpleNamespace

    record = {"name": "p", "observers": [
        {"name": "quiet", "when": "after_step", "if": {"no_tool_calls_for": 3}, "then": {"note": "use a tool"}},
        {"name": "hello", "when": "after_step", "once": True, "if": {"iteration_at_least": 1},
         "then": {"note": "hi"}}]}
    rows = {}

    class Persist:
        async def step_at(self, session_id, iteration):
            return rows.get(iteration)

    def agent(iteration):
        return SimpleNamespace(session_id="s1", agent_id="a1", iteration=iteration, persist=Persist(), state={},
                               usage=None, status="running", status_reason=None, task_text="t", extra={},
                               config=SimpleNamespace(tools=[]), peek_guidance=lambda: [])

    def step(hooks_, iteration):
        out = SimpleNamespace(state={}, text="no tools", done=False)
        rows[iteration] = {"iteration": iteration, "observers": asyncio.run(
            hooks_.after_step(agent(iteration - 1), iteration, out, calls=[]))}
        return {o["name"] for o in rows[iteration]["observers"]["after"] if o.get("fired")}

    first = hooks.SessionHooks(record)
    assert step(first, 1) == {"hello"}
    assert step(first, 2) == set()
    assert rows[2]["observers"]["counters"] == {"steps_without_tools": 2, "fired_once": ["hello"]}

    restarted = hooks.SessionHooks(record)  # the worker died after step 2
    assert step(restarted, 3) == {"quiet"}  # third step in a row without tools; hello does not fire again
    assert rows[3]["observers"]["counters"]["steps_without_tools"] == 3

    unknown = hooks.SessionHooks(record)  # a step row written before counters existed: start from zero
    rows[3] = {"iteration": 3, "observers": {"before": [], "after": [], "flow": None}}
    assert step(unknown, 4) == {"hello"}
