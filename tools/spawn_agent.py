"""The built-in tools ``spawn_agent`` and ``message_agent``: an agent starts
sub-agents and sends them follow-ups (the runtime side, delivering each
child's outcome to its parent exactly once, is runtime/session/child_sessions.py).

``spawn_agent {task, moniker | profile, config?, name?, wait?}`` appends a
``create`` action for a child session that names its parent; nothing is run
here.  The child's session id is the tool call's id, so the call is
idempotent: run again after a crash, it finds its create already queued and
queues nothing new.  With ``wait: false`` (default) the call ends at once with
the child's ids and the outcome arrives later as a ``child_result`` inbox
item; with ``wait: true`` the call stays ``waiting_result`` (no step, so no
LLM call, meanwhile) and its result is the child's.

Limits: a tree is at most ``max_depth`` deep (the root's config, default 3; a
child may lower it) and a session spawns at most ``max_children`` (its config,
default 20).  A child never has more than its parent
(domain/session_config.py ``within_parent``): its tools are among the
parent's, the parent's approvals apply to it, and an endpoint or model it
names is the parent's.  ``config.inherit: {"transcript": N}`` gives the child's first
step the parent's last N step texts and its conversation's messages
(a ``parent_context`` inbox item).

``message_agent {session_id, text}`` appends a ``child_message`` action for
one of the caller's own children: a running child gets it at its next step,
a finished one (``done``) is reactivated.  Its item id comes from the call
id, so a call run again after a crash delivers nothing twice.
"""
import asyncio
import weakref
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from ulid import ULID

from domain.session_config import ExceedsParent, SessionConfig, within_parent
from tools.tool import Deferred, Tool, ToolContext

SPAWN = "spawn_agent"
MESSAGE = "message_agent"
CONTEXT_MESSAGES = 50  # of the parent's conversation, with inherit.transcript
NO_PROFILES = ("profiles are not available in this service (no profile loader is installed); "
               "name a moniker instead")


class SpawnArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, max_length=20_000, description="what the sub-agent should do")
    moniker: str | None = Field(None, min_length=1, max_length=128, description="its step function (GET /api/monikers)")
    profile: str | None = Field(None, min_length=1, max_length=128, description="or a profile, where profiles exist")
    config: dict = Field(default_factory=dict, description="its session config (tools, limits, inherit...)")
    name: str | None = Field(None, min_length=1, max_length=200, description="a name for people and for you")
    wait: bool = Field(False, description="true: this call ends with the sub-agent's result")

    @model_validator(mode="after")
    def _one_kind(self) -> "SpawnArgs":
        if (self.moniker is None) == (self.profile is None):
            raise ValueError("give exactly one of moniker or profile")
        return self


class MessageArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$",
                                   description="the sub-agent's session (spawn_agent returned it)")
    name: str | None = Field(None, min_length=1, max_length=200,
                             description="or the name you gave it (the newest of your sub-agents of that name)")
    text: str = Field(min_length=1, max_length=20_000)

    @model_validator(mode="after")
    def _one_target(self) -> "MessageArgs":
        if (self.session_id is None) == (self.name is None):
            raise ValueError("give exactly one of session_id or name")
        return self


class SpawnRefused(ValueError):
    """A spawn that breaks a limit or names something that does not exist."""


def child_config(monikers, moniker_name: str, config: dict) -> dict:
    """The child's config checked like a create's (runner keys, then the
    moniker's own), so a bad key is this call's error, not a failed child."""
    if moniker_name not in monikers:
        raise SpawnRefused(f"no moniker {moniker_name!r}; installed: {monikers.names()}")
    try:
        checked = SessionConfig.model_validate(config)
    except ValidationError as exc:
        raise SpawnRefused(f"invalid config: {_problems(exc)}") from None
    runner = checked.model_dump(exclude=set(checked.model_extra or {}))
    extra = dict(checked.model_extra or {})
    model = monikers.get(moniker_name).config_model
    if model is None:
        return {**runner, **extra}
    unknown = [k for k in extra if k not in model.model_fields]
    if unknown:
        raise SpawnRefused(f"invalid config: unknown key {unknown[0]!r} for moniker {moniker_name!r}")
    try:
        own = model.model_validate(extra)
    except ValidationError as exc:
        raise SpawnRefused(f"invalid config: {_problems(exc)}") from None
    return {**runner, **own.model_dump(mode="json", include=set(extra))}


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '(config)'}: {e['msg']}" for e in exc.errors()[:3])


