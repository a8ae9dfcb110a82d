"""Small tasks a user would try, on a real model, scored by the project's own
eval runner (issue 39 part 5).

    python -m bench.bench_tasks [--structured grammar,json_schema] [--tasks france,add,...] [--quick]
                                [--max-steps 6] [--step-timeout-s 300] [--timeout-s 240]
                                [--base-url URL --model NAME] [--json-out FILE]

What it does, with the service's own pieces throughout:

1. Starts llama.cpp (tests/llm_server.py: SmolLM2-135M-Instruct, a fixed
   seed; or uses ``--base-url``) and the service (tests/harness.py
   ``Service``: agents.py and app.py) pointed at it, with the reference MCP
   time server as tools (tests/mcp_reference.py) and this bench's scorers as a
   plugin (``AGENTSVC_PLUGINS=bench.task_scorers``).
2. Records one *source* session per task with the ``scripted`` moniker: its
   frames are what a right agent does (the calls it makes, the answer, then
   ``done``), and its state carries the task's ``check`` for the
   ``task_right`` scorer (``state._check``: a replay from step 0 starts from
   an empty state, so the model never sees it).  The guidance task gets its guidance through the API
   (``interrupt``) after its first step, and the ``ask_user`` task its answer
   (``POST /api/sessions/<id>/answer``), so both are in the record.
3. Freezes the sources as an eval set (``POST /api/evalsets``) and, per
   structured mode, starts ONE eval run (``POST /api/evalsets/<id>/runs``) with
   moniker ``baml``, ``tools: "live"`` (the model's calls run for real: the
   recording's calls are not the model's) and the run's config (``llm`` with
   the mode, ``max_steps``, ``interval_s`` 0).  agents.py replays every
   source under the model, delivering the recorded guidance at the step the
   recording consumed it (runtime/session/replay.py), and scores each replay.
4. The ``ask_user`` task is the one a replay cannot express: a live
   ``ask_user`` call leaves the replay ``waiting``, and the eval runner scores
   a waiting replay at once (its turn is over: runtime/record/eval_runner.py),
   before anyone could answer.  So it is run as a live session instead (the
   same task and runner config as its replay would get), answered "yellow"
   through the API whenever it asks, and scored in this process by the same
   scorers (evals/scorers.py and bench/task_scorers.py) against its source.
   Its row says ``"how": "live"``.

Per mode it prints, per task and in total: finished by the agent (done by its
own ``done``, not ``max_steps``), right (``task_right``), right and finished,
``final_contains`` (the recorded answer inside the replay's), steps, identical
repeated calls, truncated replies (attempts cut at ``max_tokens``, of all),
and p50/p99 step time; beside the issue's targets (finished >= 80 %, right and
finished >= 60 %, 0 identical repeats, <= 5 % truncated).  One JSON object on
stdout (and in ``--json-out``); a table and progress on stderr.
"""
import argparse
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import emit, machine, pct, progress  # noqa: E402
from bench.task_scorers import CHECK_KEY  # noqa: E402

MODES = ("grammar", "json_schema")
SCORERS = ["task_right", "finished_by_agent", "right_and_finished", "final_contains", "steps",
           "identical_repeats", "truncated_replies", "step_times", "errors"]
PLUGIN = "bench.task_scorers"
TARGETS = {"finished_rate": 0.80, "right_and_finished_rate": 0.60, "identical_repeats": 0,
           "truncated_rate": 0.05}
ENDED = ("done", "stopped", "error")


@dataclass
class Task:
    """One task: its text, the frames of its scripted source (a right agent's
    steps; the last one's text is the reference answer ``final_contains``
    looks for), and the ``check`` ``task_right`` applies (bench/task_scorers.py)."""

    id: str
    task: str
    frames: list[dict]
    check: dict
    tools: list[str] = field(default_factory=list)
    guidance: str | None = None  # sent after the source's first step
    answer: str | None = None  # given to every ask_user question: run live, not replayed


def _say(text: str) -> list[dict]:
    return [{"text": text, "done": True}]


