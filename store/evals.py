"""Eval sets and runs (issue 29): four small tables.

- ``evalsets``: a named, frozen list of sessions (and the iteration replays
  start from).  Written once.
- ``eval_runs``: a run replays every session of a set under changed settings
  and scores each pair.  One agents.py worker drives a run at a time: it holds
  the run's lease (``owner``, ``lease_until``), taken and renewed with one
  conditional update, so two workers never score the same pair twice
  (a scorer may cost money: the LLM judge).
- ``eval_results``: one row per (run, session), upserted by
  ``"<run_id>/<source_session_id>"``: the replay's pre-assigned session id, its
  create payload (built and validated by app.py when the run was accepted) and
  its progress, pending -> enqueued -> scored | failed.
- ``eval_scores``: one row per (run, session, scorer), upserted by
  ``"<run_id>/<source_session_id>/<scorer>"``, so scoring a pair again (after a
  crash between the scores and the progress row) replaces, never duplicates.

"/" cannot occur in an id (store/filters.py), so these keys are unambiguous.
"""
from datetime import timedelta

from ulid import ULID

from store import codec, filters, query

RUN_STATUSES = {"running", "done", "failed"}
RESULT_STATUSES = {"pending", "enqueued", "scored", "failed"}
MAX_ROWS = 100_000  # a read of one run's rows never asks for more
TIMES = ("created_at", "updated_at", "finished_at", "lease_until")


def result_id(run_id: str, source_session_id: str) -> str:
    return f"{filters.check_id(run_id, 'run_id')}/{filters.check_id(source_session_id, 'session_id')}"


def score_id(run_id: str, source_session_id: str, scorer: str) -> str:
    return f"{result_id(run_id, source_session_id)}/{filters.check_id(scorer, 'scorer')}"


def _times(row: dict) -> dict:
    return codec.with_times(row, TIMES)


