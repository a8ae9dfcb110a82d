"""The ``baml`` moniker on a real model: SmolLM2-135M-Instruct on llama.cpp's
server, with structured output on (``json_schema``) and off, first asks only.

    python -m bench.bench_llm [--steps 30] [--max-tokens 256] [--timeout-s 60] [--step-timeout-s 120]
                              [--base-url URL --model NAME] [--raw-out FILE.jsonl] [--quick]

Starts the server itself (tests/llm_server.py: the binary and the GGUF file
from ``.venv-llm``, a fixed ``--seed``), or uses a running one with
``--base-url``.  Calls ``baml_step`` directly (no service), ``--steps`` times
per mode, the two modes interleaved step by step so that drift on a shared
machine hits both alike.  Every step is one first ask (``max_reasks`` 0) at
temperature 0 with the fixed seed, bounded as the runner bounds it: the
context's ``deadline`` and a cancellation at ``--step-timeout-s``.

The tasks, in a fixed rotation: a joke, counting (the state the model returns
is the next step's input; after a failed step the bench supplies the expected
one, so the inputs keep moving), a call of ``time.get_current_time``, a
haiku, counting again, a call of ``search_history``.  The two tool tasks run
with both tools in ``ctx.tools`` (the schemas below); the others with none.
Topics, timezones and queries vary with the step so that deterministic
sampling does not repeat one prompt.

Per mode: the first-ask valid-frame rate (``baml_step`` returned a frame; how
many of those replies stopped at ``max_tokens`` and were completed by BAML's
lenient parser), tool calls (of the frames from tool steps: the fraction
naming an allowed tool with args valid against its schema, by the runner's
own check in tools/schema.py; the fraction of tool steps that made any call,
that called the asked tool with the asked args, that repeated a call), whether
counting carried the count, step time, tokens and output tokens per second,
HTTP attempts and their outcomes (``ctx.usage_calls``), timeouts, and what the
failures were (classified, with a few raw replies).  The machine's load and
other llama-server processes are noted: on two cores, two servers generating
at once each write a few tokens a second instead of ~100.
The issue's targets, checked per mode: >= 95 % valid frames on the first ask
and >= 80 % valid tool calls with ``json_schema``, and p99 step time within
the deadline with no timeouts.  Prints one JSON object; ``--raw-out`` writes
every step (input, reply, error, attempts) as JSON lines.
"""
import argparse
import asyncio
import collections
import json
import os
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import emit, machine, progress, summary  # noqa: E402
from monikers.baml_moniker import _reply_object, baml_step  # noqa: E402
from monikers.frame import FrameIn, StepContext, StepError  # noqa: E402
from tools.schema import args_problem  # noqa: E402

MODES = ("json_schema", "off")
TARGETS = {"valid_frame_rate_first_ask": 0.95, "valid_tool_call_rate": 0.80,
           "p99_step_within_deadline": True, "timeouts": 0}

TIME_TOOL = {
    "name": "time.get_current_time",
    "description": "Get the current time in a specific timezone",
    "args_schema": {"type": "object", "properties": {"timezone": {
        "type": "string", "description": "IANA timezone name (e.g. 'America/New_York', 'Europe/London'). "
                                         "Use 'UTC' if no timezone is given."}},
        "required": ["timezone"]},
}
SEARCH_TOOL = {
    "name": "search_history",
    "description": "Search your own history: summaries of past sessions, earlier steps, messages and tool calls.",
    "args_schema": {"type": "object", "properties": {"query": {"type": "string", "description": "words to look for"}},
                    "required": ["query"]},
}
TOOLS = [TIME_TOOL, SEARCH_TOOL]

JOKES = ["cats", "coffee", "programmers", "the moon", "penguins"]
HAIKUS = ["autumn rain", "the sea", "a train station", "snow", "morning coffee"]
ZONES = ["UTC", "Europe/Paris", "Asia/Tokyo", "America/New_York", "Australia/Sydney"]
QUERIES = ["cats", "invoice from March", "deployment errors", "the last summary", "weather"]
ROTATION = ["joke", "count", "time", "haiku", "count", "search"]
COUNT_TASK = ("Count up by one per step. Read state.count (0 when it is missing), add 1, store the new number in "
              "state.count and say it in text, e.g. \"3\". Never set done.")


