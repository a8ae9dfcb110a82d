"""Whether a call's args suit its tool: a JSON object, at most
:data:`MAX_ARGS_BYTES`, valid against the tool's pydantic model or (an MCP
tool) its JSON schema.  The answer is a message for the model (or the person
who edited the args before approving), naming the problem and the schema;
None when the args are fine.  The runner checks every call with it before
anything runs (runtime/session/tool_runner.py), and the API checks args a
person edited (api/routes/tools.py)."""
import json

from pydantic import ValidationError

from tools import schema
from tools.tool import Tool

MAX_ARGS_BYTES = 64 * 1024


def size(value) -> int:
    return len(json.dumps(value, default=str, ensure_ascii=False).encode())


def args_problem(tool: Tool, args) -> str | None:
    if not isinstance(args, dict):
        return f"args of {tool.name!r} must be a JSON object"
    if size(args) > MAX_ARGS_BYTES:
        return f"args of {tool.name!r} are {size(args)} bytes; the cap is {MAX_ARGS_BYTES}"
    if tool.args_model is None:
        problem = schema_problem(tool, args)
    else:
        try:
            tool.args_model.model_validate(args)
            problem = None
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(args)'}: {e['msg']}" for e in exc.errors()[:5])
            expected = json.dumps(tool.schema(), separators=(",", ":"))[:2000]
            problem = f"invalid args for {tool.name!r}: {problems}. Expected JSON schema: {expected}"
    if problem is None and tool.precheck is not None:
        problem = tool.precheck(args)
    return problem


def schema_problem(tool: Tool, args) -> str | None:
    """A tool with only a JSON schema (an MCP tool) is checked against it here
    too, so a bad call ends ``failed`` without ever running."""
    if not tool.args_schema:
        return None
    try:
        problem = schema.args_problem(tool.args_schema, args)
    except schema.BadSchema:
        return None  # the tool validates (or not) in its own run
    if problem is None:
        return None
    expected = json.dumps(tool.args_schema, separators=(",", ":"))[:2000]
    return f"invalid args for {tool.name!r}: {problem}. Expected JSON schema: {expected}"
