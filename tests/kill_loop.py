"""The kill loop over every kind of work (issue 37, "What must hold" 5).

agents.py, app.py, or both at once are killed with SIGKILL and restarted,
again and again, while streams of work keep every kind of work in flight:

- **controls** (pause, resume, interrupt, an inbox item, now and then a
  destroy) on sessions that step forever;
- **tools** on scripted sessions: every step calls a counted non-idempotent
  tool that needs approval (approved, sometimes denied), a counted idempotent
  one, and an external tool whose result is posted;
- **sub-agents**: a parent spawns a child it waits for and one it does not,
  works, is done, and is woken when the late child's result comes;
- **questions** (``ask_user``): some answered (now and then twice), some left
  to time out, with and without a default;
- **replays**, tools recorded, of the tool sessions and parents that finished;
- **a conversation** whose user posts messages to two participant sessions.

On object storage (tests/service/test_object_storage.py) the S3 server itself
is among the victims: SeaweedFS killed with SIGKILL, down a moment, started
again on the same data.  While it is down (and for :data:`S3_GRACE_S` after),
a stream's tick that fails (its own read or write of the store, or a POST that
app.py answered 5xx) is counted and tried again on the next tick, and a create
is sent again, as a careful client would; the checks are the same.

The tools count their own executions in fsynced files (tests/plugins.py).
Sessions and replays are created with client-supplied ids, so a create whose
answer a kill of app.py cut off is sent again; a control cut off that way has
an unknown outcome, so the checks take what the queue accepted from the store,
never from the client's list.  The work reads what it must answer (open
approvals, questions) straight from the store, so it keeps going while app.py
is down.

Once the kills stop, the streams stop starting new work and finish what they
started (every approval and question answered or timed out), and the record
must show (:func:`check`):

- no accepted action lost: every action in the queue ends ``done`` or
  ``failed``, and none was parked without having been tried (each attempt a
  parked action lists started, and a kill of agents.py came after it);
- the controls of each session ended as their order implies, and each piece
  of guidance, inbox item and conversation message reached one step at most
  (exactly one for a session still running);
- nothing non-idempotent ran twice, a denied call never ran, a replay ran
  nothing (the tools' own counts), and every decision on a call applied once;
- every child's outcome reached its parent exactly once;
- no answer applied twice: each question ended once, answered or timed out;
- no tool-call row left running or waiting (``unknown`` is the contract for a
  non-idempotent call cut mid-run), and every ended call's result reached one step;
- no iteration gap or duplicate in any session;
- no session stuck: the finite ones end, the others step, or stay paused.

:func:`run_kill_loop` prints the figures: kills of each process (and how many
landed while agents.py was still starting), what was in flight at each kill,
and the actions accepted, done, failed, parked and lost.
"""
from __future__ import annotations

import random
import re
import signal
import threading
import time
import traceback
from collections import Counter
from datetime import datetime, timezone

import requests
from ulid import ULID

from domain.statuses import ACTION_STATUSES, SESSION_FINISHED, TOOL_CALL_ENDED
from runtime.base import inbox
from store import Store, filters, query
from tests.harness import Service, wait_for
from tests.plugins import read_count
from tests.servers import SeaweedProc

ANSWERED = ("done", "failed")
S3_GRACE_S = 60  # after the S3 server is back, failures of what was in flight then are expected
MAX_BACKLOG = 100  # unfinished actions in the queue above which the streams add no work
NOT_IDEMPOTENT = "sleep_count"
IDEMPOTENT = "sleep_count_idempotent"


def new_id() -> str:
    return str(ULID())


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


# ---- HTTP that survives app.py's deaths --------------------------------------------

class Unreachable(Exception):
    """app.py refused the connection: the request was never sent."""


class Ambiguous(Exception):
    """The request was sent and its answer lost (app.py died): its outcome is unknown."""


class Http:
    """A client that tells a request never sent from one whose answer was lost."""

    def __init__(self, url: str):
        self.url = url
        self._local = threading.local()

    def _session(self) -> requests.Session:
        if not hasattr(self._local, "session"):
            self._local.session = requests.Session()
        return self._local.session

    def post(self, path: str, body: dict | None = None) -> requests.Response:
        try:
            return self._session().post(self.url + path, json=body or {}, timeout=30)
        except requests.ConnectTimeout:
            raise Unreachable(path) from None
        except requests.ConnectionError as exc:
            if "NewConnectionError" in repr(exc) or "Connection refused" in repr(exc):
                raise Unreachable(path) from None
            raise Ambiguous(path) from None
        except requests.Timeout:
            raise Ambiguous(path) from None

    def get(self, path: str, **params) -> requests.Response:
        try:
            return self._session().get(self.url + path, params=params, timeout=30)
        except requests.RequestException:
            raise Unreachable(path) from None


# ---- the streams of work ---------------------------------------------------------------

