"""Helpers for the tests that break things on purpose: a background stream of
control actions over HTTP, a model of what those actions must do to each
session, and checks on what was persisted afterwards."""
import random
import threading
from datetime import datetime
from dataclasses import dataclass, field

import requests

from tests.harness import Service, wait_for

FINISHED_ACTION = ("done", "failed")


def iterations(steps: list[dict]) -> list[int]:
    return [s["iteration"] for s in steps]


def assert_contiguous(steps: list[dict], what: str = "session") -> None:
    """Iterations are exactly 0..n: no gap, no duplicate (an interrupted step counts)."""
    its = iterations(steps)
    assert its == list(range(len(its))), f"{what}: iterations not 0..n without gaps or duplicates: {its}"


def guidance_ids(step: dict) -> list[str]:
    return [g.get("action_id") for g in (step.get("guidance") or []) if isinstance(g, dict)]


def delivered(steps: list[dict], action_id: str) -> int:
    """How many completed steps used the guidance of ``action_id`` (interrupted and
    error rows keep guidance queued for the next step, so they do not count)."""
    return sum(guidance_ids(s).count(action_id) for s in steps if s["status"] in ("ok", "done"))


@dataclass
class Sent:
    """One accepted (202) control action."""
    agent_id: str
    session_id: str
    verb: str
    action_id: str
    guidance: str | None = None


@dataclass
class SessionModel:
    """What the accepted actions of one session, applied in acceptance order, imply."""
    status: str = "running"
    expected: dict = field(default_factory=dict)  # action_id -> "done" | "failed"

    def apply(self, sent: Sent) -> None:
        if self.status == "stopped":
            # Destroying a stopped session is a no-op; any other control fails.
            self.expected[sent.action_id] = "done" if sent.verb == "destroy" else "failed"
            return
        self.expected[sent.action_id] = "done"
        self.status = {"pause": "paused", "resume": "running", "destroy": "stopped"}.get(sent.verb, self.status)


def model(sessions: list[str], sent: list[Sent]) -> dict[str, SessionModel]:
    models = {sid: SessionModel() for sid in sessions}
    for s in sent:  # ``sent`` is in acceptance order: one thread sent them one by one
        models[s.session_id].apply(s)
    return models


class ControlStream(threading.Thread):
    """Sends pause / resume / interrupt to random sessions from a background
    thread, and a destroy as the n-th action for each n in ``destroy_at``,
    recording every accepted action in the order it was accepted.

    ``inbox`` hands a session an inbox item of another kind (a child's result,
    an answer, a system note) through the internal ``inbox_item`` action,
    appended to the queue through the store as the service's own parts do:
    like guidance, each must reach exactly one step."""

    WEIGHTS = {"pause": 3, "resume": 3, "interrupt": 3, "inbox": 2}
    INBOX_KINDS = ("child_result", "answer", "system")

    def __init__(self, svc: Service, agents: list[dict], seed: int, destroy_at=(),
                 gap_s: tuple[float, float] = (0.01, 0.15)):
        super().__init__(name="control-stream", daemon=True)
        self.url = svc.url
        self.http = requests.Session()
        self.agents = agents
        self.rng = random.Random(seed)
        self.destroy_at = set(destroy_at)
        self.attempted = 0
        self.gap_s = gap_s
        self.sent: list[Sent] = []
        self.refused: list[tuple[str, int, str]] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.data_dir = svc.data_dir
        self.store = None  # opened on the first inbox item

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.send_one()
                self.stopping.wait(self.rng.uniform(*self.gap_s))
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def send_one(self) -> None:
        agent = self.rng.choice(self.agents)
        verb = ("destroy" if self.attempted in self.destroy_at
                else self.rng.choices(list(self.WEIGHTS), list(self.WEIGHTS.values()))[0])
        self.attempted += 1
        body = {"session_id": agent["session_id"]}
        guidance = None
        if verb == "inbox":
            self.send_inbox_item(agent)
            return
        if verb == "interrupt":
            guidance = body["guidance"] = f"tell jokes about topic-{len(self.sent)}-{self.rng.randrange(10**6)}"
        r = self.http.post(f"{self.url}/api/agents/{agent['agent_id']}/{verb}", json=body, timeout=30)
        if r.status_code == 202:
            self.sent.append(Sent(agent["agent_id"], agent["session_id"], verb, r.json()["action_id"], guidance))
        else:
            self.refused.append((verb, r.status_code, r.text[:200]))

    def send_inbox_item(self, agent: dict) -> None:
        from store import Store
        if self.store is None:
            self.store = Store(self.data_dir + "/lancedb")
        kind = self.rng.choice(self.INBOX_KINDS)
        text = f"{kind} number {len(self.sent)}"
        action = self.store.actions.enqueue("inbox_item", agent_id=agent["agent_id"],
                                            session_id=agent["session_id"],
                                            payload={"kind": kind, "text": text, "source": {"kind": kind}})
        self.sent.append(Sent(agent["agent_id"], agent["session_id"], "inbox", action["id"], text))

    def stop(self) -> list[Sent]:
        self.stopping.set()
        self.join(timeout=60)
        assert not self.is_alive(), "control stream did not stop"
        if self.store is not None:
            self.store.close()
        if self.error:
            raise self.error
        return self.sent


