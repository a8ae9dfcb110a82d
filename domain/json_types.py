"""Field types for config models validated in strict mode.

Config arrives as JSON.  Strict mode keeps ``false`` and ``"5"`` from passing
as numbers, but would also refuse ``5.0`` for an integer, which JSON Schema
(and so the OpenAPI document) counts as the integer 5.  :data:`JsonInt`
accepts exactly what JSON Schema's ``integer`` accepts.
"""
from typing import Annotated

from pydantic import BeforeValidator, Field


def _integral(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_integral)]


def json_int(**constraints):
    """:data:`JsonInt` with bounds (``ge``, ``le``...) that also reach the JSON
    Schema when the field is optional (``json_int(ge=1) | None``): pydantic
    drops them from the schema when they sit on the outer Field of a union."""
    return Annotated[int, Field(**constraints), BeforeValidator(_integral)]