class Counter:
    """The counting task's frame, carried from one step to the next of one mode."""

    def __init__(self):
        self.step, self.state, self.n = "0", {}, 0

    def frame(self) -> FrameIn:
        return FrameIn(step=self.step, state=self.state)

    def advance(self, out) -> bool:
        """Carry the model's frame on; returns whether it counted right.  After a
        failed step the expected frame is carried instead."""
        expected = self.n + 1
        if out is None:
            self.step, self.state, self.n = str(expected), {"count": expected}, expected
            return False
        got = out.state.get("count")
        right = isinstance(got, int) and not isinstance(got, bool) and got == expected
        self.step, self.state = out.next_step, dict(out.state)
        self.n = got if isinstance(got, int) and not isinstance(got, bool) else expected
        return right


def task_for(kind: str, i: int) -> tuple[str, list, tuple[str, dict] | None]:
    """(task text, ctx.tools, the call the task asks for: tool name and args)."""
    k = i // len(ROTATION)
    if kind == "joke":
        return f"Tell one short joke about {JOKES[k % len(JOKES)]}, then finish.", [], None
    if kind == "haiku":
        return f"Write a haiku about {HAIKUS[k % len(HAIKUS)]}, then finish.", [], None
    if kind == "count":
        return COUNT_TASK, [], None
    if kind == "time":
        zone = ZONES[k % len(ZONES)]
        return (f"Call the tool time.get_current_time with timezone {zone}. "
                "When you have its result, say the time and finish."), TOOLS, (TIME_TOOL["name"], {"timezone": zone})
    query = QUERIES[k % len(QUERIES)]
    return (f"Call the tool search_history with query \"{query}\". "
            "When you have its result, say what you found and finish."), TOOLS, (SEARCH_TOOL["name"], {"query": query})


def check_call(call, tools: list) -> str | None:
    """Why a tool call would be refused by the runner, or None."""
    by_name = {t["name"]: t for t in tools}
    if call.name not in by_name:
        return f"unknown tool {call.name!r}"
    return args_problem(by_name[call.name]["args_schema"], call.args)


def classify(error: str, raw: str | None, attempts: list[dict], max_tokens: int, cancelled: bool) -> str:
    """What kind of failure a failed step was."""
    if cancelled:
        return "cancelled at the step deadline"
    if any(a["outcome"] == "timeout" for a in attempts) or "deadline" in error:
        return "timeout"
    if "cut at max_tokens" in error or (attempts and attempts[-1]["outcome"] == "truncated"):
        return "truncated at max_tokens"
    if not error.startswith("unparseable"):
        return "endpoint: " + error.splitlines()[0][:80]
    if attempts and attempts[-1]["output_tokens"] >= max_tokens:
        return "truncated at max_tokens"
    if _first_object(raw) is None:
        return "no JSON object in the reply"
    if _reply_object(raw) is None:
        return "JSON of the wrong shape (no next_step)"
    return "a frame the moniker rejected"


def _first_object(raw: str | None) -> dict | None:
    decoder, start = json.JSONDecoder(), 0
    while raw and (start := raw.find("{", start)) >= 0:
        try:
            value, _ = decoder.raw_decode(raw, start)
            if isinstance(value, dict):
                return value
        except ValueError:
            pass
        start += 1
    return None


async def one_step(config: dict, frame: FrameIn, task: str, tools: list, step_timeout_s: float) -> dict:
    """One first ask; what happened, with the reply as streamed."""
    finals: dict[int, str] = {}

    def on_output(delta: dict) -> None:
        if delta.get("final"):
            finals[delta["attempt"]] = delta["text"]

    ctx = StepContext(task=task, agent_id="bench", session_id="bench-llm", iteration=0, config=config,
                      tools=tools, deadline=time.monotonic() + step_timeout_s, on_output=on_output)
    out, error, raw, cancelled = None, None, None, False
    started = time.perf_counter()
    try:
        out = await asyncio.wait_for(baml_step(frame, ctx), timeout=step_timeout_s)
    except asyncio.TimeoutError:
        error, cancelled = f"cancelled at the step deadline ({step_timeout_s:g}s)", True
    except StepError as exc:
        error, raw = str(exc), exc.raw_output
    elapsed_ms = (time.perf_counter() - started) * 1000
    attempts = [a for c in ctx.usage_calls for a in c.get("attempts", [])]
    if raw is None and finals:
        raw = finals[max(finals)]
    return {"out": out, "error": error, "raw": raw, "cancelled": cancelled, "ms": elapsed_ms,
            "attempts": attempts, "calls": ctx.usage_calls,
            "tokens_in": sum(c["input_tokens"] for c in ctx.usage_calls),
            "tokens_out": sum(c["output_tokens"] for c in ctx.usage_calls)}