class Work(threading.Thread):
    """One stream of work: ``tick`` every ``gap_s`` until stopped.  A request
    that finds app.py down (or loses its answer to a kill) is counted and the
    stream carries on; anything else stops it and is raised by :meth:`stop`.
    A stream that only adds work (``adds``) waits while the queue holds more
    than :data:`MAX_BACKLOG` unfinished actions, as a client would back off: on
    a loaded machine, where agents.py takes seconds to start, the streams
    otherwise outran the service (680 actions queued after 20 kills)."""

    gap_s = (0.05, 0.3)
    adds = False

    def __init__(self, loop: KillLoop, seed: int):
        super().__init__(name=type(self).__name__.lower(), daemon=True)
        self.loop, self.http, self.store = loop, loop.http, loop.store
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.draining = threading.Event()  # start nothing new; finish what was started
        self.error: str | None = None

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                if self.adds and self.loop.backlog() > MAX_BACKLOG:
                    self.loop.count(f"{self.name}: ticks skipped while the queue was deep")
                    self.stopping.wait(1.0)
                    continue
                self.tick()
            except Unreachable:
                self.loop.count("requests refused while app.py was down")
            except Ambiguous:
                self.loop.count("requests whose answer a kill of app.py cut off")
            except Exception:
                if not self.loop.store_in_trouble():
                    self.error = traceback.format_exc()  # surfaced by stop()
                    return
                # The S3 server is down (or just back): a write or read of the store,
                # or a POST app.py answered 5xx, failed.  The stream reads what it must
                # answer from the store on its next tick, and the checks take what the
                # queue accepted from the store, so nothing here needs remembering.
                self.loop.count("stream ticks that failed while the S3 server was down")
            self.stopping.wait(self.rng.uniform(*self.gap_s))

    def tick(self) -> None:
        raise NotImplementedError

    def unsettled(self) -> list[str]:
        """What this stream started and still needs it (nothing: it may stop)."""
        return []

    def describe(self, session_id: str) -> str:
        """A session, its status and what its open calls wait for (for a failure message)."""
        row = self.store.states.get(session_id) or {}
        open_calls = [f"{c['name']}:{c['status']}" for c in self.store.tool_calls.search(session_id=session_id, limit=100)
                      if c["status"] not in TOOL_CALL_ENDED]
        return (f"{session_id} {row.get('status')}/{row.get('status_reason')} at {row.get('iteration')} "
                f"calls {open_calls} error {row.get('last_error')}")

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=60)
        assert not self.is_alive(), f"{self.name} did not stop"
        assert self.error is None, f"{self.name} failed:\n{self.error}"

    # helpers

    def create(self, moniker: str, task: str, config: dict, **fields) -> dict:
        """Create a session under ids chosen here: sent again until app.py answers
        (a repeated create with the same session_id creates nothing new)."""
        ids = {"agent_id": new_id(), "session_id": new_id()}
        self.loop.until_sent("/api/agents", {"moniker": moniker, "task": task, "config": config, **ids, **fields})
        return ids

    def status(self, session_id: str) -> str | None:
        row = self.store.states.get(session_id)
        return row and row["status"]


class Controls(Work):
    """Pause, resume, interrupt, an inbox item (through the store, as the
    service's own parts enqueue one) and, rarely, a destroy, on sessions that
    step forever; a destroyed one is replaced."""

    WEIGHTS = {"pause": 3, "resume": 3, "interrupt": 3, "inbox": 2, "destroy": 0.15}
    adds = True

    def __init__(self, loop: KillLoop, seed: int, sessions: int = 4):
        super().__init__(loop, seed)
        self.sessions = [self.new_session(i) for i in range(sessions)]
        self.all = list(self.sessions)

    def new_session(self, i: int) -> dict:
        moniker = "joke" if i % 2 else "echo"
        return self.create(moniker, f"jokes about thing{i}", {"interval_s": round(self.rng.uniform(0.05, 0.3), 3)})

    def tick(self) -> None:
        if self.draining.is_set():
            return
        i = self.rng.randrange(len(self.sessions))
        target = self.sessions[i]
        verb = self.rng.choices(list(self.WEIGHTS), list(self.WEIGHTS.values()))[0]
        if verb == "inbox":
            kind = self.rng.choice(("child_result", "answer", "system"))
            self.store.actions.enqueue("inbox_item", **target, payload={"kind": kind, "text": f"{kind} {new_id()}",
                                                                        "source": {"kind": kind}})
            return
        body = {"session_id": target["session_id"]}
        if verb == "interrupt":
            body["guidance"] = f"tell jokes about topic-{new_id()}"
        r = self.http.post(f"/api/agents/{target['agent_id']}/{verb}", body)
        assert r.status_code == 202, (verb, r.status_code, r.text)
        if verb == "destroy":
            self.sessions[i] = self.new_session(len(self.all))
            self.all.append(self.sessions[i])


def tool_frames(session_key: str, steps: int, rng: random.Random) -> list[dict]:
    """Each step: a counted non-idempotent call that needs approval, a counted
    idempotent one and an external result; then done."""
    frames = []
    for n in range(steps):
        frames.append({"text": f"tool step {n}", "tool_calls": [
            {"id": f"a{n}", "name": NOT_IDEMPOTENT, "args": {"seconds": round(rng.uniform(0.05, 0.4), 2),
                                                              "key": f"{session_key}-a{n}"}},
            {"id": f"i{n}", "name": IDEMPOTENT, "args": {"seconds": round(rng.uniform(0.0, 0.3), 2),
                                                         "key": f"{session_key}-i{n}"}},
            {"id": f"h{n}", "name": "human", "args": {"question": f"q{n}"}}]})
    return frames + [{"text": "tools done", "done": True}]


