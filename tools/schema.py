"""Checking a call's args against a tool's JSON schema (tools whose schema
comes from elsewhere, such as an MCP server's ``inputSchema``, have no pydantic
model to validate with)."""
import functools
import json


class BadSchema(ValueError):
    """The tool's own schema is not a valid JSON schema."""


@functools.lru_cache(maxsize=512)
def _validator(schema_text: str):
    import jsonschema  # on first use: only workers with schema-only tools need it

    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise BadSchema(exc.message) from None
    return cls(schema)


def validator(schema: dict):
    """A (cached) validator of ``schema``; BadSchema if the schema is invalid."""
    return _validator(json.dumps(schema, sort_keys=True))


def args_problem(schema: dict, args) -> str | None:
    """The first few ways ``args`` violate ``schema``, phrased for the model
    (``a: 'x' is not of type 'integer'``), or None when they conform."""
    found = validator(schema).iter_errors(args)
    errors = sorted(found, key=lambda e: ([str(p) for p in e.absolute_path], e.message))[:5]  # a stable order
    if not errors:
        return None
    return "; ".join(f"{'.'.join(map(str, e.absolute_path)) or 'args'}: {e.message}" for e in errors)