def wait_actions_finished(svc: Service, action_ids: list[str], timeout: float = 60.0) -> dict[str, dict]:
    """Every action reaches done or failed; on timeout, say which are stuck and how."""
    actions: dict[str, dict] = {}

    def all_finished():
        for action_id in action_ids:
            if actions.get(action_id, {}).get("status") not in FINISHED_ACTION:
                actions[action_id] = svc.get(f"/api/actions/{action_id}").json()
        return all(a.get("status") in FINISHED_ACTION for a in actions.values())

    try:
        wait_for(all_finished, timeout=timeout, interval=0.5, what="every accepted action to finish")
    except AssertionError:
        stuck = [{k: a.get(k) for k in ("id", "type", "session_id", "status", "claimed_by", "attempts",
                                         "lease_until", "created_at")}
                 for a in actions.values() if a.get("status") not in FINISHED_ACTION]
        raise AssertionError(f"{len(stuck)} accepted actions still pending/processing after {timeout}s: "
                             f"{stuck}") from None
    return actions


def assert_actions_match_model(actions: dict[str, dict], models: dict[str, SessionModel]) -> None:
    """Each action ended as the model says; a failed one says why."""
    for m in models.values():
        for action_id, outcome in m.expected.items():
            a = actions[action_id]
            assert a["status"] == outcome, f"action {a['type']} {action_id} is {a['status']} " \
                                           f"({a.get('error')}), expected {outcome}: {a}"
            if a["status"] == "failed":
                assert a.get("error"), f"failed action {action_id} has no error: {a}"


def assert_applied_in_order(actions: dict[str, dict], sent: list[Sent]) -> None:
    """The actions of each session finished in the order they were accepted (a
    lane applies one at a time, so ``processed_at`` never goes back)."""
    last: dict[str, tuple[str, str]] = {}
    for s in sent:
        finished = actions[s.action_id]["processed_at"]
        if s.session_id in last:
            prev_id, prev_at = last[s.session_id]
            assert _ts(finished) >= _ts(prev_at), (
                f"session {s.session_id}: {s.verb} {s.action_id} finished at {finished}, before "
                f"{prev_id} (accepted earlier) finished at {prev_at}: {actions[prev_id]}")
        last[s.session_id] = (s.action_id, finished)


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def wait_new_steps(svc: Service, session_ids: list[str], n: int = 2, timeout: float = 180.0) -> None:
    """Each of these sessions takes ``n`` more steps from now on.  The deadline is
    generous: at a load of 15, with a 26 s compaction of agent_steps in the worker,
    three steps once took over 60 s (test_processes in a whole run)."""
    base = {sid: len(svc.steps(sid)) for sid in session_ids}
    for sid in session_ids:
        svc.wait_steps(sid, base[sid] + n, timeout=timeout)


def table_contents(svc: Service, skip=("workers",)) -> dict[str, list[str]]:
    """Every row of every table (but ``skip``: heartbeats change on their own),
    as sorted reprs, read straight from LanceDB: equal means nothing changed."""
    from store import Store
    store = Store(svc.data_dir + "/lancedb")
    try:
        return {name: sorted(map(repr, table.to_arrow().to_pylist()))
                for name, table in store.tables.items() if name not in skip}
    finally:
        store.close()


def snapshot_row_counts(svc: Service) -> dict[str, int]:
    """Row counts of the tables, read straight from LanceDB."""
    from store import Store
    store = Store(svc.data_dir + "/lancedb")
    try:
        return {name: table.count_rows() for name, table in store.tables.items()}
    finally:
        store.close()


# ---- tool calls in the crash harness ---------------------------------------------

def tool_script(index: int, steps: int = 60) -> list[dict]:
    """Frames for a ``scripted`` session whose every step asks for one call that
    needs approval (a counted, non-idempotent tool) and one external result."""
    return [{"text": f"step {n}", "tool_calls": [
        {"id": f"a{n}", "name": "sleep_count", "args": {"seconds": 0.1, "key": f"s{index}-{n}"}},
        {"id": f"h{n}", "name": "human", "args": {"question": f"q{n}"}}]} for n in range(steps)]


@dataclass
class ToolSent:
    """One accepted (202) approve / deny / result."""
    session_id: str
    tool_call_id: str
    verb: str
    action_id: str