class ModeStats:
    def __init__(self, mode: str, max_tokens: int):
        self.mode, self.max_tokens = mode, max_tokens
        self.steps = self.valid = self.valid_raw_json = self.valid_at_cap = 0
        self.truncated = self.replies = 0
        self.ms: list[float] = []
        self.tokens_in: list[int] = []
        self.tokens_out: list[int] = []
        self.attempts: list[int] = []
        self.outcomes: collections.Counter = collections.Counter()
        self.estimated_attempts = self.timeouts = 0
        self.by_task: dict[str, collections.Counter] = {}
        self.failure_kinds: collections.Counter = collections.Counter()
        self.failure_samples: list[dict] = []
        self.tool_steps = self.tool_steps_valid = self.tool_steps_with_call = self.tool_steps_asked_tool = 0
        self.tool_steps_asked_call = self.tool_steps_repeating = self.done = 0
        self.calls_per_step: list[int] = []
        self.rates: list[float] = []  # output tokens per second of each attempt, prompt included
        self.calls = self.calls_ok = 0
        self.call_problems: collections.Counter = collections.Counter()
        self.calls_without_tools = 0
        self.count_steps = self.count_right = 0

    def add(self, kind: str, r: dict, tools: list, asked: tuple | None, counted: bool | None, samples: int) -> None:
        self.steps += 1
        self.ms.append(r["ms"])
        self.tokens_in.append(r["tokens_in"])
        self.tokens_out.append(r["tokens_out"])
        self.attempts.append(len(r["attempts"]))
        for a in r["attempts"]:
            self.outcomes[a["outcome"]] += 1
            if a["duration_ms"] > 0 and a["output_tokens"]:
                self.rates.append(a["output_tokens"] / (a["duration_ms"] / 1000))
            self.estimated_attempts += bool(a.get("estimated"))
        self.timeouts += sum(a["outcome"] == "timeout" for a in r["attempts"]) + r["cancelled"]
        # a reply cut at max_tokens is not a frame (the moniker re-asks it shorter): counted apart, never "valid"
        self.truncated += sum(a["outcome"] == "truncated" or bool(a.get("truncated")) for a in r["attempts"])
        self.replies += len(r["attempts"])
        task = self.by_task.setdefault(kind, collections.Counter())
        task["steps"] += 1
        at_cap = any(a["output_tokens"] >= self.max_tokens for a in r["attempts"])
        out = r["out"]
        if out is not None:
            self.valid += 1
            task["valid"] += 1
            self.valid_at_cap += at_cap
            self.done += out.done
            try:
                json.loads(r["raw"] or "")
                self.valid_raw_json += 1
            except ValueError:
                pass
        else:
            why = classify(r["error"], r["raw"], r["attempts"], self.max_tokens, r["cancelled"])
            self.failure_kinds[why] += 1
            if len(self.failure_samples) < samples:
                raw = r["raw"] or ""
                self.failure_samples.append({
                    "task": kind, "kind": why, "error": (r["error"] or "").splitlines()[0][:300],
                    "output_tokens": r["tokens_out"], "raw_chars": len(raw),
                    "raw_head": raw[:300], "raw_tail": raw[-200:] if len(raw) > 300 else ""})
        if counted is not None:
            self.count_steps += 1
            self.count_right += counted
        if not tools:
            self.calls_without_tools += len(out.tool_calls) if out is not None else 0
            return
        self.tool_steps += 1
        if out is None:
            return
        self.tool_steps_valid += 1
        self.tool_steps_with_call += bool(out.tool_calls)
        self.tool_steps_asked_tool += any(c.name == asked[0] for c in out.tool_calls)
        self.tool_steps_asked_call += any((c.name, c.args) == asked for c in out.tool_calls)
        seen = [json.dumps([c.name, c.args], sort_keys=True) for c in out.tool_calls]
        self.tool_steps_repeating += len(set(seen)) < len(seen)
        self.calls_per_step.append(len(seen))
        for call in out.tool_calls:
            self.calls += 1
            problem = check_call(call, tools)
            if problem is None:
                self.calls_ok += 1
            else:
                self.call_problems[problem[:120]] += 1

    def result(self, step_timeout_s: float) -> dict:
        rate = lambda a, b: round(a / b, 3) if b else None  # noqa: E731
        mean = lambda v: round(statistics.fmean(v), 1) if v else None  # noqa: E731
        times = summary(self.ms)
        valid_rate, call_rate = rate(self.valid, self.steps), rate(self.calls_ok, self.calls)
        within = times["p99_ms"] is not None and times["p99_ms"] <= step_timeout_s * 1000
        targets = {
            "valid_frame_rate_first_ask": (valid_rate or 0) >= TARGETS["valid_frame_rate_first_ask"],
            "valid_tool_call_rate": (call_rate or 0) >= TARGETS["valid_tool_call_rate"],
            "p99_step_within_deadline_no_timeouts": within and self.timeouts == 0,
        }
        return {
            "steps": self.steps,
            "valid_frames": self.valid,
            "valid_frame_rate_first_ask": valid_rate,
            "valid_frames_whose_reply_is_plain_json": self.valid_raw_json,
            "valid_frames_at_max_tokens": self.valid_at_cap,
            "valid_frames_under_max_tokens_rate": rate(self.valid - self.valid_at_cap, self.steps),
            "valid_frames_done": self.done,
            "truncated_replies": self.truncated,
            "truncated_reply_rate": rate(self.truncated, self.replies),
            "by_task": {k: {"steps": v["steps"], "valid": v["valid"]} for k, v in self.by_task.items()},
            "counting": {"steps": self.count_steps, "counted_right": self.count_right},
            "tools": {
                "tool_steps": self.tool_steps, "tool_steps_valid_frame": self.tool_steps_valid,
                "tool_steps_with_any_call": self.tool_steps_with_call,
                "any_call_rate": rate(self.tool_steps_with_call, self.tool_steps),
                "asked_tool_called_rate": rate(self.tool_steps_asked_tool, self.tool_steps),
                "asked_call_exact_rate": rate(self.tool_steps_asked_call, self.tool_steps),
                "tool_steps_repeating_a_call": self.tool_steps_repeating,
                "calls_per_tool_step_max": max(self.calls_per_step, default=None),
                "calls": self.calls, "calls_valid": self.calls_ok, "valid_tool_call_rate": call_rate,
                "call_problems": dict(self.call_problems.most_common(5)),
                "calls_on_steps_without_tools": self.calls_without_tools,
            },
            "step_time": times,
            "tokens_per_step": {"in_mean": mean(self.tokens_in), "out_mean": mean(self.tokens_out),
                                "out_max": max(self.tokens_out, default=None)},
            "output_tokens_per_s_p50": round(statistics.median(self.rates), 1) if self.rates else None,
            "http_attempts_per_step": {"mean": mean(self.attempts) if self.attempts else None,
                                       "max": max(self.attempts, default=None)},
            "attempt_outcomes": dict(self.outcomes),
            "attempts_with_estimated_tokens": self.estimated_attempts,
            "timeouts": self.timeouts,
            "failure_kinds": dict(self.failure_kinds.most_common()),
            "failure_samples": self.failure_samples,
            "targets_met": targets,
        }


