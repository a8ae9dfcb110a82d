"""store/codec.py: JSON columns written with orjson read back as json wrote
and read them, including what orjson refuses or reads differently."""
import dataclasses
import json
from datetime import datetime, timezone

import pytest

from store import codec


def _old_dumps(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize("value", [
    {"b": 1, "a": [1, 2.5, "x", None, True]},
    {"nested": {"z": {"y": [{"b": 2, "a": 1}]}}},
    {"when": datetime(2026, 11, 26, 18, 0, tzinfo=timezone.utc)},  # through str(), as json's default=str did
    {"point": Point(3)},  # likewise
    {1: "int key"},  # orjson refuses it: json writes it
    {"big": 10 ** 30},  # past 64 bits: json writes it
    {"lone": "\ud800"},  # a lone surrogate: json writes it
    [1, "two", {"three": 3}],
])
def test_written_text_reads_back_as_json_wrote_it(value):
    text = codec.dumps(value)
    assert codec.loads(text) == json.loads(_old_dumps(value))
    assert codec.dumps(codec.loads(text)) == text  # stable: the state-delta check compares texts


def test_ascii_text_is_what_json_wrote():
    value = {"b": [1, 2, {"d": "e", "c": None}], "a": "plain text", "n": -3}
    assert codec.dumps(value) == _old_dumps(value)


def test_non_ascii_is_stored_as_utf8_and_reads_back():
    assert codec.dumps({"é": "ü✓"}) == '{"é":"ü✓"}'
    assert codec.loads(_old_dumps({"é": "ü✓"})) == {"é": "ü✓"}  # rows json escaped still read


def test_rows_json_wrote_with_nan_or_huge_integers_still_read():
    assert codec.loads('{"x":NaN}')["x"] != codec.loads('{"x":NaN}')["x"]  # NaN, read by json
    assert codec.loads('{"big":1000000000000000000000000000001}') == {"big": 10 ** 30 + 1}  # not a float
    assert codec.loads('{"id":"1234567890123456789012"}') == {"id": "1234567890123456789012"}


def test_nan_is_written_as_null():
    assert codec.dumps({"x": float("nan"), "y": float("inf")}) == '{"x":null,"y":null}'


@pytest.mark.parametrize("text, value", [(None, None), ("", None), ("not json", "not json"),
                                         (b'{"a":1}', {"a": 1}), ('"s"', "s")])
def test_loads_edges(text, value):
    assert codec.loads(text) == value
