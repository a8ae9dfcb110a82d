"""What profiles cost: loading a directory, and the per-step hooks.

    python bench/bench_profiles.py [--profiles 200] [--steps 2000]

1. Load and check ``--profiles`` copies of the shipped researcher profile
   (YAML parse with line marks, pydantic validation, reference checks).
2. Per step of a session with that profile: rendering the system prompt, the
   before_step and after_step hooks (3 observers incl. 1 python-free
   predicate set, no flow rules) — what the runner adds to every step —
   against a session without a profile (the no-op hooks).
Prints one JSON object.
"""
import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from monikers import default_registry  # noqa: E402
from monikers.frame import FrameOut  # noqa: E402
from profiles.hooks import SessionHooks  # noqa: E402
from profiles.loader import ProfileLibrary  # noqa: E402
from profiles.resolve import base_config  # noqa: E402
from domain.session_config import SessionConfig  # noqa: E402
from tools.catalog import installed_registry  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FakeAgent(SimpleNamespace):
    """The attributes the hooks read from a SessionAgent."""

    def peek_guidance(self):
        return list(self.pending_guidance)

    def add_inbox_item(self, action_id, kind, text, **kw):
        self.pending_guidance.append({"action_id": action_id, "kind": kind, "text": text})
        return True

    def note_status(self, status, reason):
        self.status, self.status_reason = status, reason

    def request_pause(self):
        pass


def agent(config) -> FakeAgent:
    return FakeAgent(task_text="a task", extra={"name": "bench"}, agent_id="a", session_id="s", config=config,
                     status="running", status_reason=None, iteration=0, state={}, usage=None, pending_guidance=[],
                     stop_requested=False, pause_requested=False, finished=False)


async def per_step_us(hooks: SessionHooks, config, steps: int) -> float:
    a = agent(config)
    out = FrameOut(step="0", next_step="1", text="Shall I fetch the page?", state={})
    started = time.perf_counter()
    for i in range(steps):
        a.iteration, a.pending_guidance, a.status = i - 1, [], "running"
        hooks.system_prompt(a, i)
        await hooks.before_step(a)
        record = await hooks.after_step(a, i, out, [])
        hooks.apply(a, record, i)
    return (time.perf_counter() - started) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profiles", type=int, default=200)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    tools, monikers = installed_registry(), default_registry()
    directory = tempfile.mkdtemp()
    try:
        source = open(os.path.join(ROOT, "profiles", "researcher.yaml")).read()
        for i in range(args.profiles):
            with open(os.path.join(directory, f"r{i}.yaml"), "w") as f:
                f.write(source.replace("name: researcher", f"name: r{i}"))
        lib = ProfileLibrary(directory, monikers=monikers, tool_names=lambda: set(tools.names()))
        loads = []
        for _ in range(3):
            started = time.perf_counter()
            lib.load()
            loads.append(time.perf_counter() - started)
        config = SessionConfig.model_validate(base_config(lib.get("r0")))
    finally:
        shutil.rmtree(directory)
    with_profile = asyncio.run(per_step_us(SessionHooks.for_config(config), config, args.steps))
    plain = SessionConfig()
    without = asyncio.run(per_step_us(SessionHooks.for_config(plain), plain, args.steps))
    print(json.dumps({
        "profiles": args.profiles, "load_s_median": round(statistics.median(loads), 4),
        "load_ms_per_profile": round(statistics.median(loads) / args.profiles * 1000, 3),
        "hooks_us_per_step_with_profile": round(with_profile, 1),
        "hooks_us_per_step_without_profile": round(without, 1),
    }))


if __name__ == "__main__":
    main()