async def run(args, own_pid: int | None, others: list[int]) -> dict:
    """The steps; ``others`` gets the number of other llama-servers seen before each step."""
    from tests import llm_server

    stats = {mode: ModeStats(mode, args.max_tokens) for mode in MODES}
    counters = {mode: Counter() for mode in MODES}
    raw_out = open(args.raw_out, "w") if args.raw_out else None
    try:
        for i in range(args.steps):
            kind = ROTATION[i % len(ROTATION)]
            task, tools, asked = task_for(kind, i)
            for mode in MODES:
                others.append(other_llama_servers(own_pid))
                config = {"llm": llm_server.llm_config(model=args.model, structured=mode,
                                                       max_tokens=args.max_tokens, timeout_s=args.timeout_s,
                                                       max_reasks=0)}
                frame = counters[mode].frame() if kind == "count" else FrameIn(step="0", state={})
                r = await one_step(config, frame, task, tools, args.step_timeout_s)
                counted = counters[mode].advance(r["out"]) if kind == "count" else None
                stats[mode].add(kind, r, tools, asked, counted, args.samples)
                calls = f" calls={[c.name for c in r['out'].tool_calls]}" if r["out"] is not None and tools else ""
                progress(f"step {i + 1}/{args.steps} {kind:6} {mode:11} "
                         f"{'valid' if r['out'] is not None else 'FAILED'} {r['ms'] / 1000:.1f}s "
                         f"{r['tokens_out']} tokens out{calls}")
                if raw_out is not None:
                    raw_out.write(json.dumps({
                        "i": i, "mode": mode, "task_kind": kind, "task": task, "frame_in": frame.model_dump(),
                        "tools": [t["name"] for t in tools], "valid": r["out"] is not None,
                        "frame_out": r["out"].model_dump() if r["out"] is not None else None,
                        "error": r["error"], "raw": r["raw"], "ms": round(r["ms"], 1), "calls": r["calls"]}) + "\n")
    finally:
        if raw_out is not None:
            raw_out.close()
    return {mode: stats[mode].result(args.step_timeout_s) for mode in MODES}