TASKS = [
    Task("france", "What is the capital of France? Answer, then finish.", _say("Paris"), {"text": [r"\bparis\b"]}),
    Task("add", "What is 17 + 25? Answer with the number, then finish.", _say("42"), {"text": [r"\b42\b"]}),
    Task("time", 'Call the tool time.get_current_time with timezone "UTC", then say the time and finish.',
         [{"text": "Asking the clock.", "tool_calls": [{"name": "time.get_current_time", "args": {"timezone": "UTC"}}]},
          {"text": "The time in UTC is the one the tool returned.", "done": True}],
         {"calls": ["time.get_current_time"], "text": [r"\b\d{1,2}:\d{2}\b"]}, tools=["time.get_current_time"]),
    Task("checklist", "Keep a checklist of three items in state.checklist: eggs, milk, bread. Then say the list "
         "and finish.", [{"text": "eggs, milk, bread", "state": {"checklist": ["eggs", "milk", "bread"]},
                          "done": True}],
         {"state": ["eggs", "milk", "bread"]}),
    Task("wait", "Call the tool wait with seconds 2, then finish.",
         [{"text": "Waiting.", "tool_calls": [{"name": "wait", "args": {"seconds": 2}}]},
          {"text": "Waited 2 seconds.", "done": True}], {"calls": ["wait"]}, tools=["wait"]),
    Task("jokes", "Tell short jokes about cats, one per step.",
         [{"text": "Why do cats sit on computers? To keep an eye on the mouse."},
          {"text": "Why did the dog sit in the shade? He did not want to be a hot dog.", "done": True}],
         {"text": [r"\bdogs?\b"]}, guidance="Now tell a dog joke, then finish."),
    Task("ask", "Ask the user for their favourite colour with the tool ask_user, then tell them what they said "
         "and finish.",
         [{"text": "Asking.", "tool_calls": [{"name": "ask_user", "args": {"question": "What is your favourite "
                                                                                        "colour?"}}]},
          {"text": "Your favourite colour is yellow.", "done": True}],
         {"text": [r"\byellow\b"]}, tools=["ask_user"], answer="yellow"),
    Task("italy", "What is the capital of Italy? Answer, then finish.", _say("Rome"), {"text": [r"\brome\b"]}),
    Task("multiply", "What is 3 * 7? Answer with the number, then finish.", _say("21"), {"text": [r"\b21\b"]}),
    Task("opposite", "What is the opposite of hot? Answer in one word, then finish.", _say("cold"),
         {"text": [r"\bcold\b"]}),
    Task("backwards", 'Spell the word "cat" backwards, then finish.', _say("tac"), {"text": [r"\btac\b"]}),
    Task("largest", "Which is the largest of 4, 19 and 7? Answer with the number, then finish.", _say("19"),
         {"text": [r"\b19\b"]}),
    Task("hello", "How do you say hello in French? Answer in one word, then finish.", _say("bonjour"),
         {"text": [r"\bbonjour\b"]}),
]
QUICK = ("france", "add", "time")


# ---- the record ---------------------------------------------------------------

