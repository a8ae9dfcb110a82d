"""Does each model of the Python client (client/models.py) say what the
service's OpenAPI document says?  Used by tests/unit/test_client_models.py
(the document as app.py builds it) and tests/service/test_client.py (as a
running service serves it), so a route's answer or body that changes without
the client fails a test instead of drifting.

For each model and its component (client.models.COMPONENTS):
- every field the model declares is a property of the component, and every
  JSON type the document allows there is one the model's field accepts (a
  model with ``int`` where the document says ``number | null`` would fail on
  ``2.5`` or ``null``);
- every property the document requires is a field of the model, required
  there too when it is an answer (a request model may leave it to the caller).
"""
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel

from client import models

PRIMITIVES = {str: {"string"}, int: {"integer"}, float: {"number", "integer"}, bool: {"boolean"},
              type(None): {"null"}, dict: {"object"}, list: {"array"}}
ANY = {"string", "integer", "number", "boolean", "null", "object", "array"}


def accepted(annotation) -> set[str]:
    """The JSON types a field with this annotation accepts."""
    if annotation is Any:
        return ANY
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return set().union(*(accepted(a) for a in typing.get_args(annotation)))
    if origin is Literal:
        return set().union(*(PRIMITIVES[type(v)] for v in typing.get_args(annotation)))
    if origin in (list, tuple, set):
        return {"array"}
    if origin is dict:
        return {"object"}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {"object"}
    return PRIMITIVES[annotation]


def allowed(schema: dict, components: dict) -> set[str]:
    """The JSON types a property's schema allows."""
    if "$ref" in schema:
        return allowed(components[schema["$ref"].rsplit("/", 1)[1]], components)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return set().union(*(allowed(s, components) for s in schema[key]))
    if "const" in schema:
        return {next(t for v, t in _JSON_TYPE if isinstance(schema["const"], v))}
    kind = schema.get("type")
    if kind is None:
        return ANY if "properties" not in schema else {"object"}
    kinds = set(kind) if isinstance(kind, list) else {kind}
    return kinds | {"integer"} if "number" in kinds else kinds  # a JSON Schema number includes the integers


_JSON_TYPE = ((bool, "boolean"), (str, "string"), (int, "integer"), (float, "number"), (type(None), "null"),
              (dict, "object"), (list, "array"))


def properties(name: str, components: dict) -> tuple[dict, set[str]]:
    """A component's properties and required names; a oneOf of variants (the
    create body, one per moniker; a replay's, one per profile) as the union of its variants' properties,
    required where every variant requires it."""
    schema = components[name]
    if "properties" in schema:
        return schema["properties"], set(schema.get("required", ()))
    variants = [components[v["$ref"].rsplit("/", 1)[1]] if "$ref" in v else v for v in schema["oneOf"]]
    props: dict = {}
    for variant in variants:
        for key, prop in variant.get("properties", {}).items():
            props.setdefault(key, {"anyOf": []})["anyOf"].append(prop)
    required = set.intersection(*(set(v.get("required", ())) for v in variants))
    return props, required


def disagreements(document: dict) -> list[str]:
    """Every way the client's models and the document disagree (empty: none)."""
    components = document["components"]["schemas"]
    wrong = []
    for model, name in models.COMPONENTS.items():
        if name not in components:
            wrong.append(f"{model.__name__}: no component {name} in the document")
            continue
        props, required = properties(name, components)
        is_request = issubclass(model, models.Request)
        for field_name, field in model.model_fields.items():
            if field_name not in props:
                wrong.append(f"{model.__name__}.{field_name}: not a property of {name}")
                continue
            missing = allowed(props[field_name], components) - accepted(field.annotation)
            if is_request:  # a request sends what it has: its types must be ones the document allows
                missing = (accepted(field.annotation) - {"null"}) - allowed(props[field_name], components)
            if missing:
                wrong.append(f"{model.__name__}.{field_name}: {sorted(missing)} where {name} says "
                             f"{sorted(allowed(props[field_name], components))}")
        for field_name in sorted(required):
            field = model.model_fields.get(field_name)
            if field is None:
                wrong.append(f"{model.__name__}: lacks {field_name}, which {name} requires")
            elif not is_request and not field.is_required():
                wrong.append(f"{model.__name__}.{field_name}: optional, but {name} requires it")
    return wrong
