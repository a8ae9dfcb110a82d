"""Built-in monikers: deterministic, no network.

- ``joke``: tells jokes about the subject of its task; guidance changes the subject.
- ``countdown``: counts down from ``config.n`` (default 3) and finishes at zero.
- ``echo``: repeats whatever guidance it receives; handy for watching steering.
- ``chaos``: behaves like a counter, then fails on purpose at step ``config.fail_at``
  (``mode``: raise | hang | garbage).  It exists to test that one bad agent
  cannot hurt the others.
"""
import asyncio
import re

from monikers.frame import FrameIn, FrameOut, Moniker, StepContext

JOKES = [
    "Why did the {s} sit on the computer? To keep an eye on the mouse.",
    "I told my {s} a joke about infinity. It is still laughing.",
    "What do you call a {s} that tells jokes? A pun-{s}.",
    "My {s} asked for a raise. I said: only in the next iteration.",
    "A {s} walks into a bar. The bartender says: we don't serve your kind here. The {s} replies: that's fine, I'm just here for the punchline.",
    "Why was the {s} so calm? It had excellent exception handling.",
    "How many {s}s does it take to change a light bulb? Just one, but it takes three steps.",
    "The {s} stopped telling jokes about UDP. Nobody got them.",
]

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
    text = JOKES[told % len(JOKES)].format(s=subject)
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
                    text=frame.guidance or "(nothing to echo)", data={"guidance": frame.guidance})


async def chaos_step(frame: FrameIn, ctx: StepContext):
    n = int(frame.state.get("n", 0))
    if n + 1 >= int(ctx.config.get("fail_at", 1)):
        mode = ctx.config.get("mode", "raise")
        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "garbage":
            return {"this": "is not a frame", "next_step": 42}
        raise RuntimeError(f"chaos: failing on purpose at step {n + 1}")
    return FrameOut(step=frame.step, next_step=str(n + 1), state={"n": n + 1}, text=f"step {n + 1} fine")


JOKE = Moniker("joke", joke_step, "Tells jokes about its task's subject; guidance changes the subject.")
COUNTDOWN = Moniker("countdown", countdown_step, "Counts down from config.n (default 3), then is done.")
ECHO = Moniker("echo", echo_step, "Repeats the guidance it receives at each step.")
CHAOS = Moniker("chaos", chaos_step, "Test moniker: fails at step config.fail_at (mode raise | hang | garbage).")

BUILTINS = (JOKE, COUNTDOWN, ECHO, CHAOS)