def load() -> dict:
    return dict(zip(("1m", "5m", "15m"), (round(v, 2) for v in os.getloadavg())))


def other_llama_servers(own_pid: int | None) -> int:
    """How many other llama-server processes run on this machine: on two cores a
    second one generating at the same time slows both by an order of magnitude."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0]
        except OSError:
            continue
        count += os.path.basename(argv0) == b"llama-server" and int(pid) != own_pid
    return count


def _stop_our_servers() -> None:
    """Stop a llama-server child of ours that tests/llm_server.start left behind
    when it was interrupted or timed out before handing it back."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0]
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and os.path.basename(argv0) == b"llama-server":
            progress(f"stopping llama-server {pid}")
            os.kill(int(pid), signal.SIGTERM)


def _stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt  # so the finally below stops the server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30, help="steps per mode (default 30)")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--timeout-s", type=float, default=60.0, help="llm timeout_s, per HTTP request")
    parser.add_argument("--step-timeout-s", type=float, default=120.0, help="the step's deadline")
    parser.add_argument("--base-url", help="a running OpenAI-compatible server (.../v1) instead of starting one")
    parser.add_argument("--model", help="the model name at --base-url (default: the local SmolLM2 file's)")
    parser.add_argument("--samples", type=int, default=3, help="failing replies kept per mode (default 3)")
    parser.add_argument("--raw-out", help="write every step as a JSON line to this file")
    parser.add_argument("--quick", action="store_true", help="2 steps per mode")
    args = parser.parse_args()
    if args.quick:
        args.steps = 2
    signal.signal(signal.SIGTERM, _stop_on_sigterm)

    import pytest  # tests/llm_server.py says "not installed" with pytest.skip

    from monikers.llm_settings import resolve_settings
    from tests import llm_server

    args.model = args.model or llm_server.MODEL_NAME
    effective = resolve_settings({"llm": llm_server.llm_config(model=args.model)})
    info = machine()
    load_start = load()
    proc, server_flags, log_dir, interrupted, others = None, None, None, False, []
    try:
        if args.base_url:
            base_url, server_flags = args.base_url.rstrip("/"), "external (--base-url)"
        else:
            log_dir = tempfile.mkdtemp(prefix="bench-llm-")
            progress(f"starting llama-server ({args.model}); log in {log_dir}")
            try:
                proc, base_url = llm_server.start(log_dir)
            except (pytest.skip.Exception, pytest.fail.Exception) as exc:  # tests/llm_server.py's "not installed"
                sys.exit(f"bench_llm: {exc}")
            argv = list(proc.proc.args)
            server_flags = [os.path.basename(argv[0])] + [os.path.basename(a) if a.endswith(".gguf") else a
                                                          for a in argv[1:]]
        own_pid = proc.proc.pid if proc is not None else None
        if (others_start := other_llama_servers(own_pid)) > bool(args.base_url):
            progress(f"{others_start - bool(args.base_url)} other llama-server process(es) running: "
                     "if they generate, both slow down a lot")
        started = time.monotonic()
        os.environ["AGENTSVC_LLM_BASE_URL"] = base_url  # the default endpoint of the steps run in this process
        modes = asyncio.run(run(args, own_pid, others))
        wall_s = round(time.monotonic() - started, 1)
    except KeyboardInterrupt:
        progress("interrupted")
        interrupted = True
    finally:
        if proc is not None:
            progress("stopping llama-server")
            proc.stop()
        elif not args.base_url:
            _stop_our_servers()
    if interrupted:
        sys.exit(130)
    emit({
        "benchmark": "llm",
        "machine": {**info, "load_at_start": load_start, "load_at_end": load(),
                    "other_llama_servers": {"at_start": others[0] if others else None, "max": max(others, default=None),
                                            "steps_with_another": sum(n > bool(args.base_url) for n in others),
                                            "count_the_server_used": bool(args.base_url)}},
        "model": args.model,
        "server": {"base_url": base_url, "flags": server_flags, "log_dir": log_dir},
        "settings": {"steps_per_mode": args.steps, "max_tokens": args.max_tokens, "timeout_s": args.timeout_s,
                     "step_deadline_s": args.step_timeout_s, "max_reasks": 0, "temperature": 0.0,
                     "seed": llm_server.SEED, "stream": effective.stream, "rotation": ROTATION,
                     "tools": [t["name"] for t in TOOLS]},
        "wall_s": wall_s,
        "modes": modes,
        "targets": {"structured_mode": "json_schema", **TARGETS},
        "targets_met": modes["json_schema"]["targets_met"],
    })


if __name__ == "__main__":
    main()
