"""agentsvc: run the service, or drive a running one over HTTP.

\b
    agentsvc                          # run the service (same as `agentsvc serve`)
    agentsvc create joke "cats" --interval 2
    agentsvc create --profile planner "move the wiki"
    agentsvc profiles
    agentsvc endpoints                # the model endpoints a config's llm.endpoint may name
    agentsvc list --status running
    agentsvc tail -f <session or agent id>
    agentsvc pause <session or agent id>
    agentsvc waiting                  # open questions and approvals
    agentsvc answer <session or agent id> "Paris"
    agentsvc replay <session id> --config '{"llm": {"model": "gpt-4o"}}'
    agentsvc diff <replay id> --against <session id>
    agentsvc eval create|list|run|show   # eval sets and runs

Commands that talk to a service find it at --url (AGENTSVC_URL, default
http://127.0.0.1:8765) and send ``AGENTSVC_API_TOKEN`` as the bearer token.
Exit codes: 0 ok, 1 the action failed, 2 bad usage, 3 not found, 4 rejected by
the service (invalid input, unauthorized, conflict), 5 service unreachable or
erring, 6 timed out waiting.
"""
from domain.statuses import SESSION_FINISHED, StepStatus
import contextlib
import json
import sys

import click

from cli import evals, render, tokens
from cli.client import FAILED, NOT_FOUND, UNREACHABLE, ApiFailure, Client
from cli.options import parse_config, remote
from cli.sse import follow as follow_stream

SERVE_HELP = ("-h", "--help", "--version")


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, help=__doc__)
@click.version_option(package_name="agentsvc")
def cli():
    pass


# ---- the service -------------------------------------------------------------

@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
             add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(args):
    """Run the service: agents.py and app.py (options: agentsvc serve --help)."""
    import serve as launcher
    sys.exit(launcher.main(list(args)))


# ---- agents and sessions -------------------------------------------------------

@cli.command()
@click.argument("moniker", required=False)
@click.argument("task", required=False, default="")
@click.option("--profile", help="start from this profile (agentsvc profiles) instead of a MONIKER; "
                                "the one argument is then the TASK")
