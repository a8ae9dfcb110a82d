"""Two agents.py workers (and app.py) on LanceDB in a real S3-compatible object
store (SeaweedFS on 127.0.0.1, tests/servers.py: seaweedfs_s3), and one of them
killed.

What this proves, with the assertions of tests/worker_pool.py: on object
storage too, sessions spread over both workers, every action is applied
exactly once by the owner of its session, each guidance reaches one step; after
kill -9 of one worker the other adopts its sessions (paused stay paused,
running keep stepping, iterations 0..n without gap or duplicate) and applies
the actions sent meanwhile.  And a single agents.py killed with SIGKILL twice
under a stream of controls and restarted under its --worker-id loses nothing
(the checks of tests/service/test_crash_harness.py).  There is no inotify on object
storage: the dispatcher looks at the queue table's version every
--watch-interval.

SeaweedFS is a real server (a master, a volume server, a filer and its S3
gateway): a control is applied in ~275 ms there against ~25 ms on a local disk,
so every wait here is on a condition with a generous deadline.
"""
import json
import os
import random
import time
import uuid

import pytest
import requests

from store import Store
from tests.chaos_client import (ControlStream, Sent, assert_actions_match_model, assert_applied_in_order,
                                assert_contiguous, delivered, model, wait_actions_finished, wait_new_steps)
from tests.harness import Service, wait_for
from tests.kill_loop import KillLoop
from tests.plugins import COUNT_DIR_ENV
from tests.servers import s3_client, seaweedfs_s3
from tests.worker_pool import assert_applied_once, assert_guidance_once, owner, send

SEED = int(os.environ.get("AGENTSVC_CRASH_SEED", "20261122"))  # the crash harness's seed variable
LONG = os.environ.get("AGENTSVC_LONG_TESTS") == "1"
KILLS = int(os.environ.get("AGENTSVC_KILL_LOOP_KILLS", "100"))

S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def s3_settings(endpoint: str) -> tuple[str, dict]:
    """A fresh bucket on the local server; the LanceDB URI and storage options for it."""
    bucket = f"agentsvc-{uuid.uuid4().hex[:12]}"
    s3_client(endpoint).create_bucket(Bucket=bucket)
    options = {"aws_endpoint": endpoint, "aws_region": "us-east-1", "aws_access_key_id": "testing",
               "aws_secret_access_key": "testing", "allow_http": "true"}
    return f"s3://{bucket}/agents", options


@pytest.fixture
def service(tmp_path_factory):
    """SeaweedFS, and app.py on a bucket of it; the test starts the workers."""
    root = tmp_path_factory.mktemp("s3")
    (root / "logs").mkdir()
    seaweedfs, endpoint = seaweedfs_s3(str(root))  # its log and data stay out of the service logs
    try:
        uri, options = s3_settings(endpoint)
        (root / "counts").mkdir()  # where the kill loop's counting tools record each execution
        env = {**S3_ENV, "AGENTSVC_DB_URI": uri, "AGENTSVC_STORAGE_OPTIONS": json.dumps(options),
               COUNT_DIR_ENV: str(root / "counts")}
        svc = Service(str(root / "data"), str(root / "logs"), env=env)
        svc.count_dir = str(root / "counts")
        svc.s3 = (uri, options)
        svc.seaweedfs = seaweedfs
        yield svc
        svc.stop()
    finally:
        seaweedfs.stop()


def running_workers(svc) -> dict[str, dict]:
    uri, options = svc.s3
    store = Store(uri, storage_options=options)
    try:
        return {w["worker_id"]: w for w in store.workers.all() if w["status"] == "running"}
    finally:
        store.close()