def effective_max_depth(parent: dict) -> int:
    link = parent.get("subagent") if isinstance(parent.get("subagent"), dict) else {}
    own = (parent.get("config") or {}).get("max_depth", 3)
    inherited = link.get("max_depth")
    return min(own, inherited) if inherited is not None else own


def parent_context(store, parent: dict, child_session_id: str, transcript: int) -> dict:
    """The ``parent_context`` inbox item: the parent's last steps and its conversation."""
    steps = store.steps.search(session_id=parent["session_id"], newest_first=True, limit=transcript,
                               last_iteration=parent.get("iteration"))[::-1]
    step_texts = [{"iteration": s["iteration"], "text": s.get("text")} for s in steps if s.get("text")]
    messages = []
    if parent.get("conversation_id"):
        messages = [{"sender": m.get("user_id") or m.get("session_id") or m.get("sender_type"), "text": m.get("text")}
                    for m in store.conversations.last_messages(parent["conversation_id"], CONTEXT_MESSAGES)]
    lines = [f"Your parent agent ({parent.get('name') or parent['session_id']}) was working on: "
             f"{parent.get('task') or '(no task)'}"]
    lines += [f"[parent step {s['iteration']}] {s['text']}" for s in step_texts]
    lines += [f"[conversation] {m['sender']}: {m['text']}" for m in messages]
    return {"action_id": f"parent-context-{child_session_id}", "kind": "parent_context", "text": "\n".join(lines),
            "data": {"steps": step_texts, "messages": messages},
            "source": {"kind": "parent", "agent_id": parent["agent_id"], "session_id": parent["session_id"]}}


