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
    recording every accepted action in the order it was accepted."""

    WEIGHTS = {"pause": 3, "resume": 3, "interrupt": 3}

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
        if verb == "interrupt":
            guidance = body["guidance"] = f"tell jokes about topic-{len(self.sent)}-{self.rng.randrange(10**6)}"
        r = self.http.post(f"{self.url}/api/agents/{agent['agent_id']}/{verb}", json=body, timeout=30)
        if r.status_code == 202:
            self.sent.append(Sent(agent["agent_id"], agent["session_id"], verb, r.json()["action_id"], guidance))
        else:
            self.refused.append((verb, r.status_code, r.text[:200]))

    def stop(self) -> list[Sent]:
        self.stopping.set()
        self.join(timeout=60)
        assert not self.is_alive(), "control stream did not stop"
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


def wait_new_steps(svc: Service, session_ids: list[str], n: int = 2, timeout: float = 60.0) -> None:
    """Each of these sessions takes ``n`` more steps from now on."""
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
