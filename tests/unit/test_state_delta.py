"""store/state_delta.py: a delta applied to the old state gives the new state
exactly (the same JSON text), for states of every shape; and the rule for
when a row holds the whole state instead."""
import json
import random

import pytest

from store import codec
from store.state_delta import MAX_CHAIN_ROWS, MIN_STATE_BYTES, MISSING, Chain, apply, delta_for, diff, rebuild


def text(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))  # codec.dumps, but None is "null"


def round_trip(old, new):
    """What a reader gets: the old state as read back, the stored delta decoded, applied."""
    old = json.loads(text(old))
    return apply(old, json.loads(text(diff(old, new))))


def same_text(a, b) -> bool:
    return text(a) == text(b)


@pytest.mark.parametrize("old, new", [
    ({"notes": ["a", "b"]}, {"notes": ["a", "b", "c"]}),  # an appended note
    ({"notes": ["a", "b", "c"]}, {"notes": ["a"]}),  # a list cut short
    ({"notes": ["a", "b"]}, {"notes": ["x", "b"]}),  # its first item changed
    ({"log": "x" * 100}, {"log": "x" * 100 + " and more"}),  # a text grown
    ({"log": "x" * 100}, {"log": "y" + "x" * 99}),
    ({"a": 1, "b": {"c": [1, 2], "d": "e"}}, {"b": {"c": [1, 2, 3]}, "z": None}),  # keys gone and added
    ({"a": {"b": {"c": 1}}}, {"a": {"b": {"c": 2, "a": 0}}}),
    ({"a": 1}, {"a": 1.0}), ({"a": 1}, {"a": True}), ({"a": [0]}, {"a": [False]}),  # == cannot tell these
    ({"a": [1, 2]}, {"a": {"0": 1}}), ({"a": None}, {"a": []}), ({}, {}),
    ([1, 2, 3], [1, 2, 3, 4]), ([1], {"a": 1}), ({"a": "short"}, {"a": "shorter"}),
    ({"u": "é" * 80}, {"u": "é" * 80 + "ü"}),
])
def test_a_delta_applied_to_the_old_state_gives_the_new_one(old, new):
    got = round_trip(old, new)
    if same_text(got, new):
        assert got == new
    else:  # only where == cannot see the change: the writer's check then stores the whole state
        assert got == new and text(old) != text(new)


def test_apply_changes_nothing_in_place_and_keeps_keys_sorted():
    old = {"b": [1, 2], "d": {"x": 1}}
    before = codec.dumps(old)
    new = apply(old, ["{", {"a": ["=", 0], "b": ["[", 2, [3]], "d": ["{", {"y": ["=", 2]}]}])
    assert codec.dumps(old) == before
    assert list(new) == ["a", "b", "d"] and list(new["d"]) == ["x", "y"] and new["b"] == [1, 2, 3]


def test_an_appended_note_costs_about_the_note():
    notes = [f"note {i}: " + "n" * 1000 for i in range(50)]
    old, new = {"notes": notes, "count": 50}, {"notes": notes + ["note 50: " + "m" * 1000], "count": 51}
    delta = codec.dumps(diff(old, new))
    assert len(delta) < 1100
    assert apply(old, json.loads(delta)) == new


def random_json(rng: random.Random, depth: int = 0):
    kind = rng.choice("nbifsld" if depth < 3 else "nbifs")
    if kind == "n":
        return None
    if kind == "b":
        return rng.random() < 0.5
    if kind == "i":
        return rng.randint(-3, 3)
    if kind == "f":
        return rng.choice([0.0, 1.0, -2.5, 1e300, 0.1])
    if kind == "s":
        return rng.choice(["", "a", "é", "x" * 70, "x" * 70 + "y"])
    if kind == "l":
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice("abcde"): random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def mutate(rng: random.Random, value, depth: int = 0):
    """A value like ``value``, changed in a few places (as a step changes its state)."""
    if isinstance(value, dict) and rng.random() < 0.8:
        out = dict(value)
        for key in rng.sample(sorted(out), k=min(len(out), rng.randint(0, 2))):
            if rng.random() < 0.3:
                del out[key]
            else:
                out[key] = mutate(rng, out[key], depth + 1)
        if rng.random() < 0.4:
            out[rng.choice("abcdefg")] = random_json(rng, depth + 1)
        return out
    if isinstance(value, list) and rng.random() < 0.8:
        return value[:rng.randint(0, len(value))] + [random_json(rng, depth + 1) for _ in range(rng.randint(0, 2))]
    if isinstance(value, str) and rng.random() < 0.5:
        return value + "z"
    return random_json(rng, depth)


