"""The JSON Schemas that constrain a model's reply when its server supports
structured output (monikers/llm_call.py sends them as ``response_format``).

They say the same as the BAML classes in baml_src/ (BAML still parses every
reply), plus what BAML types cannot say: the step frame's ``tool_calls`` are
shaped by the session's own tools, each call's ``name`` one of the allowed
tools and its ``args`` that tool's args schema.  A server that enforces the
schema (llama.cpp, vLLM, OpenAI, Ollama) then cannot produce a call to a tool
that does not exist, and a small model that would otherwise ramble in prose
writes a frame.

Property order matters to a model that writes left to right: it writes its
answer (``text``) and its ``tool_calls`` first, and only then decides ``done``
and ``next_step``, so ``done`` follows from what the step said and did (in the
old order, step/next_step/done first, SmolLM2-135M decided ``done: false``
before writing "The capital of France is Paris." and then repeated it until
``max_steps``).  The small ``state`` comes after them, ``data`` and ``notes``
last.  The prompt's format block (BAML's ``ctx.output_format``, from
baml_src/frame.baml) lists the fields in the same order.  Step tokens are
short words, never sentences, and ``text`` has a cap: a small model otherwise
writes until ``max_tokens``.  A reply cut at ``max_tokens`` is not a frame
(monikers/baml_moniker.py re-asks it shorter once, then fails).
"""
from monikers.frame import DEFAULT_TOOL_CALLS, MAX_TOOL_CALLS

TOKEN = {"type": "string", "pattern": "^[A-Za-z0-9_./:-]{1,32}$"}  # "3", "review/1": never a sentence
NULLABLE_TEXT = {"type": ["string", "null"]}
SAY = {"type": ["string", "null"], "maxLength": 200}  # what a step says; a sentence or two

# A frame's ``data``: a short value, a short list or a flat object of short
# values.  A free-form object lets a small model nest without end ({"data":
# {"data": {…}}} until the token cap: SmolLM2-135M did exactly that); an agent
# that needs more runs with ``llm.structured`` json_object.  Strings and lists
# have caps for the same reason (llama.cpp enforces maxLength and maxItems; it
# does not enforce maxProperties).
SHORT = {"anyOf": [{"type": "string", "maxLength": 80}, {"type": ["number", "boolean", "null"]}]}
DATA = {"anyOf": [SHORT, {"type": "array", "items": SHORT, "maxItems": 5},
                  {"type": "object", "additionalProperties": SHORT, "maxProperties": 5}]}  # optional; small, like state

# The frame's ``state`` as a grammar holds it: a few named keys with short
# values.  An open object (``additionalProperties``) lets a grammar write any
# number of keys (llama.cpp's json-schema-to-grammar spells it ``("," kv)*``
# and does not enforce ``maxProperties``), and SmolLM2-135M filled 31 of 33
# replies to the 256-token cap with ``"state_schema_schema_…"``.  Named optional
# properties with ``additionalProperties: false``, string ``maxLength`` and
# list ``maxItems`` are what llama.cpp does enforce, so a whole frame stays
# near 100 tokens.  The step's memory of what it did is the transcript the
# moniker keeps (monikers/memory.py), not this state.
STATE_KEYS = {
    "progress": {"type": "string", "maxLength": 80},            # where the task stands, in a few words
    "items": {"type": "array", "maxItems": 5, "items": {"type": "string", "maxLength": 40}},  # a list kept
    "answer": {"type": "string", "maxLength": 80},              # the answer found so far
    "count": {"type": "integer"},
}
STATE = {"type": "object", "properties": STATE_KEYS, "additionalProperties": False}


LONG_BOUND = 500  # bounds above this are left to the runner's check of the args


