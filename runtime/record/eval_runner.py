"""Driving eval runs (issue 29): replay every session of a set, score each pair.

app.py accepted the run and stored, per session of the set, the replay's
create payload and a pre-assigned replay session id (api/routes/evals.py).
This chore of agents.py takes it from there, a round every ``every_s`` (less
often while no run is running, on object storage: ``idle_every_s``):

1. It holds the run's lease (store/evals.py ``claim_run``), so one worker of
   several drives a run at a time; a worker that dies loses it when the lease
   runs out (a restarted worker gets its id back and takes it again at once).
2. Each enqueued replay that has finished (done, stopped, error, or waiting for
   input: its turn is over) is scored with the run's scorers; the score rows
   are written, then the session's row is marked ``scored``.  A create that
   failed marks it ``failed``.
3. Pending sessions are enqueued as ``create`` actions until ``concurrency``
   replays are unfinished; each row is marked ``enqueued`` after its create is
   durable.
4. When every session is scored or failed, the run is ``done``.

Every step is safe to repeat after a crash: a create is not enqueued again
when the queue already holds one for that session id (and the dispatcher
ignores a second create of an existing session anyway), and scores are
upserted by (run, session, scorer), so scoring a pair again replaces them.
"""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from domain.statuses import SESSION_FINISHED, SessionStatus
from evals.scorers import Score, ScorerRegistry, UnknownScorer, run_scorer
from runtime.base.aio import Backoff, every_backoff
from store.codec import parse_time

if TYPE_CHECKING:
    from store import Store

log = logging.getLogger("runtime.eval_runner")

# A replay is scored once its turn is over: finished, or waiting for input it will not get.
SCORABLE = SESSION_FINISHED | {SessionStatus.WAITING.value}
IDLE_EVERY_S = 10.0  # on object storage, the longest wait between rounds while no run is running
MAX_RECORD_STEPS = 5000  # of a session read for scoring
MAX_RECORD_CALLS = 20_000


def load_record(store: Store, session_id: str, from_iteration: int = 0) -> dict:
    """A session as the scorers read it (evals/diff.py): snapshot, steps from
    ``from_iteration`` on (oldest first) and tool calls."""
    snapshot = store.states.get(session_id) or {}
    steps = store.steps.search(session_id=session_id, min_iteration=from_iteration, limit=MAX_RECORD_STEPS)
    calls = store.tool_calls.search(session_id=session_id, limit=MAX_RECORD_CALLS)
    return {"snapshot": snapshot, "steps": steps, "tool_calls": calls}


