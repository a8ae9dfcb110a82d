"""The store from several processes at once: workers in their own processes
racing to claim the same actions."""
import multiprocessing as mp

import pytest

from store import Store


def _claim_all(uri, worker, ids, out):
    try:
        s = Store(uri)
        held = []
        for i in range(0, len(ids), 5):
            held += s.actions.claim(ids[i:i + 5], worker, 60)
        out.put((worker, held))
    except Exception as exc:  # report instead of dying silently
        out.put((worker, f"{type(exc).__name__}: {exc}"))


def test_racing_processes_never_claim_the_same_action(tmp_path):
    uri = str(tmp_path / "db")
    store = Store(uri)
    ids = [store.actions.enqueue("pause", agent_id="a1", session_id=f"s{i}")["id"] for i in range(60)]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claim_all, args=(uri, f"w{n}", ids, out)) for n in range(3)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    for worker, held in results.items():
        assert isinstance(held, list), f"{worker} failed: {held}"
    claims = [set(results[f"w{n}"]) for n in range(3)]
    for i in range(3):
        for j in range(i + 1, 3):
            assert not (claims[i] & claims[j]), f"claimed twice: {claims[i] & claims[j]}"
    assert set().union(*claims) == set(ids)
    for n, claim in enumerate(claims):  # what each worker was told it holds is what the table says
        assert {store.actions.get(i)["claimed_by"] for i in claim} <= {f"w{n}"}
    for action in store.actions.pending(limit=100):
        pytest.fail(f"left pending: {action['id']}")