class EvalTables:
    def __init__(self, tables: dict, writer):
        self.sets = tables["evalsets"]
        self.runs = tables["eval_runs"]
        self.results = tables["eval_results"]
        self.scores = tables["eval_scores"]
        self.writer = writer

    # ---- sets -------------------------------------------------------------

    def create_set(self, *, name: str, session_ids: list[str], from_iteration: int = 0,
                   search: dict | None = None) -> dict:
        row = {"id": str(ULID()), "name": name, "session_ids": [filters.check_id(s, "session_id") for s in session_ids],
               "from_iteration": int(from_iteration), "search": search, "created_at": codec.utcnow()}
        self.writer.upsert("evalsets", "id", [row])
        return codec.decode("evalsets", codec.encode("evalsets", row))

    def get_set(self, evalset_id: str) -> dict | None:
        return query.first(self.sets, "evalsets", filters.eq_id("id", evalset_id))

    def list_sets(self, *, limit: int = 100, offset: int = 0) -> list[dict]:
        return query.rows(self.sets, "evalsets", None, order=[("created_at", False), ("id", False)],
                          limit=limit, offset=offset)

    # ---- runs -------------------------------------------------------------

    def create_run(self, *, evalset_id: str, request: dict, results: list[dict]) -> dict:
        """The run and its (run, session) rows: the rows first, so a run that a
        worker can see always has all of them."""
        run_id, now = str(ULID()), codec.utcnow()
        rows = [{"id": result_id(run_id, r["source_session_id"]), "run_id": run_id, "evalset_id": evalset_id,
                 "position": i, "source_session_id": r["source_session_id"],
                 "replay_session_id": filters.check_id(r["replay_session_id"], "session_id"),
                 "agent_id": r.get("agent_id"), "payload": r.get("payload"), "status": r.get("status", "pending"),
                 "replay_status": None, "error": r.get("error"), "created_at": now, "updated_at": now}
                for i, r in enumerate(results)]
        if rows:
            self.writer.upsert("eval_results", "id", rows)
        run = {"id": run_id, "evalset_id": filters.check_id(evalset_id, "evalset_id"), "status": "running",
               "request": request, "total": len(rows), "owner": None, "lease_until": None, "error": None,
               "created_at": now, "updated_at": now, "finished_at": None}
        self.writer.upsert("eval_runs", "id", [run])
        return codec.decode("eval_runs", codec.encode("eval_runs", run))

    def get_run(self, run_id: str) -> dict | None:
        return query.first(self.runs, "eval_runs", filters.eq_id("id", run_id))

    def runs_of_set(self, evalset_id: str, limit: int = 100) -> list[dict]:
        return query.rows(self.runs, "eval_runs", filters.eq_id("evalset_id", evalset_id),
                          order=[("created_at", True), ("id", True)], limit=limit)

    def runs_version(self) -> int:
        """The eval_runs table's latest version (one request on object storage):
        changes whenever any process writes a run."""
        return self.runs.version

    def running(self, limit: int = 100) -> list[dict]:
        return query.rows(self.runs, "eval_runs", filters.eq_word("status", "running", RUN_STATUSES),
                          order=[("created_at", True)], limit=limit)

    def claim_run(self, run_id: str, worker_id: str, lease_s: float) -> bool:
        """Take or renew the run's lease: True when ``worker_id`` holds it now.
        One conditional update: of racing workers one wins (store/actions.py ``claim``)."""
        now = codec.utcnow()
        where = filters.all_of(
            filters.eq_id("id", run_id), filters.eq_word("status", "running", RUN_STATUSES),
            filters.any_of("owner IS NULL", filters.eq_id("owner", worker_id), "lease_until IS NULL",
                           filters.ts_cmp("lease_until", "<", now)))
        return self.writer.update("eval_runs", where, {
            "owner": filters.check_id(worker_id, "worker_id"), "lease_until": now + timedelta(seconds=lease_s),
            "updated_at": now}) > 0

    def finish_run(self, run_id: str, worker_id: str, status: str = "done", error: str | None = None) -> bool:
        """Mark the run finished, if ``worker_id`` still holds it."""
        if status not in RUN_STATUSES - {"running"}:
            raise ValueError("a run finishes done or failed")
        now = codec.utcnow()
        where = filters.all_of(filters.eq_id("id", run_id), filters.eq_id("owner", worker_id))
        return self.writer.update("eval_runs", where, {"status": status, "error": error, "finished_at": now,
                                                       "updated_at": now, "lease_until": None}) > 0

    # ---- results and scores -----------------------------------------------

    def results_of(self, run_id: str) -> list[dict]:
        """The run's (run, session) rows in the set's order."""
        return query.rows(self.results, "eval_results", filters.eq_id("run_id", run_id),
                          order=[("position", True)], limit=MAX_ROWS)

    def save_results(self, rows: list[dict]) -> None:
        """Upsert whole progress rows (as read, with changed fields)."""
        for row in rows:
            if row.get("status") not in RESULT_STATUSES:
                raise ValueError(f"a result's status must be one of {sorted(RESULT_STATUSES)}")
        if rows:
            now = codec.utcnow()
            self.writer.upsert("eval_results", "id", [_times({**r, "updated_at": now}) for r in rows])

    def save_scores(self, rows: list[dict]) -> None:
        """Upsert score rows by (run, session, scorer)."""
        now = codec.utcnow()
        stored = [{"created_at": now, **r,
                   "id": score_id(r["run_id"], r["source_session_id"], r["scorer"]),
                   "value": None if r.get("value") is None else float(r["value"]),
                   "passed": None if r.get("passed") is None else bool(r["passed"]),
                   "detail": codec.dumps(r.get("detail"))} for r in rows]
        if stored:
            self.writer.upsert("eval_scores", "id", [_times(r) for r in stored])

    def scores_of(self, run_ids: list[str]) -> list[dict]:
        if not run_ids:
            return []
        return query.rows(self.scores, "eval_scores", filters.in_ids("run_id", run_ids),
                          order=[("run_id", True), ("source_session_id", True), ("scorer", True)], limit=MAX_ROWS)
