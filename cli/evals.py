"""``agentsvc replay``, ``agentsvc diff`` and ``agentsvc eval create|list|run|show``:
experiments on the record (README, "Replay, diff and evals").

\b
    agentsvc replay $SESSION --config '{"llm": {"model": "gpt-4o"}}' --until-finished
    agentsvc diff $REPLAY --against $SESSION
    agentsvc eval create smoke --session $S1 --session $S2
    agentsvc eval create researcher-done -q "invoice" --moniker baml --from-iteration 0
    agentsvc eval run $SET --profile researcher --scorer final_equal --scorer llm_judge --wait
    agentsvc eval show $SET
"""
import json
import sys
import time

import click

from domain.statuses import SESSION_FINISHED
from cli import render, render_evals
from cli.client import FAILED, TIMEOUT, ApiFailure, Client
from cli.options import parse_config, remote

TOOLS = ["recorded", "live", "recorded_then_live"]


def read_json_object(value: str | None, option: str) -> dict | None:
    """A JSON object given inline or as @FILE; None when not given."""
    if not value:
        return None
    text = open(value[1:]).read() if value.startswith("@") else value
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=option) from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object", param_hint=option)
    return parsed


def overrides(config_json, settings, profile, moniker, tools) -> dict:
    """What a replay or a run changes, only the parts given."""
    body: dict = {"tools": tools}
    config = parse_config(config_json, settings, None, None)
    if config:
        body["config"] = config
    if profile:
        body["profile"] = profile
    if moniker:
        body["moniker"] = moniker
    return body


def override_options(command):
    """--config, --set, --profile, --moniker, --tools: how a replay or run differs from the recording."""
    for option in reversed([
        click.option("--config", "config_json", metavar="JSON|@FILE",
                     help="config overrides as a JSON object (e.g. another llm)"),
        click.option("-s", "--set", "settings", multiple=True, metavar="KEY=VALUE",
                     help="one config override (the value is parsed as JSON when it is JSON); repeatable"),
        click.option("--profile", help="run under this profile instead"),
        click.option("--moniker", help="run this moniker instead"),
        click.option("--tools", type=click.Choice(TOOLS), default="recorded", show_default=True,
                     help="recorded: serve recorded tool results, stop at a divergence; live: run tools; "
                          "recorded_then_live: serve recorded results, run live after a divergence"),
    ]):
        command = option(command)
    return command


# ---- replay and diff ---------------------------------------------------------------------

@click.command()
@click.argument("ident", metavar="ID")
@click.option("--from-iteration", type=click.IntRange(0), help="start from the state before this step (default 0)")
@click.option("--to-iteration", type=click.IntRange(0), help="stop after this step")
@override_options
@click.option("--session-id", help="choose the replay's session id (repeating it creates nothing)")
@click.option("--wait/--no-wait", default=True, show_default=True, help="wait until the replay is created")
@click.option("--until-finished", is_flag=True, help="wait until the replay session ends, and show how")
@click.option("--timeout", default=600.0, show_default=True, help="seconds to wait")
@remote
def replay(api: Client, as_json, ident, from_iteration, to_iteration, config_json, settings, profile, moniker, tools,
           session_id, wait, until_finished, timeout):
    """Replay a recorded session (ID: a session, or an agent's latest session) as a
    new session of the same agent, with recorded tool results served."""
    source = api.resolve(ident)
    body = overrides(config_json, settings, profile, moniker, tools)
    for key, value in (("from_iteration", from_iteration), ("to_iteration", to_iteration), ("session_id", session_id)):
        if value is not None:
            body[key] = value
    accepted = api.replay(source["session_id"], body)
    action = api.wait_action(accepted["action_id"], timeout) if (wait or until_finished) and \
        accepted.get("action_id") else None
    result = {**accepted, **({"status": action["status"], "error": action.get("error")} if action else {})}
    if until_finished and (not action or action["status"] != "failed"):
        result["session"] = wait_session(api, accepted["session_id"], timeout)
    if as_json:
        render.as_json(result)
    else:
        render_evals.replay(result)
        if result.get("error"):
            render.err.print(f"replay failed: {result['error']}", markup=False)
    if action and action["status"] == "failed":
        sys.exit(FAILED)


def wait_session(api: Client, session_id: str, timeout_s: float) -> dict:
    """Poll a session until it ended (done, stopped, error)."""
    deadline, pause = time.monotonic() + timeout_s, 0.1
    while True:
        snapshot = api.session(session_id)
        if snapshot.get("status") in SESSION_FINISHED:
            return snapshot
        if time.monotonic() > deadline:
            raise ApiFailure(TIMEOUT, "timeout", f"session {session_id} still {snapshot.get('status')} "
                                                 f"after {timeout_s}s")
        time.sleep(pause)
        pause = min(pause * 1.5, 1.0)