def build(store, monikers, profiles: Callable[[str, dict], dict] | None = None) -> list[Tool]:
    """Both tools, bound to the service's store and monikers.  ``profiles``:
    a profile loader ``(name, config overrides) -> {moniker, config}`` (agents.py
    wires the profile library's); KeyError for an unknown or broken profile,
    ValueError for an override it refuses.  Without one, ``profile`` is refused."""
    spawned: dict[str, set[str]] = {}  # parent -> children queued by this process, not yet in agent_state
    # One lock per parent: the calls of one step count each other's children.  One
    # lock for every session made a restart's backlog of parents spawn one at a time,
    # and the later calls ran out of their 60 s waiting (the kill loop, tests/kill_loop.py).
    # Weak: a parent's lock lives while a call of it holds or waits for it.
    locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def resolve(args: SpawnArgs) -> tuple[str, dict]:
        if args.profile is None:
            return args.moniker, dict(args.config)
        if profiles is None:
            raise SpawnRefused(NO_PROFILES)
        try:
            profile = profiles(args.profile, dict(args.config))
        except KeyError as exc:
            raise SpawnRefused(str(exc.args[0]) if exc.args else f"no profile {args.profile!r}") from None
        except ValueError as exc:
            raise SpawnRefused(f"profile {args.profile!r}: {exc}") from None
        return profile["moniker"], dict(profile.get("config") or {})

    def prepare(args: SpawnArgs, ctx: ToolContext) -> dict:
        session_id = ctx.tool_call_id
        existing = store.actions.find_create(session_id=session_id)
        if existing is not None:  # this call ran before (a crash): its child is queued already
            return {"agent_id": existing["agent_id"], "session_id": session_id, "name": args.name, "queued": False}
        parent = store.states.get(ctx.session_id)
        if parent is None:
            raise SpawnRefused(f"the calling session {ctx.session_id} is not recorded yet")
        link = parent.get("subagent") if isinstance(parent.get("subagent"), dict) else {}
        depth, max_depth = int(link.get("depth") or 0) + 1, effective_max_depth(parent)
        if depth > max_depth:
            raise SpawnRefused(f"max_depth reached: a sub-agent here would be at depth {depth}, and this tree "
                               f"allows {max_depth} (config max_depth)")
        recorded = {c["session_id"] for c in store.states.children(ctx.session_id)}
        queued = spawned.setdefault(ctx.session_id, set())
        queued -= recorded  # created since: counted from the store now
        children = recorded | queued
        max_children = (parent.get("config") or {}).get("max_children", 20)
        if len(children) >= max_children:
            raise SpawnRefused(f"max_children reached: this session has {len(children)} sub-agents and may "
                               f"have {max_children} (config max_children)")
        moniker, config = resolve(args)
        if moniker not in monikers:
            raise SpawnRefused(f"no moniker {moniker!r}; installed: {monikers.names()}")
        config = child_config(monikers, moniker, config)  # first: a bad key is named as a create names it
        try:  # never more than the parent: its tools, its approvals, its model endpoint
            config = within_parent(parent.get("config") or {}, config)
        except ExceedsParent as exc:
            raise SpawnRefused(str(exc)) from None
        subagent = {"depth": depth, "max_depth": max_depth,
                    "root_session_id": parent.get("root_session_id") or ctx.session_id,
                    "spawned_by": ctx.tool_call_id, "on_parent_destroy": config.get("on_parent_destroy")}
        if args.wait:
            subagent.update(wait_call=ctx.tool_call_id, wait_generation=1)
        inbox = []
        transcript = (config.get("inherit") or {}).get("transcript") or 0
        if transcript:
            inbox.append(parent_context(store, parent, session_id, transcript))
        agent_id = str(ULID())
        payload = {"moniker": moniker, "task": args.task, "config": config, "parent_agent_id": ctx.agent_id,
                   "parent_session_id": ctx.session_id, "subagent": subagent, "inbox": inbox or None}
        if args.name:
            payload["name"] = args.name
        store.actions.enqueue("create", agent_id=agent_id, session_id=session_id, payload=payload)
        spawned.setdefault(ctx.session_id, set()).add(session_id)
        return {"agent_id": agent_id, "session_id": session_id, "name": args.name, "queued": True}

    async def spawn(args: SpawnArgs, ctx: ToolContext):
        lock = locks.get(ctx.session_id)
        if lock is None:
            lock = locks[ctx.session_id] = asyncio.Lock()
        async with lock:  # concurrent calls of one step count each other's children
            child = await asyncio.to_thread(prepare, args, ctx)
        ids = {"agent_id": child["agent_id"], "session_id": child["session_id"], "name": child["name"]}
        if args.wait:
            return Deferred({**ids, "status": "running"})
        return {**ids, "status": "started",
                "note": "its result will arrive in your inbox as a child_result item"}

    async def message(args: MessageArgs, ctx: ToolContext) -> dict:
        def find() -> dict:
            if args.name is not None:
                named = [c for c in store.states.children(ctx.session_id) if c.get("name") == args.name]
                if not named:
                    raise SpawnRefused(f"you have no sub-agent named {args.name!r}")
                return named[-1]
            child = store.states.get(args.session_id)
            if child is None or child.get("parent_session_id") != ctx.session_id:
                raise SpawnRefused(f"session {args.session_id} is not one of your sub-agents "
                                   "(spawn_agent returns their session ids)")
            return child

        def send() -> dict:
            child = find()
            if child["status"] == "stopped":
                raise SpawnRefused(f"sub-agent {child['session_id']} was stopped; it cannot take messages")
            store.actions.enqueue("child_message", agent_id=child["agent_id"], session_id=child["session_id"],
                                  payload={"key": f"msg-{ctx.tool_call_id}", "text": args.text,
                                           "source": {"kind": "parent", "agent_id": ctx.agent_id,
                                                      "session_id": ctx.session_id}})
            return {"session_id": child["session_id"], "agent_id": child["agent_id"], "status": "sent",
                    "child_status": child["status"],
                    "note": ("it was finished and is reactivated; " if child["status"] == "done" else "")
                            + "its next result will arrive in your inbox as a child_result item"}
        return await asyncio.to_thread(send)

    return [
        Tool(SPAWN, "Start a sub-agent on a task: {task, moniker, config?, name?, wait?}. wait=false (default) "
                    "returns its ids at once and its result arrives later in your inbox (kind child_result); "
                    "wait=true ends this call with its result.", spawn, SpawnArgs, timeout_s=60, idempotent=True,
             reusable=False),
        Tool(MESSAGE, "Send a follow-up to one of your sub-agents: {session_id or name, text}. A finished one is "
                      "reactivated; its next result arrives in your inbox.", message, MessageArgs, timeout_s=60,
             idempotent=True, reusable=False),
    ]