def test_two_workers_on_object_storage_and_a_kill(service):
    svc = service
    # Commits to object storage take tens of ms (seconds on a loaded machine):
    # a worker is declared dead only after 10 s of silence, so a slow heartbeat
    # is not mistaken for a death (tests/service/test_workers.py uses 3 s on local disk).
    # With 3 s here the test passes too (fencing keeps a worker wrongly taken for
    # dead from running or saving what it lost, runtime/base/fence.py), but on a loaded
    # machine live workers are then taken for dead now and then, their claims
    # requeued (attempts 2) and sessions moved: 10 s keeps ``attempts == 1`` exact.
    svc.agents_args = ["--dead-after", "10", "--watch-interval", "0.1"]
    svc.start()
    first = wait_for(lambda: running_workers(svc), timeout=60, what="the first worker")
    svc.start_worker()
    both = wait_for(lambda: len(w := running_workers(svc)) >= 2 and w, timeout=60, what="two workers")
    assert len(set(both) - set(first)) == 1

    agents: list[dict] = []
    while len(agents) < 4 or len({owner(svc, a["session_id"]) for a in agents}) < 2:
        assert len(agents) < 16, "every session went to the same worker"
        agents.append(svc.create("echo", config={"interval_s": 1.0}))
        svc.wait_status(agents[-1]["session_id"], "running", timeout=60)
        time.sleep(0.1)
    owners = {a["session_id"]: owner(svc, a["session_id"]) for a in agents}
    by_session = {a["session_id"]: a for a in agents}
    paused = agents[::3]
    interrupts = {send(svc, a, "interrupt", guidance=f"before kill {i}"): a["session_id"]
                  for i, a in enumerate(agents) if a not in paused}
    assert_applied_once(svc, [*interrupts, *(send(svc, a, "pause") for a in paused)])
    assert_guidance_once(svc, interrupts)

    victim = max(set(owners.values()), key=lambda w: list(owners.values()).count(w))
    survivor = (set(owners.values()) - {victim}).pop()
    orphans = [by_session[sid] for sid, w in owners.items() if w == victim]
    victim_proc = svc.agents if svc.agents.pid == both[victim]["pid"] else svc.workers[0]
    assert victim_proc.pid == both[victim]["pid"]
    paused_counts = {a["session_id"]: len(svc.steps(a["session_id"])) for a in paused}
    victim_proc.kill()
    victim_proc.wait(timeout=10)

    running_orphans = [a for a in orphans if a not in paused]
    late = {send(svc, a, "interrupt", guidance=f"after kill {i}"): a["session_id"]
            for i, a in enumerate(running_orphans)}
    for a in orphans:
        wait_for(lambda: owner(svc, a["session_id"]) == survivor, timeout=60,
                 what=f"{survivor} to adopt {a['session_id']}")
    assert_applied_once(svc, list(late), by=survivor)
    assert_guidance_once(svc, late)
    wait_new_steps(svc, [a["session_id"] for a in agents if a not in paused], n=2)
    for a in paused:
        assert svc.session(a["session_id"])["status"] == "paused"
        assert len(svc.steps(a["session_id"])) == paused_counts[a["session_id"]]
    for a in agents:
        assert_contiguous(svc.steps(a["session_id"]), a["session_id"])


def controls_as_modelled(svc, agents: list[dict], sent: list, timeout: float) -> tuple[dict, dict]:
    """Every accepted control finished as the model of its session says, in the
    order accepted, and each session reached the status its controls imply.
    Returns the actions by id and the models by session id."""
    actions = wait_actions_finished(svc, [s.action_id for s in sent], timeout=timeout)
    models = model([a["session_id"] for a in agents], sent)
    assert_actions_match_model(actions, models)
    assert_applied_in_order(actions, sent)
    for sid, m in models.items():
        svc.wait_status(sid, m.status, timeout=120)
    return actions, models


