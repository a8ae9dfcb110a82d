"""Shared model rate limits against the real service: three
sessions on one model limited to 6 requests per window, run by two agents.py
workers, never make the fake provider see more than 6 requests in any sliding
window; a session on another model never waits; a 429 with ``Retry-After: 2``
is retried after 2 s without a failed step.

The window is 5 s here instead of 60 (``window_s`` in the limits file; the
product unit stays "per minute"), so the test takes seconds.  Everything
asserted is what the fake server recorded (counts, per window of its own
arrival times) and what the store holds; no timing is asserted except the
lower bound Retry-After guarantees.
"""
import json
import os
import signal
import threading

import pytest

from tests.fake_openai import FakeOpenAI, Received, Reply
from tests.harness import Service, free_port, wait_for

WINDOW_S = 5.0
LIMIT = 6
STEPS = 3


def frame_reply(text: str) -> Reply:
    return Reply(json.dumps({"step": "s", "next_step": "s", "state": {}, "text": text, "done": False}))


class Provider:
    """Model ``limited`` answers every request, except one 429 (``Retry-After: 2``)
    at its fourth step call; model ``free`` always answers."""

    def __init__(self):
        self.lock = threading.Lock()
        self.step_calls = 0
        self.throttled: Received | None = None

    def __call__(self, request: Received) -> Reply:
        if "archive entry" in request.prompt:  # a turn or session summary
            return Reply(json.dumps({"summary": "done", "key_points": []}))
        with self.lock:
            if request.model == "limited":
                self.step_calls += 1
                if self.step_calls == 4 and self.throttled is None:
                    self.throttled = request
                    return Reply(status=429, content="slow down", headers={"Retry-After": "2"})
        return frame_reply(f"{request.model} thinking")


@pytest.fixture
def cluster(tmp_path):
    (tmp_path / "logs").mkdir()
    limits = tmp_path / "limits.json"
    limits.write_text(json.dumps({"window_s": WINDOW_S, "models": {"limited": {"requests_per_minute": LIMIT}}}))
    provider = Provider()
    with FakeOpenAI(provider) as fake:
        svc = Service(str(tmp_path / "data"), str(tmp_path / "logs"), agents_args=["--rate-limits", str(limits)])
        svc.fake, svc.provider = fake, provider
        svc.start_app()
        yield svc
        svc.stop()


def create_on(svc: Service, model: str, task: str, owner_proc, other_proc) -> str:
    """A session whose create only ``owner_proc`` can apply (the other worker is stopped meanwhile)."""
    other_proc.send_signal(signal.SIGSTOP)
    try:
        sid = svc.create("baml", task, config={"interval_s": 0, "max_steps": STEPS,
                                               "llm": svc.endpoints.llm(svc.fake, model=model)})["session_id"]
        wait_for(lambda: svc.session(sid).get("owner"), what=f"session {sid} to be applied")
    finally:
        other_proc.send_signal(signal.SIGCONT)
    return sid


def most_in_any_window(times: list[float], window: float) -> int:
    times = sorted(times)
    return max((sum(1 for t in times[i:] if t < start + window) for i, start in enumerate(times)), default=0)


def test_three_sessions_on_two_workers_share_one_limit(cluster):
    svc = cluster
    metrics_port = free_port()
    # Each create is applied by the one worker not stopped (create_on): no share of
    # creates between them (runtime/dispatch/create_share.py), so none waits for the stopped one.
    svc.start_agents("--metrics-port", str(metrics_port), "--create-grace", "0")
    first = svc.agents
    second = svc.start_worker("--create-grace", "0")
    wait_for(lambda: "polling for actions" in open(os.path.join(svc.log_dir, "agents.py.2.log")).read()
             and "polling for actions" in open(os.path.join(svc.log_dir, "agents.py.3.log")).read(),
             timeout=60, what="both workers to poll")
    limited = [create_on(svc, "limited", "task A1", first, second),
               create_on(svc, "limited", "task A2", first, second),
               create_on(svc, "limited", "task B1", second, first)]
    free = create_on(svc, "free", "task B2", second, first)
    owners = {sid: svc.session(sid)["owner"] for sid in limited + [free]}
    assert len(set(owners.values())) == 2, owners

    for sid in limited + [free]:
        svc.wait_status(sid, "done", "error", timeout=120)
    wait_for(lambda: len([r for r in svc.fake.requests if r.model == "limited"]) >= 3 * STEPS + 1, timeout=60,
             what="every limited step call")

    # Never more than the limit in any sliding window, as the provider saw it.
    arrivals = [r.at for r in svc.fake.requests if r.model == "limited"]
    assert most_in_any_window(arrivals, WINDOW_S) <= LIMIT, sorted(arrivals)
    assert len(arrivals) > LIMIT  # so the limit was actually in play
    # Every step succeeded, the 429 included; the limited sessions waited, the free one never did.
    for sid in limited + [free]:
        snap = svc.session(sid)
        steps = svc.steps(sid)
        assert snap["status"] == "done" and snap["status_reason"] == "max_steps", snap
        assert [s["status"] for s in steps] == ["ok"] * STEPS, steps
    waits = {sid: sum((s["usage"] or {}).get("rate_wait_ms") or 0 for s in svc.steps(sid)) for sid in limited}
    assert sum(waits.values()) > 0, waits
    assert all(not (s["usage"] or {}).get("rate_wait_ms") for s in svc.steps(free))
    assert all(c["http_calls"] == 1 for s in svc.steps(free) for c in s["usage"]["calls"])

    # The 429 was retried (same prompt) no sooner than its Retry-After, within the same step.
    throttled = svc.provider.throttled
    assert throttled is not None
    retry = next(r for r in svc.fake.requests if r.at > throttled.at and r.body == throttled.body)
    assert retry.at - throttled.at >= 2.0
    retried_calls = [c for sid in limited for s in svc.steps(sid) for c in s["usage"]["calls"] if c["http_calls"] == 2]
    assert len(retried_calls) == 1 and retried_calls[0]["rate_wait_ms"] >= 1900, retried_calls

    # The metrics of the first worker count its requests and waits per model.
    metrics = svc.http.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    lines = {line.split(" ")[0]: float(line.split(" ")[1]) for line in metrics.splitlines()
             if line.startswith("agentsvc_llm_") and " " in line}
    assert lines['agentsvc_llm_requests_total{model="limited"}'] > 0, metrics
    assert 'agentsvc_llm_rate_wait_seconds_total{model="limited"}' in lines
    assert lines['agentsvc_llm_rate_wait_seconds_total{model="(unconfigured)"}'] == 0

    # The write load the limit added: commits to the ledger table (printed for the report).
    from store import Store
    store = Store(svc.data_dir + "/lancedb")
    try:
        t0 = min(arrivals)
        print(f"\nrate-limit figures: {len(arrivals)} requests to 'limited' over {max(arrivals) - t0:.1f} s, "
              f"ledger versions {store.rate_ledger.versions()}, arrivals {[round(a - t0, 2) for a in sorted(arrivals)]}")
    finally:
        store.close()


