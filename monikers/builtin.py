"""Built-in monikers: deterministic, no network.

- ``joke``: tells jokes about the subject of its task; guidance changes the subject.
- ``countdown``: counts down from ``config.n`` (default 3) and finishes at zero.
- ``echo``: repeats whatever guidance it receives; handy for watching steering.

Monikers that exist only to test crashes and limits are not here: they are the
tests' plugins (tests/plugins.py), registered only where the tests ask.
"""
import re

from pydantic import BaseModel, ConfigDict, Field

from domain.json_types import JsonInt, json_int

from monikers.frame import FrameIn, FrameOut, Moniker, StepContext


class _Config(BaseModel):
    """A moniker's own config keys; anything else (besides the runner's keys) is refused at create."""

    model_config = ConfigDict(extra="forbid", strict=True)


class JokeConfig(_Config):
    jokes: json_int(ge=1, le=1_000_000) | None = Field(None,
                                                       description="be done after this many jokes (empty: never)")


class CountdownConfig(_Config):
    n: JsonInt = Field(3, ge=1, le=1_000_000, description="how many steps to count down")


class EchoConfig(_Config):
    pass


# Every joke names the subject in the plural, as it was given ("cats"), so that
# the grammar holds ("Three cats walk", never "A cats walks").
JOKES = [
    "Why do {p} sit on computers? To keep an eye on the mouse.",
    "I told some {p} a joke about infinity. They are still laughing.",
    "What do you call {p} that tell jokes? Pun-{p}.",
    "My {p} asked for a raise. I said: only in the next iteration.",
    "Three {p} walk into a bar. The bartender says: we don't serve your kind here. They reply: that's fine, "
    "we're just here for the punchline.",
    "Why were the {p} so calm? They had excellent exception handling.",
    "How many {p} does it take to change a light bulb? Just one, but it takes three steps.",
    "The {p} stopped telling jokes about UDP. Nobody got them.",
]


def plural(subject: str) -> str:
    """'cats' stays 'cats'; 'a penguin' becomes 'penguins' (a naive rule, good enough for jokes)."""
    subject = re.sub(r"^(a|an|the)\s+", "", subject, flags=re.IGNORECASE) or subject
    return subject if subject.lower().endswith("s") else subject + "s"

_ABOUT = re.compile(r"\babout\s+(.+)$", re.IGNORECASE)


def subject_of(text: str) -> str:
    """'tell jokes about ducks' -> 'ducks'; anything else is taken as the subject itself."""
    text = text.strip().rstrip(".!?")
    match = _ABOUT.search(text)
    subject = (match.group(1) if match else text).strip()
    return subject[:80] or "programmer"


async def joke_step(frame: FrameIn, ctx: StepContext) -> FrameOut:
    state = dict(frame.state)
    subject = state.get("subject") or subject_of(ctx.task or "programmers")
    notes = None
    if frame.guidance:
        new_subject = subject_of(frame.guidance.splitlines()[-1])
        notes = f"subject changed from {subject!r} to {new_subject!r}"
        subject = new_subject
    told = int(state.get("told", 0))
    text = JOKES[told % len(JOKES)].format(p=plural(subject))
    told += 1
    limit = ctx.config.get("jokes")
    done = isinstance(limit, int) and told >= limit
    return FrameOut(step=frame.step, next_step=str(told), state={"subject": subject, "told": told},
                    text=text, data={"subject": subject, "joke_number": told}, done=done, notes=notes)


async def countdown_step(frame: FrameIn, ctx: StepContext) -> FrameOut:
    remaining = frame.state.get("remaining")
    if remaining is None:
        remaining = int(ctx.config.get("n", 3))
    remaining -= 1
    return FrameOut(step=frame.step, next_step=str(remaining), state={"remaining": remaining},
                    text=f"{remaining} to go" if remaining > 0 else "liftoff",
                    data={"remaining": remaining}, done=remaining <= 0)


async def echo_step(frame: FrameIn, ctx: StepContext) -> FrameOut:
    heard = list(frame.state.get("heard", []))
    if frame.guidance:
        heard.append(frame.guidance)
    n = int(frame.state.get("n", 0)) + 1
    return FrameOut(step=frame.step, next_step=str(n), state={"n": n, "heard": heard[-20:]},
                    text=frame.guidance, data={"guidance": frame.guidance})


JOKE = Moniker("joke", joke_step, "Tells jokes about its task's subject; guidance changes the subject.",
               config_model=JokeConfig)
COUNTDOWN = Moniker("countdown", countdown_step, "Counts down from config.n (default 3), then is done.",
                    config_model=CountdownConfig)
ECHO = Moniker("echo", echo_step, "Repeats the guidance it receives at each step.", config_model=EchoConfig)

BUILTINS = (JOKE, COUNTDOWN, ECHO)