@click.option("--config", "config_json", metavar="JSON|@FILE", help="session config as a JSON object")
@click.option("-s", "--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="one config key (the value is parsed as JSON when it is JSON); repeatable")
@click.option("--interval", type=float, help="seconds between steps (config interval_s)")
@click.option("--max-steps", type=int, help="stop after this many steps (config max_steps)")
@click.option("--name", help="a name for the agent")
@click.option("--conversation", help="a conversation id the agent joins")
@click.option("--agent-id", help="reuse or choose the agent id")
@click.option("--session-id", help="choose the session id (repeating a create with it creates nothing)")
@click.option("--wait/--no-wait", default=True, show_default=True, help="wait until the create is applied")
@click.option("--timeout", default=60.0, show_default=True, help="seconds to wait")
@remote
def create(api, as_json, moniker, task, profile, config_json, settings, interval, max_steps, name, conversation,
           agent_id, session_id, wait, timeout):
    """Start an agent session running MONIKER on TASK (or, with --profile, a profile on TASK)."""
    config = parse_config(config_json, settings, interval, max_steps)
    if profile:
        if moniker and task:
            raise click.UsageError("with --profile, give only the TASK")
        body = {"profile": profile, "task": moniker or "", "config": config}
    elif not moniker:
        raise click.UsageError("give a MONIKER (agentsvc create joke cats) or --profile NAME")
    else:
        body = {"moniker": moniker, "task": task, "config": config}
    for key, value in (("name", name), ("conversation_id", conversation), ("agent_id", agent_id),
                       ("session_id", session_id)):
        if value:
            body[key] = value
    accepted = api.create(body)
    action = api.wait_action(accepted["action_id"], timeout) if wait and accepted.get("action_id") else None
    result = {**accepted, **({"status": action["status"], "error": action.get("error")} if action else {})}
    if as_json:
        render.as_json(result)
    else:
        render.table(None, ["agent", "session", "action", "status"],
                     [[result["agent_id"], result["session_id"], result.get("action_id"), result["status"]]])
        if result.get("error"):
            render.err.print(f"create failed: {result['error']}", markup=False)
    if action and action["status"] == "failed":
        sys.exit(FAILED)


@cli.command("profiles")
@click.argument("action", required=False, type=click.Choice(["reload"]))
@remote
def profiles(api, as_json, action):
    """The loaded profiles, with their load errors; `reload` re-reads the directory."""
    listed = api.post("/api/profiles/reload") if action == "reload" else api.get("/api/profiles")
    if as_json:
        render.as_json(listed)
        return
    render.table(None, ["profile", "ok", "moniker", "hash", "description / errors"],
                 [[p["name"], "yes" if p["ok"] else "NO", p.get("moniker"), p.get("hash"),
                   "; ".join(f"{e['file']}:{e['line'] or '?'} {e['field'] or ''} {e['message']}".replace("  ", " ")
                             for e in p["errors"]) or p.get("description") or ""]
                  for p in listed["profiles"]])


@cli.command("endpoints")
@remote
def endpoints(api, as_json):
    """The operator's model endpoints: what a config's llm.endpoint may name, and the models each serves."""
    listed = api.get("/api/endpoints")
    if as_json:
        render.as_json(listed)
        return
    render.table(None, ["endpoint", "models", "default model", "structured"],
                 [[e["name"], "any" if e["models"] == "*" else ", ".join(e["models"]), e["default_model"],
                   e["structured"]] for e in listed["endpoints"]])


@cli.command("list")
@click.option("--status", help="only agents whose latest session is in this status")
@click.option("--moniker", help="only agents whose latest session runs this moniker")
@click.option("-q", "--search", "text", help="text in the name, task or ids")
@click.option("--sort", type=click.Choice(["newest", "oldest", "updated", "name"]), default="newest",
              show_default=True)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--offset", default=0, show_default=True, type=click.IntRange(0))
@remote
def list_agents(api, as_json, status, moniker, text, sort, limit, offset):
    """Agents with their latest session (filtered, sorted and paged by the service)."""
    page = api.agents(limit=limit, offset=offset, status=status, moniker=moniker, q=text, sort=sort)
    if as_json:
        render.as_json({**page, "limit": limit, "offset": offset})
        return
    render.sessions(page["agents"])
    shown = len(page["agents"])
    render.out.print(f"{offset + 1 if shown else 0}–{offset + shown} of {page['total']}", markup=False)


@cli.command()
@click.argument("ident", metavar="ID")
@remote
def show(api, as_json, ident):
    """One session (by session id, or an agent id: its latest session)."""
    snapshot = api.resolve(ident)
    render.as_json(snapshot) if as_json else render.session(snapshot)


@cli.command()
@click.argument("ident", metavar="ID")
@click.option("-n", "--limit", default=20, show_default=True, type=click.IntRange(1, 1000),
              help="how many steps (the newest, unless --from)")
@click.option("--from", "start", type=click.IntRange(0), help="the first iteration to show")
@click.option("--status", type=click.Choice([s.value for s in StepStatus]))
@remote
def steps(api, as_json, ident, limit, start, status):
    """A session's steps (session id, or an agent id: its latest session)."""
    snapshot = api.resolve(ident)
    rows = api.steps(snapshot["session_id"], min_iteration=start, status=status, limit=limit,
                     newest=start is None and not status)
    render.as_json({"session_id": snapshot["session_id"], "steps": rows}) if as_json else render.steps(rows)


# ---- following live ----------------------------------------------------------------

def rooms_for(api: Client, ident: str) -> list[str]:
    """``session:…``, ``agent:…``, ``conversation:…`` as given; a bare id is looked up."""
    kind, sep, _ = ident.partition(":")
    if sep and kind in ("session", "agent", "conversation"):
        return [ident]
    for kind, lookup in (("session", api.session), ("agent", api.agent), ("conversation", api.conversation)):
        try:
            lookup(ident)
            return [f"{kind}:{ident}"]
        except ApiFailure as exc:
            if exc.exit_code != NOT_FOUND:
                raise
    raise ApiFailure(NOT_FOUND, "not_found", f"no session, agent or conversation {ident}", 404)


@cli.command()
@click.argument("idents", metavar="ID...", nargs=-1, required=True)
@click.option("-f", "--follow", is_flag=True, help="keep following live events (resumes after disconnects)")
@click.option("-n", "--lines", default=10, show_default=True, type=click.IntRange(0),
              help="steps of each session recorded before now to show first")
@click.option("--all", "from_start", is_flag=True, help="everything recorded, not only the last --lines steps")
@click.option("--after", metavar="CURSOR", help="resume after this event id (a cursor of /api/stream)")
@click.option("--until-finished", is_flag=True, help="with -f: stop once every followed session is done, "
                                                     "stopped or in error")
@remote
def tail(api, as_json, idents, follow, lines, from_start, after, until_finished):
    """Events of sessions, agents or conversations: steps, state, actions, messages,
    and with -f the model output of steps being generated.

    Each ID is a session, agent or conversation id, or `session:ID`, `agent:ID`,
    `conversation:ID`."""
    rooms = [room for ident in idents for room in rooms_for(api, ident)]
    states: dict[str, str] = {}

    def note(reason: str):
        render.err.print(f"agentsvc: {reason}", markup=False)

    with contextlib.nullcontext() if as_json else render.TailView() as view:
        for event in follow_stream(api, rooms, follow=follow, tail=None if from_start else lines, cursor=after,
                                   on_disconnect=note):
            if as_json:
                cursor = {} if event.id is None else {"cursor": event.id}  # a step_delta has none
                render.as_json({"event": event.event, **cursor, **event.data})
            else:
                view.show(event.event, event.data)
            if event.event == "agent_state":
                states[event.data["id"]] = event.data["data"].get("status")
                if until_finished and states and all(s in SESSION_FINISHED for s in states.values()):
                    return


# ---- control ------------------------------------------------------------------------

def apply(api: Client, as_json: bool, ident: str, verb: str, wait: bool, timeout: float, **body) -> None:
    snapshot = api.resolve(ident)
    accepted = api.control(snapshot, verb, **body)
    outcome(api, as_json, accepted["action_id"], wait, timeout, f"{verb} {{status}} (action {{id}}, "
            f"session {accepted['session_id']})")


def outcome(api: Client, as_json: bool, action_id: str, wait: bool, timeout: float, line: str) -> None:
    """Wait for an accepted action (unless --no-wait), print what became of it, exit 1 if it failed.
    ``line`` is a format string over the action's fields."""
    action = api.wait_action(action_id, timeout) if wait else api.action(action_id)
    if as_json:
        render.as_json(action)
    else:
        text = line.format(status=action["status"], id=action["id"])
        if action.get("error"):
            text += f": {action['error']}"
        (render.err if action["status"] == "failed" else render.out).print(text, markup=False)
    if action["status"] == "failed":
        sys.exit(FAILED)


def control_options(command):
    command = click.option("--timeout", default=60.0, show_default=True, help="seconds to wait")(command)
    return click.option("--wait/--no-wait", default=True, show_default=True,
                        help="wait until the action is applied, and exit 1 if it failed")(command)


@cli.command()
@click.argument("ident", metavar="ID")
@control_options
@remote
def pause(api, as_json, ident, wait, timeout):
    """Pause a session at its next step boundary."""
    apply(api, as_json, ident, "pause", wait, timeout)


@cli.command()
@click.argument("ident", metavar="ID")
@control_options
@remote
def resume(api, as_json, ident, wait, timeout):
    """Resume a paused session (or retry the failed step of one in error)."""
    apply(api, as_json, ident, "resume", wait, timeout)


@cli.command()
@click.argument("ident", metavar="ID")
@click.argument("guidance")
@control_options
@remote
def interrupt(api, as_json, ident, guidance, wait, timeout):
    """Give a session GUIDANCE for its next step."""
    apply(api, as_json, ident, "interrupt", wait, timeout, guidance=guidance)


@cli.command()
@click.argument("ident", metavar="ID")
@control_options
@remote
def destroy(api, as_json, ident, wait, timeout):
    """Stop a session for good (a hung step is cancelled after a grace period)."""
    apply(api, as_json, ident, "destroy", wait, timeout)


@cli.command()
@click.argument("words", nargs=-1, required=True)
@click.option("--kind", type=click.Choice(["step", "message", "tool_call", "summary"]), multiple=True,
              help="only these kinds of rows (repeatable)")
@click.option("--agent", "agent_id", help="only this agent's rows")
@click.option("--session", "session_id", help="only this session's rows")
@click.option("--conversation", "conversation_id", help="only this conversation's rows")
@click.option("--since", help="ISO-8601: rows created at or after it")
@click.option("-n", "--limit", default=20, show_default=True, type=click.IntRange(1, 200))
@remote
def search(api, as_json, words, kind, agent_id, session_id, conversation_id, since, limit):
    """Search everything agents did: steps, messages, tool calls and summaries."""
    found = api.search(" ".join(words), kind=",".join(kind) or None, agent_id=agent_id, session_id=session_id,
                       conversation_id=conversation_id, since=since, limit=limit)
    if as_json:
        render.as_json(found)
        return
    render.table(f"{len(found['hits'])} hits ({found['mode']})", ["kind", "session", "iteration", "when", "snippet"],
                 [[h["kind"], h.get("session_id") or h.get("conversation_id") or "", h.get("iteration"),
                   (h.get("created_at") or "")[:19], render.short(h["snippet"], 80)] for h in found["hits"]])


def decide(api: Client, as_json: bool, tool_call_id: str, verb: str, wait: bool, timeout: float, **body) -> None:
    """Approve, deny or post the result of a tool call, then report what became of it."""
    accepted = api.decide_tool_call(tool_call_id, verb, **body)
    outcome(api, as_json, accepted["action_id"], wait, timeout, f"{verb} {{status}} (action {{id}}, "
            f"tool call {tool_call_id})")


@cli.command()
@click.argument("tool_call_id", metavar="TOOL_CALL_ID")
@control_options
@remote
def approve(api, as_json, tool_call_id, wait, timeout):
    """Approve a tool call that waits for approval: the tool runs once."""
    decide(api, as_json, tool_call_id, "approve", wait, timeout)


@cli.command()
@click.argument("tool_call_id", metavar="TOOL_CALL_ID")
@click.option("--reason", help="what the model is told")
@control_options
@remote
def deny(api, as_json, tool_call_id, reason, wait, timeout):
    """Deny a tool call that waits for approval: it is not run, and the model is told."""
    decide(api, as_json, tool_call_id, "deny", wait, timeout, **({"reason": reason} if reason else {}))


@cli.command("result")
@click.argument("tool_call_id", metavar="TOOL_CALL_ID")
@click.argument("value", metavar="JSON")
@click.option("--error", "is_error", is_flag=True, help="VALUE is an error message, not a result")
@control_options
@remote
def post_result(api, as_json, tool_call_id, value, is_error, wait, timeout):
    """Post the result of an external tool call (JSON; plain text is taken as a string)."""
    if is_error:
        body = {"error": value}
    else:
        try:
            body = {"result": json.loads(value)}
        except ValueError:
            body = {"result": value}
    decide(api, as_json, tool_call_id, "result", wait, timeout, **body)


@cli.command()
@click.argument("conversation")
@click.argument("text")
@click.option("--user", "user_id", help="who speaks (default 'user')")
@remote
def say(api, as_json, conversation, text, user_id):
    """Post TEXT to a conversation; every agent session in it gets it as guidance."""
    posted = api.say(conversation, text, user_id)
    if as_json:
        render.as_json(posted)
    elif posted.get("answer"):
        render.out.print(f"message {posted['message']['message_id']} answered question "
                         f"{posted['answer']['tool_call_id']} (action {posted['answer']['action_id']})", markup=False)
    else:
        render.out.print(f"message {posted['message']['message_id']} delivered to "
                         f"{len(posted['deliveries'])} sessions", markup=False)


# ---- questions (ask_user) and everything waiting on a person ----------------------

@cli.command()
@click.argument("ident", metavar="ID")
@click.argument("text")
@click.option("--question", "tool_call_id", help="the question's tool call id (default: the oldest open one)")
@click.option("--user", "user_id", help="who answers (default 'user')")
@control_options
@remote
def answer(api, as_json, ident, text, tool_call_id, user_id, wait, timeout):
    """Answer the open ask_user question of a session (or an agent's latest session)."""
    snapshot = api.resolve(ident)
    accepted = api.answer(snapshot["session_id"], text, tool_call_id, user_id)
    outcome(api, as_json, accepted["action_id"], wait, timeout, f"answer {{status}} (action {{id}}, "
            f"question {accepted['tool_call_id']}, session {accepted['session_id']})")


@cli.command()
@click.option("--kind", type=click.Choice(["question", "approval", "result"]), help="only this kind")
@click.option("--agent", "agent_id", help="only this agent's")
@click.option("--session", "session_id", help="only this session's")
@click.option("-n", "--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--offset", default=0, show_default=True, type=click.IntRange(0))
@remote
def waiting(api, as_json, kind, agent_id, session_id, limit, offset):
    """Every open question and approval across all agents, oldest first."""
    found = api.waiting(kind=kind, agent_id=agent_id, session_id=session_id, limit=limit, offset=offset)
    if as_json:
        render.as_json(found)
        return
    rows = [[w["kind"], w["tool_call_id"], w["session_id"], (w.get("session") or {}).get("name") or "",
             (w["created_at"] or "")[:19],
             render.short(w.get("question") or f"{w['tool']} {json.dumps(w.get('args'))}", 60)]
            for w in found["waiting"]]
    render.table(f"{found['total']} waiting", ["kind", "tool call", "session", "name", "since", "what"], rows)


for _command in [*evals.COMMANDS, *tokens.COMMANDS]:  # replay, diff, eval (cli/evals.py); token, whoami
    cli.add_command(_command)


def main(argv=None) -> int:
    """No arguments, or options only (`agentsvc --port 9000`): run the service as
    before; otherwise a command."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in SERVE_HELP):
        import serve as launcher
        return launcher.main(argv)
    try:
        cli.main(args=argv, prog_name="agentsvc", standalone_mode=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else UNREACHABLE)
    return 0
