"""monikers/gbnf.py: a reply's JSON Schema as a grammar of compact JSON.

These check the grammar's text (no whitespace allowance but one space, the
bounds the schemas give); that llama-server accepts it and its replies parse is
still to be tested against the real server (see the h10 report)."""
import re

from monikers import gbnf, output_schemas


def rules(grammar: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in grammar.strip().splitlines())


def test_the_only_whitespace_is_one_optional_space():
    grammar = gbnf.to_gbnf(output_schemas.frame_schema([]))
    assert rules(grammar)["ws"] == '" "?'
    assert "\\n" not in grammar.replace('"\\\\" (["\\\\/bfnrt]', "")  # no newline outside a string's escapes
    assert "[ \\t]" not in grammar


def test_every_rule_used_is_defined():
    wait = {"name": "wait", "args_schema": {"anyOf": [
        {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"],
         "additionalProperties": False},
        {"type": "object", "properties": {"until": {"type": "string"}}, "required": ["until"],
         "additionalProperties": False}]}}
    for schema in (output_schemas.frame_schema([wait], 4), output_schemas.DECISION, output_schemas.SUMMARY):
        found = rules(gbnf.to_gbnf(schema))
        used = set(re.findall(r"(?<![\"\\\w-])([a-z][a-z0-9-]*)(?![\"\w-])", " ".join(
            re.sub(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]', " ", body) for body in found.values())))
        assert used <= set(found), used - set(found)


def test_bounds_the_frame_gives_are_in_the_grammar():
    found = rules(gbnf.to_gbnf(output_schemas.frame_schema([])))
    assert any(body == '"\\"" char{0,200} "\\""' for body in found.values())  # text
    assert any("[A-Za-z0-9_./:-]{1,32}" in body for body in found.values())  # step tokens
    assert any(body.endswith('(ws "," ws reply-data-extra-kv){0,4})? ws "}"') for body in found.values())


def test_optional_properties_keep_their_order_and_may_all_be_left_out():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
              "additionalProperties": False}
    body = rules(gbnf.to_gbnf(schema))["reply"]
    assert body == '"{" ws (reply-a-kv (ws "," ws reply-b-kv)? | reply-b-kv)? ws "}"'


def test_unreadable_patterns_and_schemas_are_loosened_not_refused():
    grammar = gbnf.to_gbnf({"type": "object", "properties": {
        "p": {"type": "string", "pattern": "(a|b)+"}, "q": {"not": {}}}, "required": ["p", "q"]})
    found = rules(grammar)
    assert found["reply-p-kv"].endswith("string") and found["reply-q-kv"].endswith("value")
