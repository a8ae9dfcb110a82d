"""What the eval routes answer, built from the stored rows (store/evals.py):
a run with its summary (mean, median and count per scorer) and progress, the
per-session table of a set's runs, and which sessions got better or worse
from one run to the next.  Pure functions over rows: no store, no Flask."""
from evals.scorers import ScorerRegistry, UnknownScorer, change, summarize

RESULT_FIELDS = ("source_session_id", "replay_session_id", "agent_id", "status", "replay_status", "error")


def scores_by_run(scores: list[dict]) -> dict[str, dict[str, dict[str, dict]]]:
    """``{run_id: {source_session_id: {scorer: score row}}}``."""
    out: dict = {}
    for row in scores:
        out.setdefault(row["run_id"], {}).setdefault(row["source_session_id"], {})[row["scorer"]] = row
    return out


def run_view(run: dict, results: list[dict], scores: dict[str, dict[str, dict]]) -> dict:
    """A run, its progress (results per status) and its summary per scorer."""
    names = (run.get("request") or {}).get("scorers") or []
    summary = {}
    for name in names:
        rows = [by_scorer[name] for by_scorer in scores.values() if name in by_scorer]
        summary[name] = {**summarize(r["value"] for r in rows),
                         "passed": sum(1 for r in rows if r["passed"] is True),
                         "failed": sum(1 for r in rows if r["passed"] is False)}
    progress = {status: 0 for status in ("pending", "enqueued", "scored", "failed")}
    for result in results:
        progress[result["status"]] = progress.get(result["status"], 0) + 1
    view = {k: v for k, v in run.items() if k not in ("owner", "lease_until")}
    return {**view, "scorers": names, "progress": progress, "summary": summary}


def result_view(result: dict, scores: dict[str, dict]) -> dict:
    """One session of a run with its scores ``{scorer: {value, passed, detail}}``."""
    return {**{k: result.get(k) for k in RESULT_FIELDS},
            "scores": {name: {"value": row["value"], "passed": row["passed"], "detail": row["detail"]}
                       for name, row in sorted(scores.items())}}


def session_table(session_ids: list[str], names: dict[str, str | None], results: dict[str, list[dict]],
                  scores: dict) -> list[dict]:
    """Per session of the set, per run: its replay, status and score values."""
    by_run = {run_id: {r["source_session_id"]: r for r in rows} for run_id, rows in results.items()}
    table = []
    for sid in session_ids:
        runs = {}
        for run_id, rows in by_run.items():
            result = rows.get(sid)
            if result is not None:
                found = scores.get(run_id, {}).get(sid, {})
                runs[run_id] = {"replay_session_id": result["replay_session_id"], "status": result["status"],
                                "replay_status": result["replay_status"],
                                "scores": {name: row["value"] for name, row in sorted(found.items())},
                                "passed": {name: row["passed"] for name, row in sorted(found.items())}}
        table.append({"session_id": sid, "name": names.get(sid), "runs": runs})
    return table


def comparisons(runs: list[dict], scores: dict, registry: ScorerRegistry) -> list[dict]:
    """For each run after the first (oldest first), the sessions that got better
    or worse than in the run before it, scorer by scorer; a session is better
    when more of its scorers improved than got worse, counting only the scorers
    whose pass/fail changed when any did."""
    out = []
    for before, after in zip(runs, runs[1:]):
        names = [n for n in (after.get("request") or {}).get("scorers") or []
                 if n in ((before.get("request") or {}).get("scorers") or [])]
        changes, better, worse = {}, [], []
        for sid, after_scores in scores.get(after["id"], {}).items():
            before_scores = scores.get(before["id"], {}).get(sid, {})
            moved = {n: c for n in names if (c := change(_scorer(registry, n), before_scores.get(n),
                                                          after_scores.get(n)))}
            if moved:
                changes[sid] = moved
                # A scorer that passed and now fails (or the reverse) outranks any
                # count: a replay that diverged at its first step took fewer steps
                # and tokens, and was marked better for it.
                flipped = {n: c for n, c in moved.items() if _flipped(before_scores.get(n), after_scores.get(n))}
                net = sum(1 if c == "better" else -1 for c in (flipped or moved).values())
                (better if net > 0 else worse if net < 0 else []).append(sid)
        out.append({"from_run": before["id"], "to_run": after["id"], "better": sorted(better),
                    "worse": sorted(worse), "changes": changes})
    return out


def _flipped(before: dict | None, after: dict | None) -> bool:
    passed = [(s or {}).get("passed") for s in (before, after)]
    return None not in passed and passed[0] != passed[1]


def _scorer(registry: ScorerRegistry, name: str):
    try:
        return registry.get(name)
    except UnknownScorer:  # a plugin that was uninstalled since the run
        return None
