"""A reply's JSON Schema as a GBNF grammar that writes compact JSON, for
llama.cpp-style servers (``structured`` mode ``grammar``, monikers/llm_call.py).

Why not let the server convert the schema itself (``response_format``
``json_schema``): llama.cpp's converter lets a newline and up to 20 spaces or
tabs stand between any two JSON tokens (its ``space`` rule is
``| " " | "\\n"{1,2} [ \\t]{0,20}``), and a small model fills that allowance
with indentation tokens.  SmolLM2-135M wrote ``"tool_calls": [\\n \\t \\t …``
and 57 of 66 replies of the real-model tier reached the 256-token cap.  Here
the only whitespace between tokens is one optional space (:data:`WS`), so a
frame is as long as what it says.

The subset converted is what the service's schemas (monikers/output_schemas.py)
and tools' args schemas use: objects with ordered ``properties``,
``required`` and ``additionalProperties``; strings with ``minLength``/
``maxLength``, ``enum``/``const`` and simple ``pattern``s (a sequence of
characters and classes with quantifiers); arrays with ``items``,
``minItems``/``maxItems``; numbers, integers, booleans, null, ``type`` lists
(``["string", "null"]``), ``anyOf``/``oneOf`` and local ``$ref``s.  What it
does not express is loosened, never refused: an unknown keyword is ignored, a
pattern it cannot read is any string, a schema it cannot read is any JSON
value.  That loses nothing the service relies on: BAML parses the reply and
the runner checks every tool call against its tool's full schema.

As llama.cpp's own converter does, an object's required properties come first
in their order, then the optional ones in theirs, and an object without
``additionalProperties`` but with ``properties`` is closed.
"""
import json
import re

WS = '" "?'  # at most one space between tokens, never a newline
CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'  # a JSON string's character

PRIMITIVES = {
    "ws": WS,
    "char": CHAR,
    "string": '"\\"" char* "\\""',
    "boolean": '("true" | "false")',
    "null": '"null"',
    "integer": '"-"? ("0" | [1-9] [0-9]{0,15})',
    "number": '"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?',
    "value": 'object | array | string | number | boolean | null',
    "object": '"{" ws (string ws ":" ws value (ws "," ws string ws ":" ws value)*)? ws "}"',
    "array": '"[" ws (value (ws "," ws value)*)? ws "]"',
}
PRIMITIVE_TYPES = ("string", "boolean", "null", "integer", "number", "object", "array")
SIMPLE_CLASSES = {"d": "0-9", "w": "A-Za-z0-9_"}


def literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r") \
        .replace("\t", "\\t")
    return f'"{escaped}"'