def test_kill_9_and_restart_under_controls_on_object_storage(service, monkeypatch):
    """agents.py killed with SIGKILL twice at random moments while controls and
    inbox items stream in (tests/chaos_client.py), each time restarted under the
    same --worker-id (as docs/deploy.md advises on object storage, where there is
    no slot to get the id back from), so it resumes its sessions at once: every
    accepted action ends as the model of its session says and in the order
    accepted, sessions end in the status their actions imply, iterations stay
    0..n, and each guidance reaches one step (tests/service/test_crash_harness.py, without
    its tools and sub-agents, on the bucket)."""
    svc = service
    uri, options = svc.s3
    # The control stream appends its inbox items through a Store it opens on the
    # local data directory; here the queue is in the bucket.
    send_inbox_item = ControlStream.send_inbox_item

    def send_inbox_item_to_the_bucket(stream, agent):
        if stream.store is None:
            stream.store = Store(uri, storage_options=options)
        send_inbox_item(stream, agent)
    monkeypatch.setattr(ControlStream, "send_inbox_item", send_inbox_item_to_the_bucket)

    svc.agents_args = ["--worker-id", "s3-worker", "--dead-after", "10", "--watch-interval", "0.1"]
    svc.start()
    rng = random.Random(SEED)
    agents = [svc.create("echo", f"thing {i}", config={"interval_s": round(rng.uniform(0.05, 0.2), 3)})
              for i in range(4)]
    for a in agents:
        svc.wait_steps(a["session_id"], 1, timeout=60)
    stream = ControlStream(svc, agents, seed=SEED + 1, destroy_at=[rng.randrange(3, 10)])
    stream.start()
    try:
        for _ in range(2):
            time.sleep(rng.uniform(0.5, 2.5))
            svc.kill_agents()
            time.sleep(rng.uniform(0.0, 0.5))  # controls keep arriving while it is down
            svc.start_agents()
        # On a loaded machine the stream may not have sent every kind yet: it goes on until it has.
        wait_for(lambda: {"inbox", "interrupt"} <= {s.verb for s in stream.sent}, timeout=180,
                 what="an inbox item and an interrupt accepted")
    finally:
        sent = stream.stop()
    assert not stream.refused, f"app.py refused controls it should have accepted: {stream.refused[:5]}"
    assert any(s.verb == "inbox" for s in sent) and any(s.verb == "interrupt" for s in sent)

    actions, models = controls_as_modelled(svc, agents, sent, timeout=90 + 0.5 * len(sent))
    running = [sid for sid, m in models.items() if m.status == "running"]
    # A pause is done at once; a step already in flight may land after it (harness.settled_step_count).
    paused = {sid: svc.settled_step_count(sid) for sid, m in models.items() if m.status == "paused"}
    wait_new_steps(svc, running, n=2)
    for sid, count in paused.items():
        assert len(svc.steps(sid)) == count, f"paused session {sid} kept stepping"
    for sid, m in models.items():
        steps = svc.steps(sid)
        assert_contiguous(steps, f"session {sid}")
        pending = {g["action_id"] for g in svc.session(sid).get("pending_guidance") or []}
        for s in sent:
            if (s.session_id != sid or s.verb not in ("interrupt", "inbox")
                    or actions[s.action_id]["status"] != "done"):
                continue
            used = delivered(steps, s.action_id)
            assert used <= 1, f"guidance of {s.action_id} reached {used} steps of {sid}"
            if m.status == "running":
                assert used == 1, f"guidance of {s.action_id} never reached a step of running session {sid}"
            elif m.status == "paused":
                assert used == 1 or s.action_id in pending, f"guidance of {s.action_id} lost in {sid}"