# ---- the parts, without a service -------------------------------------------------


def test_limits_come_from_a_file_and_flags_and_bad_ones_are_refused(tmp_path):
    from runtime.base.rate_limits import load_config

    path = tmp_path / "limits.toml"
    path.write_text('[models."Qwen/Qwen2.5-7B"]\nrequests_per_minute = 60\n\n[models.gpt-4o]\n'
                    'requests_per_minute = 500\ntokens_per_minute = 200000\n')
    config = load_config(str(path), ["gpt-4o=100", "llama3.2:8b=10:5000"])
    assert config.window_s == 60
    assert config.models["Qwen/Qwen2.5-7B"].requests_per_minute == 60
    assert (config.models["gpt-4o"].requests_per_minute, config.models["gpt-4o"].tokens_per_minute) == (100, None)
    assert (config.models["llama3.2:8b"].requests_per_minute, config.models["llama3.2:8b"].tokens_per_minute) \
        == (10, 5000)
    for bad in (["gpt-4o"], ["=5"], ["m=many"], ["m=0"]):
        with pytest.raises(ValueError):
            load_config(None, bad)
    (tmp_path / "bad.json").write_text(json.dumps({"models": {"m": {"requests_per_hour": 5}}}))
    with pytest.raises(ValueError, match="requests_per_hour"):
        load_config(str(tmp_path / "bad.json"))


def test_shares_split_fairly_and_never_drop_below_what_is_in_use():
    from runtime.base.rate_limits import ModelLimiter

    target = ModelLimiter._target
    # alone and wanting: all that the others leave
    assert target(6, 0, 0, 0, ["a"], "a", False) == 6
    assert target(6, 0, 0, 4, ["a"], "a", False) == 2
    # two want: 3 each (the first by name gets the odd one of 7)
    assert target(6, 6, 0, 0, ["a", "b"], "a", False) == 3
    assert (target(7, 0, 0, 0, ["a", "b"], "a", False), target(7, 0, 0, 0, ["a", "b"], "b", False)) == (4, 3)
    # holding 6, all in use, while another wants: kept until they leave the window
    assert target(6, 6, 6, 0, ["a", "b"], "a", False) == 6
    # not wanting while another does: back down to a fair split, or what is in use if more
    assert target(6, 6, 2, 0, ["b"], None, False) == 3
    assert target(6, 6, 5, 0, ["b"], None, False) == 5
    # idle: give everything back; not idle and nobody else wants: keep it
    assert target(6, 6, 0, 0, [], None, True) == 0
    assert target(6, 6, 0, 0, [], None, False) == 6
    # no limit on this budget: no share
    assert target(None, 0, 0, 0, ["a"], "a", False) == 0


def test_a_call_reported_only_through_record_usage_counts_against_the_limit():
    """A plugin moniker that calls a model itself and only reports its usage: the
    call occupies the model's budget, so the next gated call of that model waits
    (here: the share is one request, so it cannot go at all until the window passes)."""
    import asyncio as aio

    from monikers import llm_gate
    from monikers.frame import StepContext
    from runtime.base.rate_limits import RateLimitConfig, RateLimiter

    async def scenario():
        limiter = RateLimiter(RateLimitConfig(models={"m": {"requests_per_minute": 1}}), ledger=None,
                              worker_id="w")
        model = limiter.models["m"]
        model.share_r, model.lease_until = 1, 1e12  # as if the ledger had granted the whole limit
        model._ensure_task = lambda: None  # no ledger in this test
        previous = llm_gate.gate()
        llm_gate.install(limiter)
        try:
            ctx = StepContext(task="t", agent_id="a", session_id="s", iteration=0)
            ctx.record_usage(model="m", input_tokens=5, output_tokens=5)  # no rate_wait_ms: not gated
            ctx.record_usage(model="other", input_tokens=5)  # a model without a limit: nothing to count
            assert model.occupied(__import__("time").monotonic())[0] == 1
            with pytest.raises(aio.TimeoutError):
                await aio.wait_for(limiter.acquire("m", 10), timeout=0.3)
        finally:
            llm_gate.install(previous)
    aio.run(scenario())