def json_literal(value) -> str:
    """A constant JSON value, written compactly, as a GBNF literal."""
    return literal(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def to_gbnf(schema: dict) -> str:
    """The grammar of replies that are ``schema``, compactly written; its start rule is ``root``."""
    return _Converter(schema).grammar()


class _Converter:
    """Turns one schema into rules, naming each distinct body once."""

    def __init__(self, schema: dict):
        self.schema = schema
        self.rules: dict[str, str] = {}  # name -> body
        self.names: dict[str, str] = {}  # body -> name, so equal sub-schemas share a rule
        self.refs: dict[str, str] = {}  # "$ref" -> its rule's name (assigned before its body, for recursion)
        self.used_primitives: set[str] = set()

    def grammar(self) -> str:
        root = self.visit(self.schema, "reply")
        self.used_primitives.add("ws")  # every rule with more than one token uses it
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items()]
        lines += [f"{name} ::= {PRIMITIVES[name]}" for name in self._primitives_needed()]
        return "\n".join(lines) + "\n"

    def _primitives_needed(self) -> list[str]:
        """The primitive rules used, with those they use in turn."""
        needed, todo = set(), list(self.used_primitives)
        while todo:
            name = todo.pop()
            if name in needed:
                continue
            needed.add(name)
            todo += [p for p in PRIMITIVES if p not in needed and re.search(rf"\b{p}\b", PRIMITIVES[name])]
        return [name for name in PRIMITIVES if name in needed]

    def primitive(self, name: str) -> str:
        self.used_primitives.add(name)
        return name

    def rule(self, body: str, hint: str = "r") -> str:
        """A named rule for ``body`` (the existing one when the body is known)."""
        if body in self.names:
            return self.names[body]
        name = self._fresh(hint)
        self.rules[name] = body
        self.names[body] = name
        return name

    def _fresh(self, hint: str) -> str:
        base = re.sub(r"[^a-z0-9]+", "-", hint.lower()).strip("-") or "r"
        name, n = base, 1
        while name in self.rules or name in PRIMITIVES or name == "root":
            n += 1
            name = f"{base}-{n}"
        return name

    # ---- schemas ----------------------------------------------------------------

    def visit(self, schema, hint: str = "value") -> str:
        """A GBNF expression for ``schema`` (a rule name or a short alternation)."""
        if schema is True or not isinstance(schema, dict) or not schema:
            return self.primitive("value")
        if "$ref" in schema:
            return self._ref(schema["$ref"])
        if "const" in schema:
            return json_literal(schema["const"])
        if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
            return self.rule(" | ".join(json_literal(v) for v in schema["enum"]), hint)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and len(schema[key]) == 1:
                return self.visit(schema[key][0], hint)
            if isinstance(schema.get(key), list) and schema[key]:
                return self.rule(" | ".join(self.visit(s, hint) for s in schema[key]), hint)
        if isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
            return self.visit(schema["allOf"][0], hint)
        kind = schema.get("type")
        if isinstance(kind, list):
            return self.rule(" | ".join(self.visit({**schema, "type": k}, hint) for k in kind), hint)
        if kind is None and "properties" in schema:
            kind = "object"
        if kind == "object":
            return self._object(schema, hint)
        if kind == "array":
            return self._array(schema, hint)
        if kind == "string":
            return self._string(schema, hint)
        if kind in PRIMITIVE_TYPES:
            return self.primitive(kind)
        return self.primitive("value")

    def _ref(self, ref: str) -> str:
        """A local reference (``#/$defs/x``, ``#/definitions/x``): one rule, which may refer to itself."""
        if ref in self.refs:
            return self.refs[ref]
        target = self.schema
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return self.primitive("value")
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                return self.primitive("value")
            target = target[part]
        name = self._fresh("ref-" + ref.rsplit("/", 1)[-1])
        self.refs[ref] = name
        self.rules[name] = ""  # reserved: a reference inside its own body finds the name
        self.rules[name] = self.visit(target, name)
        return name

    def _object(self, schema: dict, hint: str) -> str:
        """Required properties in order, then each optional one in order or not
        at all, then any number of extra keys when ``additionalProperties`` allows
        them (absent, with properties: none, as llama.cpp has it)."""
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        extra = schema.get("additionalProperties")
        if not properties and extra is None:
            extra = True  # {"type": "object"}: any object
        if extra is not None and extra is not False:
            value = self.visit(extra, hint + "-value") if isinstance(extra, dict) else self.primitive("value")
            extra = self.rule(f'{self.primitive("string")} ws ":" ws {value}', hint + "-extra-kv")
        else:
            extra = None
        required = set(schema.get("required") or [])
        pairs = {name: self.rule(f'{literal(json.dumps(name))} ws ":" ws {self.visit(sub, hint + "-" + name)}',
                                 f"{hint}-{name}-kv")
                 for name, sub in properties.items()}
        firsts = [pairs[n] for n in properties if n in required]
        optional = [pairs[n] for n in properties if n not in required]
        cap = schema.get("maxProperties")  # llama.cpp's converter ignores it; a model fills an open object
        cap = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 1 else None
        if cap is not None:
            repeat = f"{{0,{max(cap - len(required) - 1, 0)}}}"
        more = (f' (ws "," ws {extra})' + (repeat if cap is not None else "*")) if extra else ""

        def after(i: int) -> str:  # the optional ones after the i-th, then the extra keys
            return "".join(f' (ws "," ws {p})?' for p in optional[i:]) + more

        if firsts:
            body = ' ws "," ws '.join(firsts) + after(0)
            return self.rule(f'"{{" ws {body} ws "}}"', hint)
        # None required: the first key written may be any optional one (the rest follow
        # in order) or an extra key; or the object is empty.
        heads = [p + after(i + 1) for i, p in enumerate(optional)] + ([extra + more] if extra else [])
        if not heads:
            return self.rule('"{" ws "}"', hint)
        return self.rule(f'"{{" ws ({" | ".join(heads)})? ws "}}"', hint)

    def _array(self, schema: dict, hint: str) -> str:
        item = self.visit(schema.get("items", {}), hint + "-item")
        low = max(int(schema.get("minItems") or 0), 0)
        high = schema.get("maxItems")
        high = int(high) if isinstance(high, int) and not isinstance(high, bool) else None
        if high is not None and high < max(low, 1):
            return self.rule('"[" ws "]"', hint)
        more = f'(ws "," ws {item})'
        if high is None:
            tail = f"{more}*" if low <= 1 else f"{more}{{{low - 1},}}"
        else:
            tail = f"{more}{{{max(low - 1, 0)},{high - 1}}}"
        body = f"{item} {tail}"
        if low == 0:
            body = f"({body})?"
        return self.rule(f'"[" ws {body} ws "]"', hint)

    def _string(self, schema: dict, hint: str) -> str:
        low = max(int(schema.get("minLength") or 0), 0)
        high = schema.get("maxLength")
        high = int(high) if isinstance(high, int) and not isinstance(high, bool) else None
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and (body := _pattern(pattern)) is not None:
            return self.rule(f'"\\"" {body} "\\""', hint)
        if low == 0 and high is None:
            return self.primitive("string")
        char = self.primitive("char")
        count = f"{{{low},}}" if high is None else f"{{{low},{max(high, low)}}}"
        return self.rule(f'"\\"" {char}{count} "\\""', hint)


