"""The ``scripted`` moniker: returns the frames listed in its config, one per step.

    {"moniker": "scripted", "config": {"tools": ["add"], "frames": [
        {"text": "adding", "tool_calls": [{"name": "add", "args": {"numbers": [1, 2]}}]},
        {"text": "done", "done": true}]}}

Each entry is a StepFrame-v1 frame_out; ``step`` and ``next_step`` are filled
in when absent (this step's token, and the index of the next frame).  The
moniker keeps its place in ``state["_scripted"]`` beside whatever state a frame
sets, so a frame's own state survives.  After the last frame the session is
done.  This drives any flow, tool calls included, without an LLM: for tests,
and for users testing their own tools.
"""
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from monikers.llm_settings import LLMConfig
from monikers.frame import FrameIn, FrameOut, Moniker, StepContext

PLACE = "_scripted"


class ScriptedConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    frames: list[dict[str, Any]] = Field(default_factory=list, max_length=10_000,
                                         description="frame_out objects returned one per step")
    llm: LLMConfig | None = Field(None, description="a model for what is written about the session (turn and "
                                                    "archive summaries); the steps themselves never call it")


async def scripted_step(frame: FrameIn, ctx: StepContext) -> FrameOut:
    frames = ScriptedConfig.model_validate(ctx.config).frames
    place = int(frame.state.get(PLACE, 0))
    if place >= len(frames):
        return FrameOut(step=frame.step, next_step=frame.step, state=dict(frame.state),
                        text="(script finished)", done=True)
    scripted = dict(frames[place])
    # pretend model usage, for budget tests: {input_tokens, output_tokens, cost}, and its HTTP
    # attempts, for the step filters: attempts [{outcome, ...}] (monikers/llm_call.py records them so)
    usage = scripted.pop("usage", None)
    if isinstance(usage, dict):
        tried = usage.get("attempts")
        ctx.record_usage(model="scripted", input_tokens=usage.get("input_tokens", 0),
                         output_tokens=usage.get("output_tokens", 0), cost=usage.get("cost"),
                         **({"attempts": tried} if isinstance(tried, list) else {}))
    state = {k: v for k, v in frame.state.items() if k != PLACE}
    state.update(scripted.get("state") or {})
    state[PLACE] = place + 1
    scripted.update(step=scripted.get("step") or frame.step, next_step=scripted.get("next_step") or str(place + 1),
                    state=state)
    return FrameOut.model_validate(scripted)


SCRIPTED = Moniker("scripted", scripted_step,
                   "Returns the frames in config.frames, one per step (tool calls included); for tests.",
                   config_model=ScriptedConfig)