@click.command()
@click.argument("ident", metavar="ID")
@click.option("--against", required=True, metavar="ID", help="the session to compare with (same lineage): side a")
@click.option("--from-iteration", type=click.IntRange(0), help="the first iteration compared")
@click.option("-n", "--limit", type=click.IntRange(1, 2000), help="iterations compared at most (default 1000)")
@click.option("--changed", is_flag=True, help="show only the iterations that differ")
@remote
def diff(api: Client, as_json, ident, against, from_iteration, limit, changed):
    """Compare two sessions of one lineage step by step: ID (side b, e.g. a replay)
    against another (side a, e.g. its source)."""
    found = api.diff(ident, against, from_iteration=from_iteration, limit=limit)
    render.as_json(found) if as_json else render_evals.diff(found, only_changed=changed)


# ---- eval sets and runs ------------------------------------------------------------------

@click.group("eval")
def eval_group():
    """Eval sets and runs: replay a frozen set of sessions under new settings and score each replay."""


@eval_group.command("create")
@click.argument("name")
@click.option("--session", "session_ids", multiple=True, metavar="ID", help="a session of the set; repeatable")
@click.option("-q", "--search", "query", metavar="WORDS", help="the set is the sessions this search finds")
@click.option("--kind", help="search: comma-separated step, message, tool_call, summary")
@click.option("--status", help="search: the rows' status")
@click.option("--moniker", help="search: only sessions running this moniker")
@click.option("--agent", "agent_id", help="search: only this agent's")
@click.option("--since", help="search: ISO-8601, rows created at or after it")
@click.option("--until", help="search: ISO-8601, rows created before it")
@click.option("--limit", type=click.IntRange(1, 200), help="search: at most this many hits")
@click.option("--from-iteration", type=click.IntRange(0), help="replays start from this step (default 0)")
@remote
def eval_create(api: Client, as_json, name, session_ids, query, kind, status, moniker, agent_id, since, until, limit,
                from_iteration):
    """Freeze a named set of sessions: --session ID... or a search (-q WORDS and filters)."""
    filters = {"kind": kind, "status": status, "moniker": moniker, "agent_id": agent_id, "since": since,
               "until": until, "limit": limit}
    if bool(session_ids) == bool(query):
        raise click.UsageError("give --session ID (repeatable) or -q/--search WORDS, not both")
    if session_ids and any(v is not None for v in filters.values()):
        raise click.UsageError("search filters go with -q/--search")
    body: dict = {"name": name}
    if session_ids:
        body["session_ids"] = list(session_ids)
    else:
        body["search"] = {"q": query, **{k: v for k, v in filters.items() if v is not None}}
    if from_iteration is not None:
        body["from_iteration"] = from_iteration
    created = api.create_evalset(body)
    render.as_json(created) if as_json else render_evals.evalset(created)


@eval_group.command("list")
@click.option("-n", "--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@remote
def eval_list(api: Client, as_json, limit):
    """The eval sets, newest first."""
    found = api.evalsets(limit=limit)
    render.as_json(found) if as_json else render_evals.evalsets(found)


@eval_group.command("run")
@click.argument("evalset_id", metavar="EVALSET_ID")
@override_options
@click.option("--scorer", "scorers", multiple=True, required=True, metavar="NAME",
              help="a scorer (final_equal, final_contains, final_json_equal, tool_sequence_equal, divergence_step, "
                   "steps, tokens, cost, errors, llm_judge, or a plugin's); repeatable")
@click.option("--to-iteration", type=click.IntRange(0), help="stop each replay after this step")
@click.option("--concurrency", type=click.IntRange(1), help="replays at once (default 4)")
@click.option("--judge", "judge_json", metavar="JSON|@FILE",
              help='llm_judge settings: {"llm": {...}, "criteria": "...", "pass_threshold": 0.5}')
@click.option("--wait", is_flag=True, help="wait until the run is done, then show it")
@click.option("--timeout", default=3600.0, show_default=True, help="seconds to wait")
@remote
def eval_run(api: Client, as_json, evalset_id, config_json, settings, profile, moniker, tools, scorers, to_iteration,
             concurrency, judge_json, wait, timeout):
    """Replay every session of a set under the given overrides and score each replay."""
    body = {**overrides(config_json, settings, profile, moniker, tools), "scorers": list(scorers)}
    for key, value in (("to_iteration", to_iteration), ("concurrency", concurrency)):
        if value is not None:
            body[key] = value
    judge = read_json_object(judge_json, "--judge")
    if judge is not None:
        body["judge"] = judge
    started = api.start_eval_run(evalset_id, body)
    if not wait:
        render.as_json(started) if as_json else render_evals.run_started(started)
        return
    finished = api.wait_eval_run(started["id"], timeout)
    render.as_json(finished) if as_json else render_evals.run(finished)
    if finished.get("status") == "failed":
        sys.exit(FAILED)


@eval_group.command("show")
@click.argument("evalset_id", metavar="EVALSET_ID")
@click.option("--run", "run_id", metavar="RUN_ID", help="one run of the set, with every session's scores")
@remote
def eval_show(api: Client, as_json, evalset_id, run_id):
    """A set's runs side by side: mean and median per scorer, a row per session,
    and which sessions got better or worse."""
    if run_id:
        found = api.eval_run(run_id)
        render.as_json(found) if as_json else render_evals.run(found)
        return
    found = api.eval_runs(evalset_id)
    if as_json:
        render.as_json(found)
        return
    render_evals.evalset(found["evalset"])
    render_evals.comparison(found)


COMMANDS = (replay, diff, eval_group)