# ---- patterns -----------------------------------------------------------------------

_QUANTIFIER = re.compile(r"\?|\*|\+|\{(\d+)(,(\d*))?\}")


def _pattern(pattern: str) -> str | None:
    """A GBNF sequence for an anchored ``pattern`` made of characters and
    character classes with quantifiers (``^[A-Za-z0-9_./:-]{1,32}$``); None for
    anything else (groups, alternation, unanchored), which is then any string."""
    if not (pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$")):
        return None
    text, pos, parts = pattern[1:-1], 0, []
    while pos < len(text):
        atom, pos = _atom(text, pos)
        if atom is None:
            return None
        match = _QUANTIFIER.match(text, pos)
        if match:
            pos = match.end()
            atom += match.group(0)
        parts.append(atom)
    return " ".join(parts) if parts else '""'


def _atom(text: str, pos: int) -> tuple[str | None, int]:
    """One character or class of a pattern at ``pos`` as GBNF, and where the next starts."""
    char = text[pos]
    if char == "[":
        end = text.find("]", pos + 2)
        inner = text[pos + 1:end] if end > 0 else None
        if inner is None or inner.startswith("^") or '"' in inner:
            return None, pos
        dash = "-" if "\\-" in inner else ""
        inner = inner.replace("\\-", "").replace("\\.", ".")
        for short, spelled in SIMPLE_CLASSES.items():
            inner = inner.replace("\\" + short, spelled)
        if "\\" in inner:  # another escape: not one this reads
            return None, pos
        return f"[{inner}{dash}]", end + 1
    if char == "\\" and pos + 1 < len(text):
        escaped = text[pos + 1]
        if escaped in SIMPLE_CLASSES:
            return f"[{SIMPLE_CLASSES[escaped]}]", pos + 2
        if escaped in ".-/_:+*?()[]{}^$|":
            return literal(escaped), pos + 2
        return None, pos
    if char == ".":
        return '[^"\\\\\\x7F\\x00-\\x1F]', pos + 1
    if char in '()|*+?{}"\\^$':
        return None, pos
    return literal(char), pos + 1