def _wait(predicate, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
    return value


def _ok(r, *codes):
    if r.status_code not in (codes or (200, 201, 202)):
        raise RuntimeError(f"{r.request.method} {r.request.url}: {r.status_code} {r.text[:500]}")
    return r.json()


def _session(svc, sid: str) -> dict:
    return _ok(svc.get(f"/api/sessions/{sid}"))


def record_source(svc, task: Task, timeout: float = 120) -> str:
    """The task's scripted source session, recorded to its end; its id."""
    first = dict(task.frames[0], state={**(task.frames[0].get("state") or {}), CHECK_KEY: task.check})
    config = {"frames": [first, *task.frames[1:]], "tools": list(task.tools), "max_steps": len(task.frames) + 2,
              # the guidance task idles between steps, so that its guidance is consumed by step 1
              "interval_s": 300 if task.guidance else 0}
    made = _ok(svc.post("/api/agents", json={"moniker": "scripted", "name": f"task:{task.id}", "task": task.task,
                                             "config": config}))
    sid = made["session_id"]
    if task.guidance:
        _wait(lambda: svc.steps(sid), timeout, f"the first step of {task.id}'s source")
        _ok(svc.post(f"/api/agents/{made['agent_id']}/interrupt", json={"guidance": task.guidance,
                                                                        "session_id": sid}))
    if task.answer:
        answer_questions(svc, sid, task.answer, timeout)
    end = _wait(lambda: (s := _session(svc, sid))["status"] in ENDED and s, timeout, f"{task.id}'s source to end")
    if end["status"] != "done" or end.get("status_reason") != "done":
        raise RuntimeError(f"source {task.id} ended {end['status']} ({end.get('status_reason')}): "
                           f"{end.get('last_error')}")
    if task.guidance and not any(s.get("guidance") for s in svc.steps(sid)):
        raise RuntimeError(f"source {task.id}: no step consumed the guidance")
    return sid


def answer_questions(svc, sid: str, answer: str, timeout: float) -> int:
    """Answer every ask_user question of a session until it ends; how many."""
    answered, deadline = 0, time.monotonic() + timeout
    while time.monotonic() < deadline:
        snapshot = _session(svc, sid)
        if snapshot["status"] in ENDED:
            return answered
        if snapshot["status"] == "waiting" and snapshot.get("status_reason") == "user":
            r = svc.post(f"/api/sessions/{sid}/answer", json={"text": answer})
            if r.status_code == 202:
                answered += 1
                svc.action(r.json()["action_id"], timeout=timeout)
        time.sleep(0.5)
    raise TimeoutError(f"session {sid} did not end within {timeout:.0f}s")


def build_set(svc, tasks: list[Task]) -> tuple[dict, dict[str, str]]:
    """The sources, and the eval set of those a replay can express (all but the
    answered ones); ``(evalset, {task id: source session id})``."""
    sources = {}
    for task in tasks:
        sources[task.id] = record_source(svc, task)
        progress(f"source {task.id}: {sources[task.id]}")
    replayed = [sources[t.id] for t in tasks if not t.answer]
    evalset = _ok(svc.post("/api/evalsets", json={"name": f"bench_tasks {time.strftime('%Y-%m-%d %H:%M')}",
                                                  "session_ids": replayed})) if replayed else None
    return evalset, sources


# ---- one mode -------------------------------------------------------------------

def run_config(args, mode: str | None) -> dict:
    """The runner's and the model's settings every replay (and live session) of a mode gets."""
    config = {"max_steps": args.max_steps, "interval_s": 0, "step_timeout_s": args.step_timeout_s}
    if args.moniker == "baml":
        from tests import llm_server
        config["llm"] = llm_server.llm_config(model=args.model, structured=mode, timeout_s=args.timeout_s)
    return config


def eval_run(svc, evalset: dict, config: dict, args) -> dict:
    """One eval run of the set, to its end; the run with every session's scores."""
    run = _ok(svc.post(f"/api/evalsets/{evalset['id']}/runs", json={
        "moniker": args.moniker, "config": config, "tools": "live", "scorers": SCORERS,
        "concurrency": args.concurrency}))
    progress(f"eval run {run['id']}: {len(evalset['session_ids'])} replays")
    seen = [None]

    def ended():
        detail = _ok(svc.get(f"/api/evalruns/{run['id']}"))
        if detail["progress"] != seen[0]:
            seen[0] = detail["progress"]
            progress(f"  {detail['progress']}")
        return detail if detail["status"] != "running" else None
    return _wait(ended, args.run_timeout_s, f"eval run {run['id']}", interval=2)


def live_task(svc, task: Task, source_sid: str, config: dict, args) -> dict:
    """A task a replay cannot express, run as a live session with the replay's
    config, answered through the API, scored here by the run's scorers; a result
    shaped as an eval run's."""
    from api.session_config import RUNNER_KEYS
    import asyncio

    from bench import task_scorers
    from evals.scorers import builtin_registry, run_scorer

    source_config = _session(svc, source_sid).get("config") or {}
    base = source_config if args.moniker == "scripted" else {k: v for k, v in source_config.items()
                                                             if k in RUNNER_KEYS}
    made = _ok(svc.post("/api/agents", json={"moniker": args.moniker, "name": f"task:{task.id} (live)",
                                             "task": task.task, "config": {**base, **config}}))
    sid = made["session_id"]
    answered = answer_questions(svc, sid, task.answer, args.run_timeout_s)
    source, replay = record_of(svc, source_sid), record_of(svc, sid)
    registry = builtin_registry()  # and this bench's, as the service loads them from AGENTSVC_PLUGINS
    for scorer in task_scorers.SCORERS:
        registry.register(scorer)

    async def score_all():
        return {name: await run_scorer(registry.get(name), source, replay, {"from_iteration": 0})
                for name in SCORERS}
    scores = asyncio.run(score_all())
    return {"source_session_id": source_sid, "replay_session_id": sid, "status": "scored",
            "replay_status": replay["snapshot"].get("status"), "how": "live", "answered": answered,
            "scores": {n: {"value": s.value, "passed": s.passed, "detail": s.detail} for n, s in scores.items()}}


def record_of(svc, sid: str) -> dict:
    """A session as the scorers read it (runtime/record/eval_runner.py load_record), over the API."""
    calls, offset = [], 0
    while True:
        page = _ok(svc.get("/api/tool-calls", session_id=sid, limit=1000, offset=offset))
        rows = page.get("tool_calls") or []
        calls += rows
        if len(rows) < 1000:
            break
        offset += 1000
    return {"snapshot": _session(svc, sid), "steps": svc.steps(sid), "tool_calls": calls}


# ---- figures ----------------------------------------------------------------------

def task_row(result: dict) -> dict:
    """One task's figures from its scores."""
    s = result.get("scores") or {}
    value = lambda name: (s.get(name) or {}).get("value")  # noqa: E731
    passed = lambda name: (s.get(name) or {}).get("passed")  # noqa: E731
    detail = lambda name: (s.get(name) or {}).get("detail") or {}  # noqa: E731
    ms = detail("step_times").get("ms") or []
    right_detail = detail("task_right")
    return {
        "how": result.get("how", "replay"), "status": result.get("status"), "error": result.get("error"),
        "replay_session_id": result.get("replay_session_id"),
        "ended": f"{detail('finished_by_agent').get('status')}/{detail('finished_by_agent').get('reason')}",
        "finished": bool(passed("finished_by_agent")), "right": bool(passed("task_right")),
        "right_and_finished": bool(passed("right_and_finished")), "final_contains": bool(passed("final_contains")),
        "steps": int(value("steps") or 0), "identical_repeats": int(value("identical_repeats") or 0),
        "reused": detail("identical_repeats").get("served_with_reused_from", 0),
        "truncated": int(value("truncated_replies") or 0), "attempts": detail("truncated_replies").get("attempts", 0),
        "errors": int(value("errors") or 0), "step_ms": ms,
        "missing": right_detail.get("missing"), "answer": right_detail.get("answer"),
    }


def totals(rows: dict[str, dict]) -> dict:
    n = len(rows)
    rate = lambda k: round(sum(r[k] for r in rows.values()) / n, 3) if n else None  # noqa: E731
    attempts = sum(r["attempts"] for r in rows.values())
    truncated = sum(r["truncated"] for r in rows.values())
    ms = [m for r in rows.values() for m in r["step_ms"]]
    out = {"tasks": n, "finished_rate": rate("finished"), "right_rate": rate("right"),
           "right_and_finished_rate": rate("right_and_finished"), "final_contains_rate": rate("final_contains"),
           "steps": sum(r["steps"] for r in rows.values()),
           "identical_repeats": sum(r["identical_repeats"] for r in rows.values()),
           "truncated": truncated, "attempts": attempts,
           "truncated_rate": round(truncated / attempts, 3) if attempts else None,
           "step_ms_p50": round(pct(ms, 50)) if ms else None, "step_ms_p99": round(pct(ms, 99)) if ms else None}
    out["targets_met"] = {
        "finished_rate": (out["finished_rate"] or 0) >= TARGETS["finished_rate"],
        "right_and_finished_rate": (out["right_and_finished_rate"] or 0) >= TARGETS["right_and_finished_rate"],
        "identical_repeats": out["identical_repeats"] <= TARGETS["identical_repeats"],
        "truncated_rate": (out["truncated_rate"] or 0) <= TARGETS["truncated_rate"]}
    return out


def table(mode: str, rows: dict[str, dict], total: dict) -> str:
    yes = lambda b: "yes" if b else "-"  # noqa: E731
    lines = [f"== mode {mode}",
             f"{'task':10} {'how':6} {'finished':8} {'right':5} {'r&f':4} {'steps':5} {'repeats':7} "
             f"{'trunc':7} {'p50 s':6} {'ended':18} answer"]
    for tid, r in rows.items():
        p50 = pct(r["step_ms"], 50)
        lines.append(f"{tid:10} {r['how']:6} {yes(r['finished']):8} {yes(r['right']):5} "
                     f"{yes(r['right_and_finished']):4} {r['steps']:5} {r['identical_repeats']:7} "
                     f"{r['truncated']:>2}/{r['attempts']:<4} {(p50 or 0) / 1000:6.1f} {r['ended'][:18]:18} "
                     f"{(r['answer'] or '')[:60]!r}")
    t, met = total, total["targets_met"]
    pc = lambda v: "n/a" if v is None else f"{v * 100:.0f} %"  # noqa: E731
    lines += [f"total: finished {pc(t['finished_rate'])} (target >= 80 %: {yes(met['finished_rate'])}), "
              f"right {pc(t['right_rate'])}, right and finished {pc(t['right_and_finished_rate'])} "
              f"(target >= 60 %: {yes(met['right_and_finished_rate'])}), final_contains "
              f"{pc(t['final_contains_rate'])}",
              f"       identical repeats {t['identical_repeats']} (target 0: {yes(met['identical_repeats'])}), "
              f"truncated {t['truncated']}/{t['attempts']} = {pc(t['truncated_rate'])} (target <= 5 %: "
              f"{yes(met['truncated_rate'])}), steps {t['steps']}, step time p50 "
              f"{(t['step_ms_p50'] or 0) / 1000:.1f} s p99 {(t['step_ms_p99'] or 0) / 1000:.1f} s"]
    return "\n".join(lines)


def run_mode(svc, tasks: list[Task], evalset: dict | None, sources: dict, mode: str | None, args) -> dict:
    """One mode: the eval run of the set, the live tasks, their figures."""
    config = run_config(args, mode)
    started = time.monotonic()
    by_source = {}
    run = None
    if evalset is not None:
        run = eval_run(svc, evalset, config, args)
        by_source = {r["source_session_id"]: r for r in run["results"]}
    rows = {}
    for task in tasks:
        if task.answer:
            progress(f"live task {task.id}")
            rows[task.id] = task_row(live_task(svc, task, sources[task.id], config, args))
        else:
            rows[task.id] = task_row(by_source.get(sources[task.id], {"status": "missing"}))
    total = totals(rows)
    print(table(mode or args.moniker, rows, total), file=sys.stderr, flush=True)
    return {"config": config, "eval_run_id": run and run["id"], "eval_run_status": run and run["status"],
            "wall_s": round(time.monotonic() - started, 1), "tasks": rows, "total": total}


def run_bench(svc, tasks: list[Task], modes, args) -> dict:
    """Record the set once, then one eval run (and the live tasks) per mode."""
    evalset, sources = build_set(svc, tasks)
    return {"evalset_id": evalset and evalset["id"], "sources": sources,
            "modes": {mode or args.moniker: run_mode(svc, tasks, evalset, sources, mode, args) for mode in modes}}


# ---- the service and the model ------------------------------------------------------

def start_service(root: str, base_url: str | None, model: str | None, env: dict | None = None):
    """agents.py and app.py with the MCP reference servers and this bench's scorers."""
    from tests import mcp_reference
    from tests.harness import Service

    os.makedirs(os.path.join(root, "logs"), exist_ok=True)
    repo = os.path.join(root, "repo")
    mcp_reference.git_repo(Path(repo))
    config = mcp_reference.write_config(Path(root) / "mcp.json", Path(repo), "bench-tasks")
    full_env = {"AGENTSVC_PLUGINS": PLUGIN, "AGENTSVC_LLM_TEMPERATURE": "0", **(env or {})}
    if base_url:
        full_env.update(AGENTSVC_LLM_BASE_URL=base_url, AGENTSVC_LLM_MODEL=model)
    svc = Service(os.path.join(root, "data"), os.path.join(root, "logs"), agents_args=["--mcp-config", str(config)],
                  env=full_env)
    svc.start()
    _wait(lambda: "time.get_current_time" in {t["name"] for t in _ok(svc.get("/api/tools"))["tools"]}, 120,
          "the MCP time server's tools")
    return svc


def _stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt  # so the finally blocks stop the service and the server


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--structured", default="grammar",
                        help="comma-separated modes, one eval run each (grammar, json_schema; default grammar)")
    parser.add_argument("--tasks", help=f"comma-separated task ids (default all: {', '.join(t.id for t in TASKS)})")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--max-steps", type=int, default=6, help="per task (default 6)")
    parser.add_argument("--step-timeout-s", type=float, default=300.0)
    parser.add_argument("--timeout-s", type=float, default=240.0, help="llm timeout_s, per HTTP request")
    parser.add_argument("--run-timeout-s", type=float, default=7200.0, help="one eval run's deadline")
    parser.add_argument("--concurrency", type=int, default=2, help="replays at once (llama-server has 2 slots)")
    parser.add_argument("--base-url", help="a running OpenAI-compatible server (.../v1) instead of starting one")
    parser.add_argument("--model", help="the model name (default: the local SmolLM2 file's)")
    parser.add_argument("--moniker", default="baml", help="the replays' moniker (scripted: no model, a self-check)")
    parser.add_argument("--json-out", help="also write the JSON result to this file")
    args = parser.parse_args(argv)
    wanted = QUICK if args.quick else (args.tasks.split(",") if args.tasks else [t.id for t in TASKS])
    unknown = set(wanted) - {t.id for t in TASKS}
    if unknown:
        parser.error(f"unknown tasks {sorted(unknown)}")
    args.task_list = [t for t in TASKS if t.id in wanted]
    args.modes = [m.strip() for m in args.structured.split(",") if m.strip()]
    if args.moniker != "baml":
        args.modes = [None]
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    import pytest  # tests/llm_server.py and tests/mcp_reference.py say "not installed" with pytest.skip

    from tests import llm_server

    args.model = args.model or llm_server.MODEL_NAME
    info = machine()
    root = tempfile.mkdtemp(prefix="bench-tasks-")
    proc = svc = None
    started = time.monotonic()
    try:
        base_url = args.base_url
        if args.moniker == "baml" and not base_url:
            progress(f"starting llama-server ({args.model}); logs in {root}")
            proc, base_url = llm_server.start(root)
        svc = start_service(root, base_url, args.model)
        result = run_bench(svc, args.task_list, args.modes, args)
    except (pytest.skip.Exception, pytest.fail.Exception) as exc:
        sys.exit(f"bench_tasks: {exc}")
    except KeyboardInterrupt:
        progress("interrupted")
        sys.exit(130)
    finally:
        if svc is not None:
            svc.stop()
        if proc is not None:
            proc.stop()
    out = {"benchmark": "tasks", "machine": {**info, "load_at_end": round(os.getloadavg()[0], 2)},
           "model": args.model if args.moniker == "baml" else None, "moniker": args.moniker,
           "settings": {"max_steps": args.max_steps, "step_timeout_s": args.step_timeout_s,
                        "timeout_s": args.timeout_s, "concurrency": args.concurrency, "tools": "live",
                        "tasks": [t.id for t in args.task_list], "logs": root},
           "targets": TARGETS, "wall_s": round(time.monotonic() - started, 1), **result}
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(out, f, indent=1)
    emit(out)


if __name__ == "__main__":
    main()