class Tools(Work):
    """Scripted sessions whose steps call tools; their approvals (a fifth
    denied) and external results are posted as a person would, now and then
    twice.  Finished sessions become recordings for :class:`Replays`."""

    def __init__(self, loop: KillLoop, seed: int, active: int = 2, steps: int = 3):
        super().__init__(loop, seed)
        self.target, self.steps = active, steps
        self.active: list[dict] = []
        self.finished: list[dict] = []
        self.all: list[dict] = []
        self.tried: dict[str, float] = {}  # call id -> when a decision was last sent
        self.accepted: set[str] = set()  # calls with a decision app.py took (202): never sent again

    def new_session(self) -> dict:
        key = new_id()
        ids = self.create("scripted", "use tools", {
            "interval_s": 0, "tools": [NOT_IDEMPOTENT, IDEMPOTENT, "human"], "approve": [NOT_IDEMPOTENT],
            "frames": tool_frames(key, self.steps, self.rng)})
        return {**ids, "key": key}

    def tick(self) -> None:
        for session in list(self.active):
            status = self.status(session["session_id"])
            if status in SESSION_FINISHED:
                self.active.remove(session)
                self.finished.append(session)
                continue
            for call in self.store.tool_calls.search(session_id=session["session_id"], limit=1000):
                self.decide(call)
        while not self.draining.is_set() and len(self.active) < self.target:
            session = self.new_session()
            self.active.append(session)
            self.all.append(session)

    def decide(self, call: dict) -> None:
        """Approve, deny or post the result of a waiting call, now and then twice
        at once.  A decision app.py took is never sent again (it may wait in the
        queue behind a restart for a while); one whose answer a kill cut off is
        sent again 30 s later if the call still waits."""
        if call["status"] not in ("waiting_approval", "waiting_result") or call["id"] in self.accepted:
            return
        if time.monotonic() - self.tried.get(call["id"], -1e9) < 30:
            return
        if call["status"] == "waiting_approval":
            verb = "deny" if self.rng.random() < 0.2 else "approve"
            body = {"reason": "the harness says no"} if verb == "deny" else {}
        else:
            verb, body = "result", {"result": {"answer": call["call_id"]}}
        self.tried[call["id"]] = time.monotonic()
        for _ in range(2 if self.rng.random() < 0.2 else 1):
            r = self.http.post(f"/api/tool-calls/{call['id']}/{verb}", body)
            assert r.status_code in (202, 409), (verb, r.status_code, r.text)
            self.accepted.add(call["id"])

    def unsettled(self) -> list[str]:
        return [self.describe(s["session_id"]) for s in self.active]


def question_frames(steps: int) -> list[dict]:
    """ask_user every step: timing out unanswered, timing out to a default, or waiting for an answer."""
    kinds = [{"timeout_s": 2}, {"timeout_s": 2, "default": "the default"}, {}]
    return [{"text": f"asking {n}", "tool_calls": [
        {"name": "ask_user", "args": {"question": f"question {n}?", "choices": ["yes", "no"], **kinds[n % 3]}}]}
        for n in range(steps)] + [{"text": "no more questions", "done": True}]


class Questions(Work):
    """Sessions that ask questions; about half of those that would time out
    are answered (some just as they time out), every other one is, and now
    and then an answer is sent twice."""

    def __init__(self, loop: KillLoop, seed: int, active: int = 2, steps: int = 4):
        super().__init__(loop, seed)
        self.target, self.steps = active, steps
        self.active: list[dict] = []
        self.all: list[dict] = []
        self.plan: dict[str, float | None] = {}  # question id -> when to answer it (None: let it time out)

    def tick(self) -> None:
        now = time.monotonic()
        for session in list(self.active):
            if self.status(session["session_id"]) in SESSION_FINISHED:
                self.active.remove(session)
                continue
            for row in self.store.tool_calls.search(session_id=session["session_id"], name="ask_user",
                                                    status="waiting_result", limit=100):
                if row["id"] not in self.plan:
                    times_out = "timeout_s" in (row.get("args") or {})
                    self.plan[row["id"]] = (now + self.rng.uniform(0.2, 2.5)
                                            if not times_out or self.rng.random() < 0.5 else None)
                when = self.plan[row["id"]]
                if when is not None and now >= when:
                    self.plan[row["id"]] = now + 30  # again only if this answer's was cut off by a kill
                    for _ in range(2 if self.rng.random() < 0.2 else 1):
                        r = self.http.post(f"/api/sessions/{session['session_id']}/answer",
                                           {"text": self.rng.choice(["yes", "no", "maybe"]), "tool_call_id": row["id"]})
                        assert r.status_code in (202, 409), (r.status_code, r.text)
                        self.plan[row["id"]] = None  # taken (or answered, timed out, queued): never again
        while not self.draining.is_set() and len(self.active) < self.target:
            session = self.create("scripted", "ask", {"interval_s": 0, "tools": ["ask_user"],
                                                      "frames": question_frames(self.steps)})
            self.active.append(session)
            self.all.append(session)

    def unsettled(self) -> list[str]:
        return [self.describe(s["session_id"]) for s in self.active]


def tree_frames(rng: random.Random, tag: str) -> list[dict]:
    """Spawn a child waited for and a late one; work; done; woken by the late child's result."""
    def child(name: str, wait: bool, steps: int, interval: float) -> dict:
        return {"name": "spawn_agent", "args": {
            "task": f"work as {name}", "moniker": "scripted", "name": name, "wait": wait,
            "config": {"interval_s": interval, "frames": [{"text": f"{name} step {i}"} for i in range(steps)]
                       + [{"text": f"{name} result", "done": True}]}}}
    return [{"text": "spawning", "tool_calls": [child(f"w{tag}", True, rng.randint(1, 3), 0.1),
                                                child(f"l{tag}", False, rng.randint(3, 7), round(rng.uniform(0.2, 0.5), 2))]},
            {"text": "working 1"}, {"text": "working 2"}, {"text": "first done", "done": True},
            {"text": "read the late child's result", "done": True}]