class ToolStream(threading.Thread):
    """Answers the tool calls of some sessions from a background thread: approves
    (or sometimes denies) calls waiting for approval and posts results to calls
    waiting for one, now and then twice in a row, recording what was accepted."""

    def __init__(self, svc: Service, session_ids: list[str], seed: int, gap_s=(0.01, 0.1)):
        super().__init__(name="tool-stream", daemon=True)
        self.url = svc.url
        self.http = requests.Session()
        self.session_ids = session_ids
        self.rng = random.Random(seed)
        self.gap_s = gap_s
        self.sent: list[ToolSent] = []
        self.conflicts = 0  # 409s: the call was no longer waiting when the request came
        self.decided: set[str] = set()  # calls with an accepted decision
        self.refused: list[tuple[str, int, str]] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.data_dir = svc.data_dir
        self.store = None  # opened on the first inbox item

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                for sid in self.session_ids:
                    self.answer(sid)
                self.stopping.wait(self.rng.uniform(*self.gap_s))
        except requests.ConnectionError:
            pass  # app.py is not what the harness kills; a blip just ends the stream
        except BaseException as exc:
            self.error = exc

    def answer(self, session_id: str) -> None:
        r = self.http.get(f"{self.url}/api/tool-calls", params={"session_id": session_id, "limit": 50}, timeout=30)
        for call in r.json()["tool_calls"]:
            if call["id"] in self.decided:
                continue  # its decision is queued (maybe behind a restart): answering again only adds conflicts
            if call["status"] == "waiting_approval":
                verb = "deny" if self.rng.random() < 0.2 else "approve"
                body = {"reason": "harness says no"} if verb == "deny" else {}
            elif call["status"] == "waiting_result":
                verb, body = "result", {"result": {"answer": call["call_id"]}}
            else:
                continue
            for _ in range(2 if self.rng.random() < 0.3 else 1):
                self.post(session_id, call["id"], verb, body)

    def post(self, session_id: str, tool_call_id: str, verb: str, body: dict) -> None:
        r = self.http.post(f"{self.url}/api/tool-calls/{tool_call_id}/{verb}", json=body, timeout=30)
        if r.status_code == 202:
            self.sent.append(ToolSent(session_id, tool_call_id, verb, r.json()["action_id"]))
            self.decided.add(tool_call_id)
        elif r.status_code == 409:
            self.conflicts += 1
        else:
            self.refused.append((verb, r.status_code, r.text[:200]))

    def stop(self) -> list[ToolSent]:
        self.stopping.set()
        self.join(timeout=60)
        assert not self.is_alive(), "tool stream did not stop"
        if self.error:
            raise self.error
        return self.sent


def assert_tool_calls_exactly_once(svc: Service, sent: list[ToolSent], actions: dict[str, dict],
                                   count_dir: str) -> dict:
    """Of the decisions accepted for a call, exactly one applied (the one its row
    names in ``decided_by``) and the others failed as conflicts; a counted tool
    started at most once (once if it succeeded, never if denied); and every ended
    call's result reached exactly one later step, none twice."""
    from tests.plugins import read_count

    by_call: dict[str, list[ToolSent]] = {}
    for s in sent:
        by_call.setdefault(s.tool_call_id, []).append(s)
    rows = {}
    for sid in {s.session_id for s in sent}:
        for row in svc.get("/api/tool-calls", session_id=sid, limit=1000).json()["tool_calls"]:
            rows[row["id"]] = row
    for call_id, decisions in by_call.items():
        row = rows[call_id]
        done = [d.action_id for d in decisions if actions[d.action_id]["status"] == "done"]
        assert done == [row["decided_by"]], f"call {call_id}: applied {done}, row says {row['decided_by']}: {row}"
        for d in decisions:
            if d.action_id != row["decided_by"]:
                a = actions[d.action_id]
                assert a["status"] == "failed" and a["error"].startswith("conflict"), a
    for row in rows.values():
        if row["name"] == "sleep_count":
            ran = read_count(count_dir, row["args"]["key"])
            assert ran <= 1, f"{row['id']} ran {ran} times"
            if row["status"] == "success":
                assert ran == 1, (row, ran)
            elif row["status"] in ("denied", "waiting_approval", "pending"):
                assert ran == 0, (row, ran)
    delivered_results: dict[str, int] = {}
    later_step: dict[str, bool] = {}
    for sid in {s.session_id for s in sent}:
        steps = svc.steps(sid)
        assert_contiguous(steps, f"tool session {sid}")
        last = steps[-1]["iteration"] if steps else -1
        for step in steps:
            for result in (step.get("inputs") or {}).get("tool_results") or []:
                key = f"{sid}/{result['id']}"
                delivered_results[key] = delivered_results.get(key, 0) + 1
        for row in rows.values():
            if row["session_id"] == sid:
                later_step[f"{sid}/{row['call_id']}"] = row["iteration"] < last
    assert all(n == 1 for n in delivered_results.values()), \
        f"results delivered twice: {[k for k, n in delivered_results.items() if n > 1]}"
    missing = [k for k, later in later_step.items() if later and k not in delivered_results]
    assert not missing, f"results of ended calls never reached a step: {missing}"
    return {"tool_calls": len(rows), "tool_decisions": len(sent),
            "tool_conflicts": sum(actions[s.action_id]["status"] == "failed" for s in sent)}
