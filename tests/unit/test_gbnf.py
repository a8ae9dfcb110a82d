"""monikers/gbnf.py: a reply's JSON Schema as a grammar of compact JSON.

These check the grammar's text (no whitespace allowance but one space, the
bounds the schemas give); that llama-server takes it and its replies parse is
what the real-model tier runs on (tests/real_model, ``structured: grammar``)."""
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


def test_a_small_models_tool_args_are_bounded_under_grammar_and_left_alone_otherwise():
    """ask_user's question (4,000 characters), its 20 choices and an open config
    object: under ``compact`` each string holds at most 80 characters, each
    list and open object 3 entries; tighter bounds and closed objects stay;
    the compact frame has no ``data`` or ``notes``."""
    ask = {"name": "ask_user", "args_schema": {"type": "object", "additionalProperties": False, "properties": {
        "question": {"type": "string", "minLength": 1, "maxLength": 4000},
        "choices": {"anyOf": [{"type": "array", "items": {"type": "string"}, "maxItems": 20}, {"type": "null"}]},
        "mode": {"type": "string", "enum": ["a", "b"]}, "short": {"type": "string", "maxLength": 10},
        "config": {"type": "object"}}, "required": ["question"]}}
    def args(compact):
        schema = output_schemas.frame_schema([ask], 2, compact=compact)
        return schema["properties"]["tool_calls"]["items"]["anyOf"][0]["properties"]["args"]["properties"]
    bounded, plain = args(True), args(False)
    assert bounded["question"]["maxLength"] == 80 and bounded["question"]["minLength"] == 1
    assert bounded["choices"]["anyOf"][0]["maxItems"] == 3
    assert bounded["choices"]["anyOf"][0]["items"]["maxLength"] == 80
    assert bounded["short"]["maxLength"] == 10 and "maxLength" not in bounded["mode"]
    assert bounded["config"]["maxProperties"] == 3
    assert "maxLength" not in plain["question"] and plain["choices"]["anyOf"][0]["maxItems"] == 20
    assert "maxProperties" not in plain["config"]
    compact = output_schemas.frame_schema([ask], 2, compact=True)
    assert list(compact["properties"]) == ["step", "text", "tool_calls", "done", "next_step", "state"]
    assert "data" in output_schemas.frame_schema([ask], 2)["properties"]
    assert '"\\"" char{1,80} "\\""' in rules(gbnf.to_gbnf(compact)).values()


def test_an_archive_summary_is_bounded_in_its_grammar_and_sent_bare_to_strict_mode():
    """Unbounded, SmolLM2 wrote every summary to the token cap; the grammar holds
    it to "three to six sentences" and five short points.  Strict mode (OpenAI)
    refuses length bounds, so it gets the shape alone, as before."""
    from monikers import llm_call

    found = rules(gbnf.to_gbnf(output_schemas.SUMMARY))
    assert any(body == '"\\"" char{0,400} "\\""' for body in found.values())  # the summary
    assert any(body == '"\\"" char{0,40} "\\""' for body in found.values())  # a key point
    assert any("){0,4})? ws \"]\"" in body for body in found.values())  # at most five of them
    strict = llm_call.shape_fields("SummarizeRecord", output_schemas.SUMMARY, "json_schema")["response_format"]
    assert strict["json_schema"]["strict"] is True
    assert strict["json_schema"]["schema"] == {
        "type": "object", "required": ["summary", "key_points"], "additionalProperties": False,
        "properties": {"summary": {"type": "string"}, "key_points": {"type": "array", "items": {"type": "string"}}}}
    grammar = llm_call.shape_fields("SummarizeRecord", output_schemas.SUMMARY, "grammar")["grammar"]
    assert "char{0,400}" in grammar