class Trees(Work):
    """A new parent every few seconds (a child waited for, a late one)."""

    gap_s = (3.0, 6.0)
    adds = True

    def __init__(self, loop: KillLoop, seed: int):
        super().__init__(loop, seed)
        self.parents: list[dict] = []

    def tick(self) -> None:
        if self.draining.is_set():
            return
        tag = str(len(self.parents))
        self.parents.append(self.create("scripted", "delegate", {
            "interval_s": 0.1, "tools": ["spawn_agent"], "frames": tree_frames(self.rng, tag)}))

    def quiet(self, parent: dict) -> bool:
        """Done, and nothing can wake it again: its children are done and
        reported, no child's result waits unread in its inbox (a kill between a
        result's delivery and the wake leaves it done with one, and the restart's
        recovery scan wakes it for another step), and no action for it waits in
        the queue."""
        sid = parent["session_id"]
        state = self.store.states.get(sid)
        if not state or state["status"] != "done":
            return False
        if any(inbox.kind_of(item) == "child_result" for item in state.get("pending_guidance") or []):
            return False
        children = self.store.states.children(sid)
        if len(children) < self.spawned(sid) or any(c["status"] != "done" or c.get("reported_generation") != c.get("generation")
                                    for c in children):
            return False
        return not any(self.store.actions.search(session_id=sid, status=s, limit=1) for s in ("pending", "processing"))

    def spawned(self, session_id: str) -> int:
        """How many children a parent made: its spawn calls that ended ``success``
        (on object storage a spawn fails honestly while the S3 server is down:
        the child's create could not be written)."""
        return sum(c["name"] == "spawn_agent" and c["status"] == "success"
                   for c in self.store.tool_calls.search(session_id=session_id, limit=100))

    def unsettled(self) -> list[str]:
        waiting = []
        for parent in self.parents:
            if not self.quiet(parent):
                waiting.append(self.describe(parent["session_id"]))
                waiting += ["  child " + self.describe(c["session_id"])
                            for c in self.store.states.children(parent["session_id"])]
        return waiting


class Replays(Work):
    """Replays (tools recorded) of the tool sessions and parents that finished."""

    gap_s = (2.0, 5.0)
    adds = True

    def __init__(self, loop: KillLoop, seed: int, tools: Tools, trees: Trees):
        super().__init__(loop, seed)
        self.tools, self.trees = tools, trees
        self.replays: list[dict] = []  # {session_id, source}
        self.replayed: set[str] = set()  # each recording is replayed once

    def tick(self) -> None:
        if self.draining.is_set():
            return
        done = [s for s in self.tools.finished if s["session_id"] not in self.replayed]
        done += [p for p in self.trees.parents if p["session_id"] not in self.replayed and self.trees.quiet(p)]
        if not done:
            return
        source = self.rng.choice(done)["session_id"]
        replay = {"session_id": new_id(), "source": source}
        self.loop.until_sent(f"/api/sessions/{source}/replay", {"session_id": replay["session_id"]})
        self.replays.append(replay)
        self.replayed.add(source)

    def unsettled(self) -> list[str]:
        return [self.describe(r["session_id"]) for r in self.replays
                if self.status(r["session_id"]) not in SESSION_FINISHED]


class Conversation(Work):
    """A user posting messages to a conversation of two participant sessions."""

    gap_s = (0.5, 1.5)
    adds = True

    def __init__(self, loop: KillLoop, seed: int):
        super().__init__(loop, seed)
        self.conversation_id = self.loop.until_sent("/api/conversations", {"title": "kill loop"},
                                                    expect=201)["conversation_id"]
        self.members = [self.create("echo", f"listener {i}", {"interval_s": 0.2}) for i in range(2)]
        for member in self.members:  # a join names an existing session: wait for its create to apply
            wait_for(lambda: self.store.states.get(member["session_id"]), timeout=180, interval=0.2,
                     what=f"listener {member['session_id']} to exist")
            self.loop.until_sent(f"/api/conversations/{self.conversation_id}/participants",
                                 {"kind": "agent", **member}, expect=201)
        self.answered: list[dict] = []  # the 201 answers: message and deliveries

    def tick(self) -> None:
        if self.draining.is_set():
            return
        r = self.http.post(f"/api/conversations/{self.conversation_id}/messages", {"text": f"hello {new_id()}"})
        assert r.status_code == 201, (r.status_code, r.text)
        self.answered.append(r.json())


# ---- what is in flight when a kill lands -------------------------------------------------

def in_flight(store: Store) -> Counter:
    """What the store says is under way now (read straight from LanceDB)."""
    seen: Counter = Counter()
    for status, names in (("running", {NOT_IDEMPOTENT: "non-idempotent tool running",
                                       IDEMPOTENT: "idempotent tool running"}),
                          ("waiting_approval", {None: "approval pending"}),
                          ("waiting_result", {"ask_user": "question pending", None: "external result pending"})):
        for row in store.tool_calls.search(status=status, limit=10_000):
            what = names.get(row["name"]) or names.get(None)
            if what:
                seen[what] += 1
    live = query.rows(store.states.table, "agent_state",
                      filters.in_words("status", ("running", "waiting", "stopping"), {"running", "waiting", "stopping"}),
                      columns=["session_id", "parent_session_id", "replay"])
    seen["child running"] = sum(1 for r in live if r.get("parent_session_id"))
    seen["replay running"] = sum(1 for r in live if r.get("replay"))
    seen["actions pending or processing"] = (store.actions.count("pending") + store.actions.count("processing"))
    return seen


# ---- the loop ----------------------------------------------------------------------