def loosened(schema):
    """A tool's args schema as a grammar can afford it: without string and list
    bounds above :data:`LONG_BOUND`.  llama.cpp spells ``maxLength: 20000`` out as
    20,000 nested optional characters, and sampling under it slowed to a few
    tokens a second (``spawn_agent``'s task: 26 tokens in 100 s).  Nothing is
    lost: the runner checks every call against the tool's full schema and tells
    the model what was wrong."""
    if isinstance(schema, list):
        return [loosened(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {key: loosened(value) for key, value in schema.items()
            if not (key in ("maxLength", "maxItems") and isinstance(value, int) and value > LONG_BOUND)}


# A small model's tool args under ``structured: grammar``: every string, list and
# open object bounded.  ``ask_user``'s question may be 4,000 characters and its
# choices 20, ``spawn_agent``'s config any object; SmolLM2-135M filled such
# fields until its frame was cut at 256 tokens (the real-model tier: 2 of 10
# flows failed that way under the compact grammar).  The compact frame also
# leaves out the optional ``data`` and ``notes``: SmolLM2 filled ``data`` with
# copies of its answer and of the state's keys (5 keys of 80 characters).  Bounds already tighter
# are kept; a tool that needs longer args runs on a larger model, with
# ``json_schema``.
COMPACT_CHARS = 80
COMPACT_ITEMS = 3


def compacted(schema):
    """``schema`` with :data:`COMPACT_CHARS` and :data:`COMPACT_ITEMS` as the
    most any string, list or open object of it may hold."""
    if isinstance(schema, list):
        return [compacted(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: compacted(value) for key, value in schema.items()}
    kinds = out.get("type") if isinstance(out.get("type"), list) else [out.get("type")]
    if "string" in kinds and "enum" not in out and "const" not in out:
        out["maxLength"] = max(min(out.get("maxLength", COMPACT_CHARS), COMPACT_CHARS), out.get("minLength", 0))
    if "array" in kinds:
        out["maxItems"] = max(min(out.get("maxItems", COMPACT_ITEMS), COMPACT_ITEMS), out.get("minItems", 0))
    if "object" in kinds and out.get("additionalProperties") is not False:
        out["maxProperties"] = min(out.get("maxProperties", COMPACT_ITEMS), COMPACT_ITEMS)
    return out


def tool_call_schema(tool: dict, compact: bool = False) -> dict:
    """One allowed call: the tool's name as a constant and its own args schema
    (``compact``: bounded for a small model, :func:`compacted`)."""
    args = loosened(tool.get("args_schema") or {"type": "object"})
    if compact:
        args = compacted(args)
    return {"type": "object", "properties": {"name": {"const": tool["name"]}, "args": args},
            "required": ["name", "args"], "additionalProperties": False}


FRAME_ORDER = ("step", "text", "tool_calls", "done", "next_step", "state", "data", "notes")


def frame_schema(tools: list[dict] | None, max_calls: int = DEFAULT_TOOL_CALLS, compact: bool = False) -> dict:
    """StepFrameOut (baml_src/frame.baml) for a session that may call ``tools``,
    at most ``max_calls`` of them per step (``llm.max_tool_calls``), its
    properties in :data:`FRAME_ORDER`; ``compact``: the tools' args bounded
    for a small model (``structured: grammar``)."""
    if tools and max_calls > 0:
        calls = {"type": "array", "maxItems": min(max_calls, MAX_TOOL_CALLS),
                 "items": {"anyOf": [tool_call_schema(t, compact) for t in tools]}}
    else:
        calls = {"type": "array", "maxItems": 0}
    properties = {"step": TOKEN, "text": SAY, "tool_calls": calls, "done": {"type": "boolean"},
                  "next_step": TOKEN, "state": compacted(STATE) if compact else STATE, "data": DATA,
                  "notes": {"type": ["string", "null"], "maxLength": 100}}
    order = [name for name in FRAME_ORDER if not (compact and name in ("data", "notes"))]
    return {
        "type": "object",
        "properties": {name: properties[name] for name in order},
        "required": ["step", "text", "tool_calls", "done", "next_step", "state"],
        "additionalProperties": False,
    }


DECISION = {  # OrchestratorDecision (baml_src/orchestrator.baml)
    "type": "object",
    "properties": {
        "action": {"enum": ["new_agent", "follow_up", "answer"]},
        "reply": {"type": "string"},
        "task": NULLABLE_TEXT,
        "agent_name": NULLABLE_TEXT,
    },
    "required": ["action", "reply", "task", "agent_name"],
    "additionalProperties": False,
}

# An archive entry is "two to four sentences" and "at most five short facts"
# (baml_src/summary.baml), and its grammar holds it to that (~170 tokens at most).
# Unbounded, SmolLM2-135M wrote every turn and archive summary to the 256-token
# cap (24 of the real-model tier's 57 replies, over half the tokens it generated),
# and the lenient parser kept the cut text.  Strict mode gets the schema without
# the bounds (strict_form).
SUMMARY = {  # ArchiveSummary (baml_src/summary.baml)
    "type": "object",
    "properties": {
        "summary": {"type": "string", "maxLength": 400},
        "key_points": {"type": "array", "maxItems": 5, "items": {"type": "string", "maxLength": 40}},
    },
    "required": ["summary", "key_points"],
    "additionalProperties": False,
}

# Whether OpenAI's strict mode can take the schema: it needs every object
# closed and every property required, which a frame's free-form ``state``
# and ``data`` are not.  The fixed shapes are strict; the length and item
# bounds strict mode refuses (SUMMARY's) are dropped from what it is sent
# (strict_form below), so a grammar still gets them.
STRICT = {"RunMonikerStep": False, "DecideNextMove": True, "SummarizeRecord": True}
STRICT_REFUSES = ("minLength", "maxLength", "minItems", "maxItems")  # what strict_form drops


def strict_form(schema):
    """``schema`` without the length and item bounds, for strict mode: the bounds
    are for grammars (llama.cpp enforces them); strict mode gets the shape alone."""
    if isinstance(schema, dict):
        return {k: strict_form(v) for k, v in schema.items() if k not in STRICT_REFUSES}
    if isinstance(schema, list):
        return [strict_form(v) for v in schema]
    return schema
