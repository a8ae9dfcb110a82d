"""monikers/: the StepFrame contract, the built-ins and plugin discovery."""
import asyncio
import sys
import textwrap

import pytest
from pydantic import ValidationError

from monikers import FrameIn, FrameOut, MonikerRegistry, StepContext, default_registry
from monikers.builtin import subject_of


def ctx(task="", **config):
    return StepContext(task=task, agent_id="a", session_id="s", iteration=0, config=config)


def run(moniker, frame, context):
    return asyncio.run(moniker.step(frame, context))


def test_frame_out_requires_tokens_and_rejects_unknown_fields():
    FrameOut(step="0", next_step="1")
    for bad in ({"next_step": "1"}, {"step": "0"}, {"step": "0", "next_step": "1", "extra": 1},
                {"step": "0", "next_step": "1", "state": [1, 2]}, {"step": "0", "next_step": 2}):
        with pytest.raises(ValidationError):
            FrameOut.model_validate(bad)


def test_joke_changes_subject_on_guidance():
    registry = default_registry()
    joke = registry.get("joke")
    first = run(joke, FrameIn(step="0", state={}), ctx("tell jokes about cats"))
    assert "cats" in first.text and first.state == {"subject": "cats", "told": 1}
    steered = run(joke, FrameIn(step="1", state=first.state, guidance="Tell jokes about dogs!"), ctx("x"))
    assert "dogs" in steered.text and steered.state["subject"] == "dogs" and "dogs" in steered.notes
    assert subject_of("penguins") == "penguins"
    limited = run(joke, FrameIn(step="0", state={"subject": "x", "told": 2}), ctx("", jokes=3))
    assert limited.done


def test_countdown_finishes_after_n_steps():
    countdown = default_registry().get("countdown")
    state, outs = {}, []
    for _ in range(3):
        out = run(countdown, FrameIn(step="0", state=state), ctx(n=3))
        state = out.state
        outs.append(out.done)
    assert outs == [False, False, True]


def test_plugins_load_from_entry_points_and_broken_ones_are_skipped(tmp_path, monkeypatch, caplog):
    pkg = tmp_path / "shouty_plugin.py"
    pkg.write_text(textwrap.dedent('''
        from monikers import FrameOut, Moniker

        async def step(frame, ctx):
            return FrameOut(step=frame.step, next_step=frame.step, text=ctx.task.upper())

        SHOUT = Moniker("shout", step, "Shouts its task.")
    '''))
    dist = tmp_path / "shouty_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: shouty-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[agentsvc.monikers]\nshout = shouty_plugin:SHOUT\nbroken = shouty_plugin:MISSING\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = MonikerRegistry()
    assert registry.load_entry_points() == ["shout"]
    assert "broken" in caplog.text
    out = run(registry.get("shout"), FrameIn(step="0"), ctx("hello"))
    assert out.text == "HELLO"
    assert "shout" in default_registry().names()
    sys.modules.pop("shouty_plugin", None)


def test_jokes_are_grammatical_and_echo_says_nothing_without_guidance():
    """Found by hand: 'a programmers', 'A dogs walks', and an echo agent
    that flooded its conversation with '(nothing to echo)'."""
    registry = default_registry()
    joke = registry.get("joke")
    state, texts = {}, []
    for i in range(8):
        out = run(joke, FrameIn(step=str(i), state=state), ctx("tell jokes about dogs"))
        state, texts = out.state, texts + [out.text]
    joined = " ".join(texts)
    assert "Three dogs walk" in joined and "call dogs that tell" in joined and "How many dogs" in joined
    assert "dogs walks" not in joined and "a dogs" not in joined and "A dogs" not in joined
    penguin = run(joke, FrameIn(step="0", state={}), ctx("tell jokes about a penguin"))
    assert "penguins" in penguin.text and "a penguins" not in penguin.text
    echo = registry.get("echo")
    assert run(echo, FrameIn(step="0", state={}), ctx("x")).text is None
    assert run(echo, FrameIn(step="0", state={}, guidance="hi"), ctx("x")).text == "hi"


def test_every_builtin_moniker_declares_its_config():
    """So the API can refuse keys that are neither the runner's nor the moniker's."""
    registry = default_registry()
    for name in registry.names():
        assert registry.get(name).config_model is not None, name
