"""Helpers for the tests that run several agents.py workers on one data
directory: a ``service`` fixture with no workers started, the workers table,
and checks that actions and guidance were applied exactly once."""
import pytest

from store import Store
from tests.chaos_client import delivered, wait_actions_finished
from tests.harness import Service, wait_for


@pytest.fixture
def service(tmp_path_factory):
    """app.py and a data directory; each test starts its workers with its own flags.
    (Named ``service`` so conftest attaches the logs when a test fails.)"""
    root = tmp_path_factory.mktemp("workers")
    (root / "logs").mkdir()
    svc = Service(str(root / "data"), str(root / "logs"))
    yield svc
    svc.stop()


def workers(svc: Service) -> dict[str, dict]:
    """The workers table: worker_id -> row (pid, status, heartbeat_at)."""
    store = Store(svc.data_dir + "/lancedb")
    try:
        return {w["worker_id"]: w for w in store.workers.all()}
    finally:
        store.close()


def wait_workers(svc: Service, n: int) -> dict[str, dict]:
    return wait_for(lambda: len(w := {k: v for k, v in workers(svc).items() if v["status"] == "running"}) >= n
                    and w, timeout=60, what=f"{n} workers to heartbeat")


def owner(svc: Service, session_id: str) -> str | None:
    return svc.session(session_id).get("owner")


def send(svc: Service, agent: dict, verb: str, **body) -> str:
    r = svc.post(f"/api/agents/{agent['agent_id']}/{verb}", json={"session_id": agent["session_id"], **body})
    assert r.status_code == 202, r.text
    return r.json()["action_id"]


def assert_applied_once(svc: Service, action_ids: list[str], by: str | None = None) -> dict[str, dict]:
    """Each action is done, claimed exactly once (by ``by``, when given)."""
    actions = wait_actions_finished(svc, action_ids, timeout=60)
    for a in actions.values():
        assert a["status"] == "done", a
        assert a["attempts"] == 1, f"action {a['id']} ({a['type']}) was claimed {a['attempts']} times: {a}"
        if by:
            assert a["claimed_by"] == by, f"action {a['id']} applied by {a['claimed_by']}, not {by}"
    return actions


def assert_guidance_once(svc: Service, interrupts: dict[str, str]) -> None:
    """Each interrupt (action_id -> session_id) reached exactly one step."""
    for sid in set(interrupts.values()):
        before = len(svc.steps(sid))
        svc.wait_steps(sid, before + 1, timeout=90)  # a step after the guidance was queued
    for action_id, sid in interrupts.items():
        steps = svc.steps(sid)
        assert delivered(steps, action_id) == 1, \
            f"guidance {action_id} used by {delivered(steps, action_id)} steps of {sid}"