class EvalRunner:
    def __init__(self, store: Store, scorers: ScorerRegistry, *, worker_id: str, every_s: float = 1.0,
                 lease_s: float = 30.0, idle_every_s: float | None = None):
        """``idle_every_s``: while no run is running, rounds back off from ``every_s``
        to this (a new run starts that much later), and a round reads the runs only
        when the eval_runs table's version moved (one request instead of a query's
        ~5 on object storage).  Default: 10 s on object storage, else ``every_s``."""
        self.store = store
        self.evals = store.evals
        self.scorers = scorers
        self.worker_id = worker_id
        self.every_s = every_s
        self.lease_s = lease_s
        if idle_every_s is None:
            idle_every_s = IDLE_EVERY_S if store.on_object_storage else every_s
        self.backoff = Backoff(every_s, idle_every_s)
        self._none_at = None  # the runs table's version when a round last found none running

    async def run(self, stopping: asyncio.Event) -> None:
        await every_backoff(stopping, self.backoff, self.round, "eval run round")

    async def round(self) -> bool:
        """One round over the running runs; whether there were any."""
        if self.backoff.most_s > self.backoff.base_s:
            version = await asyncio.to_thread(self.evals.runs_version)
            if version == self._none_at:
                return False
        else:
            version = None
        running = await asyncio.to_thread(self.evals.running)
        self._none_at = None if running else version
        for run in running:
            if await self._hold(run):
                try:
                    await self.advance(run)
                except Exception:
                    log.exception("eval run %s: a round failed; tried again next round", run["id"])
        return bool(running)

    async def _hold(self, run: dict) -> bool:
        """Whether this worker drives the run now: renewed only when half the lease is gone."""
        until = run.get("lease_until")
        if run.get("owner") == self.worker_id and until:
            left = parse_time(until) - datetime.now(timezone.utc)
            if left > timedelta(seconds=self.lease_s / 2):
                return True
        return await asyncio.to_thread(self.evals.claim_run, run["id"], self.worker_id, self.lease_s)

    async def advance(self, run: dict) -> None:
        results = await asyncio.to_thread(self.evals.results_of, run["id"])
        enqueued = [r for r in results if r["status"] == "enqueued"]
        unfinished = await self._collect(run, enqueued)
        slots = int((run.get("request") or {}).get("concurrency") or 1) - unfinished
        for result in [r for r in results if r["status"] == "pending"][:max(slots, 0)]:
            await self._enqueue(result)
        if all(r["status"] in ("scored", "failed") for r in results):
            if await asyncio.to_thread(self.evals.finish_run, run["id"], self.worker_id):
                log.info("eval run %s done: %d sessions", run["id"], len(results))

    async def _collect(self, run: dict, enqueued: list[dict]) -> int:
        """Score the enqueued replays that have finished; how many are still unfinished."""
        if not enqueued:
            return 0
        states = await asyncio.to_thread(self.store.states.get_many, [r["replay_session_id"] for r in enqueued],
                                         ("session_id", "status"))
        unfinished, scoring = 0, []
        for result in enqueued:
            state = states.get(result["replay_session_id"])
            if state is not None and state["status"] in SCORABLE:
                scoring.append(self._score(run, result, state["status"]))
            elif state is None and await self._create_failed(result):
                continue
            else:
                unfinished += 1
        await asyncio.gather(*scoring)
        return unfinished

    async def _create_failed(self, result: dict) -> bool:
        """A replay without a snapshot: True (and the row marked failed) when its create failed."""
        create = await asyncio.to_thread(self.store.actions.find_create, session_id=result["replay_session_id"])
        if create is None:  # cannot happen unless the queue lost it: enqueue it again
            await asyncio.to_thread(self.evals.save_results, [{**result, "status": "pending"}])
            return True
        if create["status"] != "failed":
            return False
        await asyncio.to_thread(self.evals.save_results, [{**result, "status": "failed",
                                                           "error": f"the replay's create failed: {create['error']}"}])
        return True

    async def _enqueue(self, result: dict) -> None:
        sid = result["replay_session_id"]
        if await asyncio.to_thread(self.store.actions.find_create, session_id=sid) is None:
            await asyncio.to_thread(self.store.actions.enqueue, "create", agent_id=result["agent_id"],
                                    session_id=sid, payload=result["payload"])
        await asyncio.to_thread(self.evals.save_results, [{**result, "status": "enqueued"}])

    async def _score(self, run: dict, result: dict, replay_status: str) -> None:
        request = run.get("request") or {}
        context = {"run_id": run["id"], "evalset_id": run["evalset_id"], "judge": request.get("judge"),
                   "from_iteration": ((result.get("payload") or {}).get("replay") or {}).get("from_iteration", 0),
                   "request": request}
        source, replay = await asyncio.gather(
            asyncio.to_thread(load_record, self.store, result["source_session_id"], context["from_iteration"]),
            asyncio.to_thread(load_record, self.store, result["replay_session_id"], context["from_iteration"]))
        names = request.get("scorers") or []
        scores = await asyncio.gather(*(self._one(name, source, replay, context) for name in names))
        rows = [{"run_id": run["id"], "evalset_id": run["evalset_id"], "source_session_id": result["source_session_id"],
                 "replay_session_id": result["replay_session_id"], "scorer": name, "value": s.value,
                 "passed": s.passed, "detail": s.detail} for name, s in zip(names, scores)]
        await asyncio.to_thread(self.evals.save_scores, rows)
        await asyncio.to_thread(self.evals.save_results, [{**result, "status": "scored",
                                                           "replay_status": replay_status}])

    async def _one(self, name: str, source: dict, replay: dict, context: dict) -> Score:
        try:
            scorer = self.scorers.get(name)
        except UnknownScorer:
            return Score(None, None, {"error": f"scorer {name!r} is not installed on worker {self.worker_id}"})
        return await run_scorer(scorer, source, replay, context)
