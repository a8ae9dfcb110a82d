"""The JSON Schemas that constrain a model's reply when its server supports
structured output (monikers/llm_call.py sends them as ``response_format``).

They say the same as the BAML classes in baml_src/ (BAML still parses every
reply), plus what BAML types cannot say: the step frame's ``tool_calls`` are
shaped by the session's own tools, each call's ``name`` one of the allowed
tools and its ``args`` that tool's args schema.  A server that enforces the
schema (llama.cpp, vLLM, OpenAI, Ollama) then cannot produce a call to a tool
that does not exist, and a small model that would otherwise ramble in prose
writes a frame.

Property order matters to a model that writes left to right: the frame's
small required fields come first and the bulky ``state`` last (the optional
``data`` and ``notes`` after it), so that a reply cut by the token cap still
holds what the step decided (BAML reads a truncated object up to where it
stops).  Step tokens are short words, never sentences, and ``text`` has a cap:
a small model otherwise writes until ``max_tokens``.
"""
from monikers.frame import MAX_TOOL_CALLS

TOKEN = {"type": "string", "pattern": "^[A-Za-z0-9_./:-]{1,32}$"}  # "3", "review/1": never a sentence
NULLABLE_TEXT = {"type": ["string", "null"]}
SAY = {"type": ["string", "null"], "maxLength": 600}  # what a step says; a short paragraph

# JSON of bounded depth for a frame's ``state`` and ``data``.  A free-form
# object lets a small model nest without end ({"data": {"data": {…}}} until the
# token cap: SmolLM2-135M did exactly that); three levels hold what a step
# remembers.  A server that enforces the schema cannot write deeper; an agent
# that needs deeper state runs with ``llm.structured`` json_object.  Strings and
# lists have caps for the same reason (llama.cpp enforces maxLength and
# maxItems; it does not enforce maxProperties).
SCALAR = {"anyOf": [{"type": "string", "maxLength": 200}, {"type": ["number", "boolean", "null"]}]}
LEAF = {"anyOf": [SCALAR, {"type": "array", "items": SCALAR, "maxItems": 10}]}
NESTED = {"anyOf": [SCALAR, {"type": "array", "items": LEAF, "maxItems": 10},
                    {"type": "object", "additionalProperties": LEAF}]}
STATE = {"type": "object", "additionalProperties": NESTED}
DATA = {"anyOf": [NESTED, STATE]}


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


def tool_call_schema(tool: dict) -> dict:
    """One allowed call: the tool's name as a constant and its own args schema."""
    args = loosened(tool.get("args_schema") or {"type": "object"})
    return {"type": "object", "properties": {"name": {"const": tool["name"]}, "args": args},
            "required": ["name", "args"], "additionalProperties": False}


def frame_schema(tools: list[dict] | None) -> dict:
    """StepFrameOut (baml_src/frame.baml) for a session that may call ``tools``."""
    if tools:
        calls = {"type": "array", "maxItems": MAX_TOOL_CALLS,
                 "items": {"anyOf": [tool_call_schema(t) for t in tools]}}
    else:
        calls = {"type": "array", "maxItems": 0}
    return {
        "type": "object",
        "properties": {
            "step": TOKEN,
            "next_step": TOKEN,
            "done": {"type": "boolean"},
            "tool_calls": calls,
            "text": SAY,
            "state": STATE,
            "data": DATA,
            "notes": {"type": ["string", "null"], "maxLength": 200},
        },
        "required": ["step", "next_step", "done", "tool_calls", "text", "state"],
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

SUMMARY = {  # ArchiveSummary (baml_src/summary.baml)
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "key_points": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["summary", "key_points"],
    "additionalProperties": False,
}

# Whether OpenAI's strict mode can take the schema: it needs every object
# closed and every property required, which a frame's free-form ``state``
# and ``data`` are not.  The fixed shapes are strict (and so use no keyword
# that strict mode refuses, such as minLength).
STRICT = {"RunMonikerStep": False, "DecideNextMove": True, "SummarizeRecord": True}