class KillLoop:
    """``kills`` kills, each ``gap_s`` after agents.py said it polls (one in
    ``long_life`` after ``long_gap_s``), but one in ``early`` soon after its
    restart, while it is still starting or adopting.

    The long lives keep the loop from being all restarts on a loaded machine,
    where agents.py may take seconds to start.  (Before the storage upkeep
    started with the worker, runtime/worker/service.py, a worker killed within
    seconds of every start never ran it: fragments piled up and each start took
    longer than the last, 0.8 s to polling at the first restart, 46 s at the
    tenth.)"""

    def __init__(self, svc: Service, seed: int, kills: int, *, gap_s=(0.3, 3.0), long_gap_s=(5.0, 12.0),
                 long_life: float = 0.25, early: float = 0.2, targets=None, store: Store | None = None,
                 s3: SeaweedProc | None = None, first: tuple[str, ...] = ()):
        self.svc, self.seed, self.kills, self.early = svc, seed, kills, early
        self.gap_s, self.long_gap_s, self.long_life = gap_s, long_gap_s, long_life
        self.targets = targets or {"agents": 0.7, "app": 0.15, "both": 0.15}
        assert s3 is not None or "s3" not in self.targets, "an s3 kill needs the S3 server (s3=)"
        self.rng = random.Random(seed)
        self.http = Http(svc.url)
        self.store = store or Store(svc.data_dir + "/lancedb")
        self.s3 = s3
        self.first = list(first)  # kills made first, in this order (then drawn from ``targets``)
        self.s3_down_since: float | None = None  # set while the S3 server is killed
        self.s3_back_at = float("-inf")  # when it last took writes again
        self.figures: Counter = Counter()
        self._lock = threading.Lock()
        self.killed_at: list[datetime] = []  # every kill of agents.py (alone or with app.py)
        self.at_kill: Counter = Counter()  # kills during which each kind of work was in flight
        self.agents_started = time.monotonic()
        self.agents_log = None
        self._backlog = (float("-inf"), 0)  # (when read, unfinished actions)

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.figures[what] += n

    def backlog(self) -> int:
        """Unfinished actions in the queue (read at most once a second)."""
        when, count = self._backlog
        if time.monotonic() - when > 1.0:
            count = self.store.actions.count("pending") + self.store.actions.count("processing")
            self._backlog = (time.monotonic(), count)
        return count

    def until_sent(self, path: str, body: dict, expect: int = 202, timeout: float = 180) -> dict:
        """POST an idempotent request until app.py answers it (it may be down)."""
        deadline, retried = time.monotonic() + timeout, False
        while True:
            try:
                r = self.http.post(path, body)
            except (Unreachable, Ambiguous):
                if time.monotonic() > deadline:
                    raise AssertionError(f"app.py did not take {path} for {timeout}s") from None
                retried = True
                time.sleep(0.2)
                continue
            if r.status_code >= 500 and self.store_in_trouble() and time.monotonic() < deadline:
                retried = True  # app.py could not write to the object store: send it again
                time.sleep(0.5)
                continue
            if retried and r.status_code == 200 and (r.json() or {}).get("existing"):
                return r.json()  # a create the try cut short had queued: the retry names it, as documented
            assert r.status_code == expect, (path, r.status_code, r.text)
            return r.json()

    # ---- kills

    def start_agents(self) -> None:
        self.svc.start_agents()
        self.agents_started = time.monotonic()
        self.agents_log = f"{self.svc.log_dir}/agents.py.{self.svc._starts}.log"

    def recovering(self) -> bool:
        """agents.py has not said it polls yet: it is still starting or adopting."""
        try:
            with open(self.agents_log) as f:
                return "polling for actions" not in f.read()
        except (OSError, TypeError):
            return True

    def pause_before_kill(self) -> None:
        if self.rng.random() < self.early:
            time.sleep(self.rng.uniform(0.0, 1.5))  # maybe while it adopts
            return
        wait_for(lambda: not self.recovering(), timeout=180, interval=0.1, what="agents.py to poll again")
        time.sleep(self.rng.uniform(*(self.long_gap_s if self.rng.random() < self.long_life else self.gap_s)))

    def store_in_trouble(self) -> bool:
        """The S3 server is down, or came back less than :data:`S3_GRACE_S` ago
        (app.py's and agents.py's retries of what failed meanwhile are still
        landing)."""
        return self.s3_down_since is not None or time.monotonic() - self.s3_back_at < S3_GRACE_S

    def kill_s3(self) -> None:
        """SIGKILL the S3 server, leave it down a moment while work keeps coming,
        start it again on the same data."""
        self.s3_down_since = time.monotonic()
        self.s3.kill()
        time.sleep(self.rng.uniform(0.5, 3.0))
        self.s3.start_again()
        self.count("seconds the S3 server was down", round(time.monotonic() - self.s3_down_since))
        self.s3_back_at, self.s3_down_since = time.monotonic(), None

    def kill_worker(self) -> None:
        """SIGKILL one worker process of ``agents.py --processes N`` (its
        supervisor restarts it under its old id)."""
        import psutil

        workers = sorted((p for p in psutil.Process(self.svc.agents.pid).children()
                          if p.is_running() and p.status() != psutil.STATUS_ZOMBIE), key=lambda p: p.pid)
        if not workers:  # all being restarted: count nothing
            return
        self.rng.choice(workers).send_signal(signal.SIGKILL)
        self.killed_at.append(utcnow())
        self.count("kills: worker")

    def kill(self, target: str) -> None:
        seen = in_flight(self.store)
        self.at_kill.update({what for what, n in seen.items() if n})
        if target == "s3":
            self.kill_s3()
            self.count("kills: s3")
            return
        if target == "worker":
            self.kill_worker()
            return
        if target in ("agents", "both"):
            self.count("kills of agents.py during its start or adoption", self.recovering())
            self.svc.agents.send_signal(signal.SIGKILL)
            self.svc.agents.wait(timeout=30)
            self.killed_at.append(utcnow())
        if target in ("app", "both"):
            self.svc.app.send_signal(signal.SIGKILL)
            self.svc.app.wait(timeout=30)
        self.count(f"kills: {target}")
        time.sleep(self.rng.uniform(0.0, 0.5))  # work keeps coming while they are down
        if target in ("app", "both"):
            self.svc.start_app()
        if target in ("agents", "both"):
            self.start_agents()

    # ---- the run

    def run(self) -> dict:
        print(f"\nkill loop: seed={self.seed} kills={self.kills}", flush=True)
        self.agents_log = f"{self.svc.log_dir}/agents.py.{self.svc._starts}.log"
        self.controls = Controls(self, self.seed + 1)
        self.tools = Tools(self, self.seed + 2)
        self.questions = Questions(self, self.seed + 3)
        self.trees = Trees(self, self.seed + 4)
        self.replays = Replays(self, self.seed + 5, self.tools, self.trees)
        self.conversation = Conversation(self, self.seed + 6)
        works = [self.controls, self.tools, self.questions, self.trees, self.replays, self.conversation]
        for work in works:
            work.start()
        started = time.monotonic()
        try:
            for _ in range(self.kills):
                self.pause_before_kill()
                target = self.first.pop(0) if self.first else None
                self.kill(target or self.rng.choices(list(self.targets), list(self.targets.values()))[0])
            print(f"kill loop: {self.kills} kills in {time.monotonic() - started:.0f}s; settling", flush=True)
            for work in works:
                work.draining.set()
            self.settle(works)
        finally:
            for work in works:
                work.stop()
        settle = time.monotonic()
        actions = self.finished_actions()
        print(f"kill loop: every action finished {time.monotonic() - settle:.0f}s after the streams stopped",
              flush=True)
        figures = check(self, actions)
        self.print_figures(figures, time.monotonic() - started)
        return figures

    def settle(self, works: list[Work], timeout: float = 300, limit: float = 1800) -> None:
        """Wait until every stream has nothing left that needs it; say what is stuck if not.

        Stuck means no progress for ``timeout`` s (what is left, or what the queue
        has finished, did not change), not a slow machine: under a load of 18 the
        queue drained a backlog of answers at 5-37 s an action, and the last
        question settled a minute after a fixed 300 s.  ``limit`` bounds the whole wait."""
        started = time.monotonic()
        progress, deadline = None, started + timeout
        while True:
            left = {w.name: w.unsettled() for w in works if not w.error}
            if not any(left.values()):
                return
            now = time.monotonic()
            seen = (left, self._finished_count())
            if seen != progress:
                progress, deadline = seen, now + timeout
            if now > deadline or now - started > limit:
                stuck = [f"{name}: {line}" for name, lines in left.items() for line in lines]
                raise AssertionError(f"stuck: the work started did not finish (no progress for {timeout}s, "
                                     f"{now - started:.0f}s in all):\n" + "\n".join(stuck[:40]))
            time.sleep(1.0)

    def _finished_count(self) -> int:
        return self.store.actions.table.count_rows(filters.in_words("status", ANSWERED, ACTION_STATUSES))

    def finished_actions(self, timeout: float = 240) -> list[dict]:
        def all_finished():
            rows = query.rows(self.store.actions.table, "actions", None)
            return rows if all(a["status"] in ANSWERED for a in rows) else None
        try:
            return wait_for(all_finished, timeout=timeout, interval=1.0, what="every accepted action to finish")
        except AssertionError:
            stuck = [{k: a.get(k) for k in ("id", "type", "session_id", "status", "claimed_by", "attempts", "error")}
                     for a in query.rows(self.store.actions.table, "actions", None) if a["status"] not in ANSWERED]
            raise AssertionError(f"lost: {len(stuck)} accepted actions never finished: {stuck[:20]}") from None

    def print_figures(self, figures: dict, seconds: float) -> None:
        print(f"kill loop figures ({seconds:.0f}s, seed {self.seed}):")
        for what in sorted(self.figures):
            print(f"  {what}: {self.figures[what]}")
        print("  kills with work in flight: " + ", ".join(f"{k} {v}" for k, v in sorted(self.at_kill.items())))
        for what, n in figures.items():
            print(f"  {what}: {n}")