def test_random_states_round_trip_exactly_or_get_no_delta():
    """A chain of 3,000 random changes, as the writer stores it: each state
    either gets a delta that rebuilds its exact text or is stored whole."""
    rng = random.Random(28)
    state = {"pad": "p" * MIN_STATE_BYTES}
    chain, deltas = None, 0
    for iteration in range(3000):
        state = mutate(rng, state) if iteration else state
        if not isinstance(state, dict):
            state = {"pad": "p" * MIN_STATE_BYTES, "v": state}
        state.setdefault("pad", "p" * MIN_STATE_BYTES)
        text = codec.dumps(state)
        found = delta_for(chain, f"r{iteration}", iteration, state, text)
        if found is None:
            chain = Chain.whole(f"r{iteration}", iteration, text)
        else:
            delta, chain = found
            deltas += 1
            assert len(delta) < len(text)
        assert codec.dumps(chain.state) == text
    assert deltas > 1500  # most steps changed little (a chain ends when rebuilding reads 2x the state)


def test_with_hypothesis():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    scalars = st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats(allow_nan=False) | st.text(max_size=80)
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5),
                                                                                                inner, max_size=5),
                          max_leaves=30)

    @hypothesis.settings(max_examples=400, deadline=None)
    @hypothesis.given(values, values)
    def check(old, new):
        got = round_trip(old, new)
        if text(got) != text(new):  # == blind to 1 / 1.0 / True: the writer checks the text
            assert got == new
        for base in (old, {"k": old}):
            whole = text({"k": new, "pad": "p" * MIN_STATE_BYTES})
            chain = Chain.whole("r0", 0, text({"k": base, "pad": "p" * MIN_STATE_BYTES}))
            found = delta_for(chain, "r1", 1, {"k": new, "pad": "p" * MIN_STATE_BYTES}, whole)
            if found is not None:
                assert text(apply(chain.state, json.loads(found[0]))) == whole
    check()


def test_the_rule_for_a_whole_state():
    big = {"pad": "p" * MIN_STATE_BYTES, "n": 0}
    text = codec.dumps(big)
    chain = Chain.whole("r5", 5, text)
    changed = {**big, "n": 1}
    assert delta_for(None, "r6", 6, changed, codec.dumps(changed)) is None  # no base
    assert delta_for(chain, "r7", 7, changed, codec.dumps(changed)) is None  # not the iteration right after the base
    assert delta_for(Chain.whole("r5", 5, '{"n":0}'), "r6", 6, {"n": 1}, '{"n":1}') is None  # too small to bother
    replaced = {"pad": "q" * MIN_STATE_BYTES, "n": 0}
    assert delta_for(chain, "r6", 6, replaced, codec.dumps(replaced)) is None  # the delta is the whole state
    delta, longer = delta_for(chain, "r6", 6, changed, codec.dumps(changed))
    assert json.loads(delta) == ["{", {"n": ["=", 1]}] and longer.rows == 1 and longer.base_iteration == 5
    assert longer.row_id == "r6"
    longer.rows = MAX_CHAIN_ROWS
    again = {**big, "n": 2}
    assert delta_for(longer, "r7", 7, again, codec.dumps(again)) is None  # the chain is at its length
    heavy = Chain("r6", 6, changed, 5, len(text), delta_bytes=len(text))
    assert delta_for(heavy, "r7", 7, again, codec.dumps(again)) is None  # rebuilding would read > 2x the state


def test_a_delta_is_rebuilt_only_on_the_row_it_was_made_against():
    """Each delta names the row it applies to: a chain with a row missing, or
    another row in its place (a session deleted and made again under its id),
    rebuilds to MISSING from there on, never to a wrong state."""
    whole, d1, d2 = {"n": [0]}, ["{", {"n": ["[", 1, [1]]}], ["{", {"n": ["[", 2, [2]]}]
    stored = {0: ("r0", None, None, whole), 1: ("r1", 0, "r0", d1), 2: ("r2", 0, "r1", d2)}
    assert rebuild(stored, 0, 2) == {0: {"n": [0]}, 1: {"n": [0, 1]}, 2: {"n": [0, 1, 2]}}
    replaced = {**stored, 1: ("other", 0, "r0", d1)}
    assert rebuild(replaced, 0, 2)[2] is MISSING and rebuild(replaced, 0, 2)[1] == {"n": [0, 1]}
    gap = {0: stored[0], 2: stored[2]}
    assert rebuild(gap, 0, 2) == {0: {"n": [0]}, 2: MISSING}
    assert rebuild({**stored, 0: ("r0", 0, None, whole)}, 0, 2) == {0: MISSING, 1: MISSING, 2: MISSING}