class RetryingControlStream(ControlStream):
    """What a careful client does while the service's object store is down: a
    POST that got no answer, or a 5xx, is sent again with the same
    ``Idempotency-Key`` until it gets a real answer (api/idempotency.py), so a
    control is accepted once however many tries it took.  Only controls over
    HTTP (the inbox items of the plain stream go straight to the store)."""

    WEIGHTS = {verb: weight for verb, weight in ControlStream.WEIGHTS.items() if verb != "inbox"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.retries = 0

    def send_one(self) -> None:
        agent = self.rng.choice(self.agents)
        verb = ("destroy" if self.attempted in self.destroy_at
                else self.rng.choices(list(self.WEIGHTS), list(self.WEIGHTS.values()))[0])
        self.attempted += 1
        body, guidance = {"session_id": agent["session_id"]}, None
        if verb == "interrupt":
            guidance = body["guidance"] = f"tell jokes about topic-{len(self.sent)}-{self.rng.randrange(10**6)}"
        key, deadline = uuid.uuid4().hex, time.monotonic() + 600
        while True:
            try:
                r = self.http.post(f"{self.url}/api/agents/{agent['agent_id']}/{verb}", json=body,
                                   headers={"Idempotency-Key": key}, timeout=60)
                if r.status_code < 500:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, f"{verb} of {agent['session_id']} got no answer for 600 s"
            self.retries += 1
            self.stopping.wait(0.5)
        if r.status_code == 202:
            self.sent.append(Sent(agent["agent_id"], agent["session_id"], verb, r.json()["action_id"], guidance))
        else:
            self.refused.append((verb, r.status_code, r.text[:200]))


def test_the_s3_server_killed_and_restarted_under_controls_loses_nothing(service):
    """The object store itself crashes: SeaweedFS killed with SIGKILL twice, down
    for a moment each time, then started again on the same data, while four
    sessions step and a client sends controls (retrying, with its
    Idempotency-Key, those that got no answer).  Then every accepted control
    ends as the model of its session says, in the order accepted, once; the
    sessions go on stepping (none is left in error by a write the outage
    failed); iterations stay 0..n; each guidance reaches one step."""
    svc = service
    svc.agents_args = ["--worker-id", "s3-worker", "--dead-after", "10", "--watch-interval", "0.1"]
    svc.start()
    rng = random.Random(SEED + 7)
    agents = [svc.create("echo", f"thing {i}", config={"interval_s": round(rng.uniform(0.05, 0.2), 3)})
              for i in range(4)]
    for a in agents:
        svc.wait_steps(a["session_id"], 1, timeout=60)
    stream = RetryingControlStream(svc, agents, seed=SEED + 8, gap_s=(0.05, 0.3))
    stream.start()
    try:
        for _ in range(2):
            time.sleep(rng.uniform(1.0, 3.0))
            svc.seaweedfs.kill()
            time.sleep(rng.uniform(0.5, 2.0))  # controls keep coming while the store is gone
            svc.seaweedfs.start_again()
        wait_for(lambda: any(s.verb == "interrupt" for s in stream.sent), timeout=180,
                 what="an interrupt accepted")  # a loaded machine may not have sent one yet
    finally:
        sent = stream.stop()
    assert not stream.refused, f"app.py refused controls it should have accepted: {stream.refused[:5]}"
    assert any(s.verb == "interrupt" for s in sent)
    print(f"s3 outage: {len(sent)} controls accepted, {stream.retries} tries sent again")

    actions, models = controls_as_modelled(svc, agents, sent, timeout=180 + 0.5 * len(sent))
    running = [sid for sid, m in models.items() if m.status == "running"]
    wait_new_steps(svc, running, n=2)
    for sid in models:
        steps = svc.steps(sid)
        assert_contiguous(steps, f"session {sid}")
        for s in sent:
            if s.session_id == sid and s.verb == "interrupt" and actions[s.action_id]["status"] == "done":
                assert delivered(steps, s.action_id) <= 1, f"guidance of {s.action_id} reached several steps"


def run_kill_loop_on_s3(svc, seed: int, kills: int) -> KillLoop:
    """The kill loop (tests/kill_loop.py) on this bucket, the S3 server killed first
    and then about one kill in three."""
    svc.agents_args = ["--worker-id", "s3-kill-loop", "--dead-after", "10", "--watch-interval", "0.1"]
    svc.start()
    uri, options = svc.s3
    store = Store(uri, storage_options=options)
    try:
        loop = KillLoop(svc, seed, kills, store=store, s3=svc.seaweedfs, first=("s3",),
                        targets={"agents": 0.45, "app": 0.1, "both": 0.1, "s3": 0.35})
        figures = loop.run()
    finally:
        store.close()
    assert figures["actions accepted"] > 0 and loop.figures["kills: s3"] >= 1
    return loop


@pytest.mark.skipif(not LONG, reason="kill loop on S3: set AGENTSVC_LONG_TESTS=1 (it waits for children of "
                                        "spawns that failed during an outage)")
@pytest.mark.timeout(2400)
def test_the_kill_loop_with_the_s3_server_among_its_victims(service):
    """Every kind of work in flight (tools with approvals, sub-agents, questions,
    replays, a conversation, controls) while agents.py, app.py, both, and the S3
    server are killed: the kill loop's checks hold on object storage too.  Six
    kills here; the long run below takes as many as asked.

    Not in the README's command yet: its third run (a whole suite beside it) left a
    parent ``done`` at iteration 3 with none of its two children, and the loop
    waited for them 300 s.  Both spawn_agent calls had ended ``failed`` during the
    outage (the child's create could not be written), so nothing was lost: the
    loop's Trees.quiet and tree checks now expect only the children of spawns
    that succeeded (one run since, with a spawn failed in an outage, passed); it
    joins the README's command once more runs have passed."""
    run_kill_loop_on_s3(service, SEED + 11, kills=6)


@pytest.mark.skipif(not LONG, reason="long kill loop: set AGENTSVC_LONG_TESTS=1 (and AGENTSVC_KILL_LOOP_KILLS)")
@pytest.mark.timeout(1800 + 90 * KILLS)
def test_the_kill_loop_with_the_s3_server_among_its_victims_long(service):
    run_kill_loop_on_s3(service, SEED + 11 + KILLS, kills=KILLS)