# ---- the checks ---------------------------------------------------------------------

class Record:
    """Every row the checks read, straight from LanceDB, once."""

    def __init__(self, store: Store):
        self.states = {r["session_id"]: r for r in query.rows(store.states.table, "agent_state", None)}
        self.steps: dict[str, list[dict]] = {}
        for row in query.rows(store.steps.table, "agent_steps", None,
                              columns=["session_id", "iteration", "status", "guidance", "inputs", "tool_calls"]):
            self.steps.setdefault(row["session_id"], []).append(row)
        for rows in self.steps.values():
            rows.sort(key=lambda s: s["iteration"])
        self.calls: dict[str, list[dict]] = {}
        for row in query.rows(store.tool_calls.table, "tool_calls", None):
            self.calls.setdefault(row["session_id"], []).append(row)

    def used(self, session_id: str) -> Counter:
        """How many completed steps of a session used each inbox item (by action id)."""
        return Counter(g.get("action_id") for s in self.steps.get(session_id, []) if s["status"] in ("ok", "done")
                       for g in s.get("guidance") or [] if isinstance(g, dict))


PARKED = re.compile(r"#\d+ started (?:alone )?by (\S+) at (\S+?)(, raised [^;]*)?"
                    r"(?:, its worker stopped before it ended)?(?: \(beside others: not counted\))?(?:;|$)")


