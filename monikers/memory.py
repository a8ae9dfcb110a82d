"""The ``baml`` moniker's working memory: a short transcript of its recent steps.

A model remembers nothing between two calls.  Before this, each step saw only
the task, the ``state`` it wrote and the previous step's ``tool_results``; it
never saw its own previous text or calls, guidance was shown once, and a small
model called the same tool again every step (issue 39: 46 identical repeats in
one run).  So the moniker keeps, in the session's state under the reserved key
:data:`KEY`, what each recent step said and called and what the calls
returned, and shows it to the model as a few plain lines.

Why in the state: the state is persisted with every step by the runner, so
the memory survives a restart and a fork, and a replay rebuilds the same
prompts; the model never writes it (its ``state`` is read without this key,
and whatever it writes under the key is replaced).

Bounds: the newest :data:`STEPS` steps, each value cut to a few dozen
characters, and the whole transcript to :data:`CHARS` characters (the oldest
lines go first), so the prompt stays small for a small model.

Guidance stays in the prompt until a step has acted on it: a step that saw it
and finished (``done``) or called a tool, or :data:`GUIDANCE_STEPS` steps that
saw it; a newer guidance replaces it.

Answered calls: every call that ended ``success`` is remembered by its
:func:`call_key` (name and canonical JSON args); the runner does not run such a
call again (runtime/session/tool_runner.py), and a step that says ``done`` and
whose calls were all answered ones keeps its ``done`` (:func:`only_repeats`).
"""
import json

KEY = "_memory"
STEPS = 6  # steps in the transcript
CHARS = 1500  # the transcript's length in the prompt
ANSWERED = 32  # answered calls remembered
GUIDANCE_STEPS = 3  # steps that see a guidance before it is dropped unless acted on
VALUE_CHARS = 160


def call_key(name: str, args) -> str:
    """A call's identity: its name and its args as canonical JSON."""
    return name + " " + json.dumps(_plain(args or {}), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                   default=str)


def _plain(value):
    """Numbers by value: 2.0 and 2 are the same argument."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _cut(value, limit: int = VALUE_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def split(state: dict) -> tuple[dict, dict]:
    """The model's own state (without the memory) and the memory."""
    state = dict(state or {})
    memory = state.pop(KEY, None)
    if not isinstance(memory, dict):
        memory = {}
    return state, {"steps": list(memory.get("steps") or []), "answered": list(memory.get("answered") or []),
                   "guidance": memory.get("guidance"), "guidance_seen": int(memory.get("guidance_seen") or 0)}


def take_inputs(memory: dict, tool_results: list, guidance: str | None) -> dict:
    """The memory as this step sees it: the previous step's calls get their
    results; new guidance becomes the open one."""
    memory = {**memory, "steps": [dict(s) for s in memory["steps"]], "answered": list(memory["answered"])}
    results = [r.model_dump() if hasattr(r, "model_dump") else dict(r) for r in tool_results or []]
    if results and memory["steps"]:
        last = memory["steps"][-1]
        calls = last.get("calls") or []
        last["results"] = [{"name": r["name"], "status": r["status"],
                            "said": _cut(r.get("result") if r["status"] == "success" else r.get("error"))}
                           for r in results]
        for call, result in zip(calls, results):
            if result["status"] == "success" and call.get("name") == result["name"]:
                key = call_key(call["name"], call.get("args"))
                memory["answered"] = [a for a in memory["answered"] if a != key][-(ANSWERED - 1):] + [key]
    if guidance:
        memory["guidance"], memory["guidance_seen"] = guidance, 0
    return memory


def open_guidance(memory: dict) -> str | None:
    return memory.get("guidance")


def only_repeats(memory: dict, calls: list[dict]) -> bool:
    """Whether every call is one already answered in this session."""
    answered = set(memory["answered"])
    return bool(calls) and all(call_key(c["name"], c.get("args")) in answered for c in calls)


def after_step(memory: dict, step: str, text: str | None, calls: list[dict], done: bool) -> dict:
    """The memory to store with this step's state."""
    entry = {"step": step, "text": _cut(text) if text else None,
             "calls": [{"name": c["name"], "args": c.get("args") or {}} for c in calls]}
    memory = {**memory, "steps": (memory["steps"] + [entry])[-STEPS:]}
    if memory.get("guidance"):
        seen = memory["guidance_seen"] + 1
        acted = done or bool(calls) or seen >= GUIDANCE_STEPS
        memory["guidance"], memory["guidance_seen"] = (None, 0) if acted else (memory["guidance"], seen)
    return memory


def transcript(memory: dict) -> str | None:
    """The recent steps as plain lines, oldest first, at most :data:`CHARS` long."""
    lines = []
    for entry in memory["steps"]:
        parts = [f"step {entry.get('step')}:"]
        if entry.get("text"):
            parts.append(f'you said "{entry["text"]}"')
        results = entry.get("results") or []
        for i, call in enumerate(entry.get("calls") or []):
            called = f"you called {call['name']} {_cut(call.get('args') or {}, 80)}"
            if i < len(results):
                called += f" -> {results[i]['status']}: {results[i]['said']} (answered)"
            parts.append(called)
        if len(parts) == 1:
            parts.append("(nothing said)")
        lines.append(" ".join(parts))
    while lines and sum(len(line) + 1 for line in lines) > CHARS:
        lines.pop(0)
    return "\n".join(lines) or None


def own(state: dict) -> dict:
    """The model's own state, without the memory (what a reader of a session's
    state usually wants to see)."""
    return split(state)[0]