def check(loop: KillLoop, actions: list[dict]) -> dict:
    """Every check of the module docstring; returns the figures of the run."""
    record = Record(loop.store)
    problems: list[str] = []
    by_id = {a["id"]: a for a in actions}
    parked = [a for a in actions if a["status"] == "failed" and (a.get("error") or "").startswith("parked after")]
    for action in parked:  # each attempt it lists started, and agents.py was killed after it (or it raised)
        for worker, at, raised in PARKED.findall(action["error"]):
            started = datetime.fromisoformat(at).replace(tzinfo=timezone.utc)
            if not raised and not any(k >= started for k in loop.killed_at):
                problems.append(f"action {action['id']} parked with an attempt at {at} that no kill cut: {action}")
    finished = {"done", "stopped"}  # no row of such a session may be left running or waiting
    # No iteration gap or duplicate, anywhere.
    for sid, steps in record.steps.items():
        its = [s["iteration"] for s in steps]
        first = its[0] if its else 0
        if its != list(range(first, first + len(its))):
            problems.append(f"session {sid}: iterations {its[:50]}")
    problems += [f"session {sid} is in error: {s.get('last_error')}" for sid, s in record.states.items()
                 if s["status"] == "error"]
    problems += check_controls(loop, record, actions)
    problems += check_tools(loop, record, by_id)
    problems += check_questions(loop, record, actions)
    problems += check_trees(loop, record)
    problems += check_replays(loop, record)
    problems += check_conversation(loop, record, by_id)
    # No row left running or waiting once everything settled (unknown is the contract for a cut call).
    for sid, rows in record.calls.items():
        for row in rows:
            if row["status"] not in TOOL_CALL_ENDED and record.states.get(sid, {}).get("status") in finished:
                problems.append(f"tool call {row['id']} ({row['name']}) of finished session {sid} is {row['status']}")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])
    statuses = Counter(a["status"] for a in actions)
    calls = [r for rows in record.calls.values() for r in rows]
    why = Counter(f"{a['type']}: {_reason(a['error'])}" for a in actions if a["status"] == "failed")
    return {"actions accepted": len(actions), "actions done": statuses["done"], "actions failed": statuses["failed"],
            "actions parked": len(parked), "actions lost": 0, "sessions": len(record.states),
            "steps": sum(len(s) for s in record.steps.values()), "tool calls": len(calls),
            "tool calls unknown (cut mid-run)": sum(r["status"] == "unknown" for r in calls),
            "children": sum(1 for s in record.states.values() if s.get("parent_session_id")),
            "questions": sum(r["name"] == "ask_user" for r in calls),
            "replays": len(loop.replays.replays), "conversation messages": len(loop.conversation.answered),
            "interrupted steps": sum(s["status"] == "interrupted" for rows in record.steps.values() for s in rows),
            "actions failed, by reason": dict(why.most_common())}


def _reason(error: str | None) -> str:
    """An error without its ids, to count failures by kind."""
    return re.sub(r"\b[0-9A-Z]{26}\b", "<id>", (error or "")[:70])


def check_controls(loop: KillLoop, record: Record, actions: list[dict]) -> list[str]:
    """Each control session's actions, in the order accepted, end as they imply;
    each piece of guidance and inbox item reaches one step at most (exactly one
    while the session runs)."""
    problems = []
    for session in loop.controls.all:
        sid = session["session_id"]
        status, used = "running", record.used(sid)
        mine = sorted((a for a in actions if a["session_id"] == sid), key=lambda a: a["id"])  # ULIDs: accepted order
        for action in mine:
            verb = action["type"]
            want = ("done" if verb == "destroy" else "failed") if status == "stopped" else "done"
            if action["status"] != want:
                problems.append(f"control {verb} {action['id']} of {sid} is {action['status']} "
                                f"({action.get('error')}), its order implies {want}")
            if status != "stopped":
                status = {"pause": "paused", "resume": "running", "destroy": "stopped"}.get(verb, status)
        final = record.states[sid]["status"]
        if final != status:
            problems.append(f"control session {sid} is {final}, its actions imply {status}")
        for action in mine:
            if action["type"] in ("interrupt", "inbox_item") and action["status"] == "done":
                n = used[action["id"]]
                if n > 1 or (status != "stopped" and n == 0 and not _still_queued(record, sid, action["id"])):
                    problems.append(f"{action['type']} {action['id']} of {sid} ({status}) reached {n} steps")
    return problems


def _still_queued(record: Record, session_id: str, action_id: str) -> bool:
    """Guidance accepted just before the end may not have reached a step yet."""
    return any(g.get("action_id") == action_id for g in record.states[session_id].get("pending_guidance") or [])


def check_tools(loop: KillLoop, record: Record, by_id: dict) -> list[str]:
    """Counted tools: a non-idempotent call started at most once (once if it
    succeeded, never if denied), an idempotent one at least once if it
    succeeded; one decision applied per call; each ended call's result
    reached exactly one later step; every tool session ended done."""
    problems, count_dir = [], loop.svc.count_dir
    decisions: dict[str, list[dict]] = {}
    for action in by_id.values():
        if action["type"] in ("tool_approve", "tool_deny", "tool_result"):
            decisions.setdefault(action["payload"]["tool_call_id"], []).append(action)
    for session in loop.tools.all:
        sid = session["session_id"]
        if record.states[sid]["status"] != "done":
            problems.append(f"tool session {sid} ended {record.states[sid]['status']}")
        rows = record.calls.get(sid, [])
        for row in rows:
            key = (row.get("args") or {}).get("key")
            ran = read_count(count_dir, key) if key else 0
            if row["name"] == NOT_IDEMPOTENT and (ran > 1 or (row["status"] == "success" and ran != 1)
                                                  or (row["status"] == "denied" and ran)):
                problems.append(f"{row['id']} ({row['status']}) ran {ran} times")
            if row["name"] == IDEMPOTENT and row["status"] == "success" and ran < 1:
                problems.append(f"{row['id']} succeeded but never ran")
            applied = [a["id"] for a in decisions.get(row["id"], []) if a["status"] == "done"]
            if decisions.get(row["id"]) and applied != [row.get("decided_by")]:
                problems.append(f"call {row['id']}: decisions applied {applied}, the row names {row.get('decided_by')}")
            for a in decisions.get(row["id"], []):
                if a["status"] == "failed" and not a["error"].startswith("conflict"):
                    problems.append(f"decision {a['id']} on {row['id']} failed: {a['error']}")
        problems += _results_delivered_once(record, sid)
    return problems


def _results_delivered_once(record: Record, session_id: str) -> list[str]:
    steps = record.steps.get(session_id, [])
    delivered = Counter(r["id"] for s in steps for r in (s.get("inputs") or {}).get("tool_results") or [])
    last = steps[-1]["iteration"] if steps else -1
    problems = [f"session {session_id}: results delivered twice: {k}" for k, n in delivered.items() if n > 1]
    for row in record.calls.get(session_id, []):
        if row["iteration"] < last and delivered[row.get("call_id") or row["id"]] != 1:
            problems.append(f"session {session_id}: the result of {row['id']} reached "
                            f"{delivered[row.get('call_id') or row['id']]} steps")
    return problems


def check_questions(loop: KillLoop, record: Record, actions: list[dict]) -> list[str]:
    """Each question ended once (answered, defaulted, or unanswered) by the one
    action its row names; every other answer to it failed as a conflict."""
    problems = []
    answers: dict[str, list[dict]] = {}
    for action in actions:
        if action["type"] == "answer":
            answers.setdefault(action["payload"].get("tool_call_id"), []).append(action)
    for session in loop.questions.all:
        sid = session["session_id"]
        if record.states[sid]["status"] != "done":
            problems.append(f"question session {sid} ended {record.states[sid]['status']}")
        for row in record.calls.get(sid, []):
            mine = answers.get(row["id"], [])
            timeouts = {a["id"] for a in mine if (a.get("payload") or {}).get("timed_out")}
            # A timeout applied after an answer changes nothing and is done; a person's answer applies once.
            applied = [a["id"] for a in mine if a["status"] == "done" and a["id"] not in timeouts]
            want = [] if row.get("decided_by") in timeouts else [row.get("decided_by")]
            if row["status"] not in TOOL_CALL_ENDED or applied != want:
                problems.append(f"question {row['id']} ({row['status']}): answers applied {applied}, "
                                f"the row names {row.get('decided_by')}")
            for a in answers.get(row["id"], []):
                if a["status"] == "failed" and not a["error"].startswith("conflict"):
                    problems.append(f"answer {a['id']} to {row['id']} failed: {a['error']}")
        problems += _results_delivered_once(record, sid)
    return problems


def check_trees(loop: KillLoop, record: Record) -> list[str]:
    """Every child finished and reported each generation; its parent got each
    outcome exactly once: the waited-for child's as the spawn call's result
    (never also in the inbox), the other's as an inbox item."""
    problems = []
    for parent in loop.trees.parents:
        pid = parent["session_id"]
        if record.states[pid]["status"] != "done":
            problems.append(f"parent {pid} ended {record.states[pid]['status']}")
        consumed = Counter((i["data"]["child_session_id"], i["data"]["generation"])
                           for s in record.steps.get(pid, []) if s["status"] in ("ok", "done")
                           for i in (s.get("inputs") or {}).get("inbox") or [] if i.get("kind") == "child_result")
        spawned = {(r.get("result") or {}).get("session_id"): r for r in record.calls.get(pid, [])
                   if r["name"] == "spawn_agent"}
        children = [s for s in record.states.values() if s.get("parent_session_id") == pid]
        made = sum(r["status"] == "success" for r in spawned.values())
        if len(children) != made:
            problems.append(f"parent {pid} has {len(children)} children of {made} spawns that succeeded")
        problems += _results_delivered_once(record, pid)
        for child in children:
            cid = child["session_id"]
            if child["status"] != "done" or child.get("reported_generation") != child.get("generation"):
                problems.append(f"child {cid} is {child['status']}, reported {child.get('reported_generation')} "
                                f"of {child.get('generation')} generations")
            waited = (child.get("subagent") or {}).get("wait_call")
            for generation in range(1, int(child.get("generation") or 1) + 1):
                n = consumed[(cid, generation)]
                if waited and generation == 1:
                    call = spawned.get(cid)
                    ok = call is not None and call["status"] == "success" and n == 0
                    if not ok:
                        problems.append(f"waited-for child {cid}: call {call and call['status']}, in the inbox {n}")
                elif n != 1:
                    problems.append(f"child {cid} generation {generation} reached parent {pid} {n} times")
    return problems


def check_replays(loop: KillLoop, record: Record) -> list[str]:
    """A replay ran no tool (the counts checked above cover the keys it
    shares with its recording) and ran as far as its recording."""
    problems = []
    for replay in loop.replays.replays:
        rid, source = replay["session_id"], replay["source"]
        state = record.states.get(rid)
        if state is None:
            problems.append(f"replay {rid} of {source} was never created")
            continue
        for row in record.calls.get(rid, []):
            if row["status"] != "replayed":
                problems.append(f"replay {rid}: call {row['id']} ({row['name']}) is {row['status']}: {row.get('error')}")
        mine = [s["iteration"] for s in record.steps.get(rid, [])]
        theirs = [s["iteration"] for s in record.steps.get(source, [])]
        if state["status"] != "done" or mine != theirs:
            problems.append(f"replay {rid} of {source} is {state['status']} ({state.get('last_error')}) "
                            f"at {mine[-1:] or None}, its recording went to {theirs[-1:] or None}")
    return problems


def check_conversation(loop: KillLoop, record: Record, by_id: dict) -> list[str]:
    """Every message answered 201 was handed to both participants, and each
    delivery reached its participant's steps exactly once (they step forever)."""
    problems, conversation = [], loop.conversation
    for posted in conversation.answered:
        if len(posted["deliveries"]) != len(conversation.members):
            problems.append(f"message {posted['message']['message_id']} had {len(posted['deliveries'])} deliveries")
    for member in conversation.members:
        used = record.used(member["session_id"])
        for action in by_id.values():
            source = (action.get("payload") or {}).get("source") or {}
            if action["session_id"] != member["session_id"] or source.get("conversation_id") != conversation.conversation_id:
                continue
            if action["status"] != "done":
                problems.append(f"message delivery {action['id']} {action['status']}: {action.get('error')}")
            elif used[action["id"]] != 1 and not _still_queued(record, member["session_id"], action["id"]):
                problems.append(f"message delivery {action['id']} reached {used[action['id']]} steps")
    return problems
