"""How the CLI shows replays, diffs, eval sets and eval runs (tables for people;
``--json`` prints the service's own documents, see cli/render.py ``as_json``).

Every function here takes the API's answer as it came and prints it; none
calls the service, so each is tested on a document alone
(tests/unit/test_cli_evals.py)."""
import json

from rich.table import Table

from cli import render
from cli.render import short

NONE = "–"


# ---- cells -------------------------------------------------------------------------

def number(value, digits: int = 3) -> str:
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def score_cell(score) -> str:
    """A score as one short cell: its value, and ✓/✗ when it has a verdict;
    ``error`` when it is null for a reason."""
    if not isinstance(score, dict):
        return number(score)
    cell = number(score.get("value"))
    if score.get("passed") is not None:
        cell += " ✓" if score["passed"] else " ✗"
    detail = score.get("detail")
    if isinstance(detail, str):
        try:
            detail = json.loads(detail)
        except ValueError:
            detail = None
    if score.get("value") is None and isinstance(detail, dict) and detail.get("error"):
        cell = "error"
    return cell


def summary_cell(summary: dict | None) -> str:
    """``{mean, median, n, passed, failed}`` as "mean / median (n=…, k/m passed)"."""
    if not summary or not summary.get("n"):
        return NONE
    verdicts = (summary.get("passed") or 0) + (summary.get("failed") or 0)
    passed = f", {summary.get('passed') or 0}/{verdicts} passed" if verdicts else ""
    return f"{number(summary.get('mean'))} / {number(summary.get('median'))} (n={summary['n']}{passed})"


def overrides(request: dict | None) -> str:
    """What a run changed, in one line: profile, moniker, tools, config keys."""
    request = request or {}
    parts = [f"{key}={request[key]}" for key in ("profile", "moniker", "tools") if request.get(key)]
    if request.get("to_iteration") is not None:
        parts.append(f"to={request['to_iteration']}")
    if request.get("config"):
        parts.append("config=" + json.dumps(request["config"], sort_keys=True))
    return short(" ".join(parts) or "(as recorded)", 70)


def _request(run: dict) -> dict:
    """A run's overrides: its ``request`` object, or its own fields."""
    return run.get("request") if isinstance(run.get("request"), dict) else run


def scorers_of(runs: list[dict]) -> list[str]:
    """Every scorer the runs used, in the order they were asked for."""
    names: list[str] = []
    for run in runs:
        for name in list(run.get("scorers") or []) + list(_request(run).get("scorers") or []) + \
                list((run.get("summary") or {}).keys()):
            if name not in names:
                names.append(name)
    return names


def _rows(document, key: str) -> list[dict]:
    if isinstance(document, list):
        return document
    return list((document or {}).get(key) or [])


# ---- eval sets -----------------------------------------------------------------------

def evalset(row: dict) -> None:
    ids = row.get("session_ids") or []
    render.table(None, ["id", "name", "sessions", "from iteration", "search", "created"],
                 [[row.get("id"), row.get("name"), len(ids), row.get("from_iteration") or 0,
                   short(json.dumps(row["search"]), 50) if row.get("search") else "",
                   (row.get("created_at") or "")[:19]]])


def evalsets(document) -> None:
    rows = _rows(document, "evalsets")
    render.table(f"{len(rows)} eval sets", ["id", "name", "sessions", "from iteration", "created"],
                 [[r.get("id"), r.get("name"), len(r.get("session_ids") or []), r.get("from_iteration") or 0,
                   (r.get("created_at") or "")[:19]] for r in rows])


# ---- eval runs -----------------------------------------------------------------------

def run_started(row: dict) -> None:
    render.table(None, ["id", "evalset", "status", "sessions", "overrides", "scorers"],
                 [[row.get("id"), row.get("evalset_id"), row.get("status"), progress(row),
                   overrides(_request(row)), ", ".join(scorers_of([row]))]])


def _results(run: dict) -> list[dict]:
    for key in ("results", "sessions"):
        if isinstance(run.get(key), list):
            return run[key]
    return []


def progress(row: dict) -> str:
    counts = row.get("progress") or {}
    return ", ".join(f"{n} {status}" for status, n in counts.items() if n) or f"{row.get('total') or 0} sessions"


def run(row: dict) -> None:
    """One run: its head, its summary per scorer, and a row per session."""
    names = scorers_of([row])
    head = (f"run {row.get('id')} of {row.get('evalset_id')}: {row.get('status')} ({progress(row)}), "
            f"{overrides(_request(row))}")
    if row.get("error"):
        head += f": {row['error']}"
    render.out.print(head, markup=False)
    summary = row.get("summary") or {}
    render.table(None, ["scorer", "mean / median (n)"], [[name, summary_cell(summary.get(name))] for name in names])
    rows = []
    for result in _results(row):
        scores = result.get("scores") or {}
        rows.append([result.get("source_session_id") or result.get("session_id"), result.get("replay_session_id"),
                     result.get("status"), result.get("replay_status"),
                     *[score_cell(scores.get(name)) for name in names], short(result.get("error"), 60)])
    render.table(None, ["session", "replay", "status", "replay status", *names, "error"], rows)


def comparison(document: dict) -> None:
    """A set's runs side by side: a row per run (the mean and median of each
    scorer), a row per session (each run's score), then which sessions got
    better or worse."""
    runs = _rows(document, "runs")
    names = scorers_of(runs)
    label = {r.get("id"): f"r{i + 1}" for i, r in enumerate(runs)}
    render.table(f"{len(runs)} runs", ["run", "id", "status", "overrides", *names],
                 [[label[r.get("id")], r.get("id"), r.get("status"), overrides(_request(r)),
                   *[summary_cell((r.get("summary") or {}).get(n)) for n in names]] for r in runs])
    columns = [f"{label[r.get('id')]} {n}" for r in runs for n in names]
    rows = []
    for session in _rows(document, "sessions"):
        per_run = session.get("runs") or {}
        rows.append([session.get("session_id"), short(session.get("name") or session.get("task"), 30),
                     *[session_score(per_run.get(r.get("id")), n) for r in runs for n in names]])
    render.table(None, ["session", "name", *columns], rows)
    for line in changes(document, label):
        render.out.print(line, markup=False)


def session_score(entry: dict | None, name: str) -> str:
    """A session's score in one run of the comparison: ``scores`` holds values
    (or whole scores), ``passed`` the verdicts."""
    if not entry:
        return NONE
    score = (entry.get("scores") or {}).get(name)
    if not isinstance(score, dict):
        score = {"value": score, "passed": (entry.get("passed") or {}).get(name)}
    return score_cell(score)


def changes(document: dict, label: dict) -> list[str]:
    """A line per session that got better or worse from one run to the next
    (the document's ``comparisons``: ``{from_run, to_run, changes: {session:
    {scorer: better|worse}}}``)."""
    lines = []
    for step in document.get("comparisons") or []:
        runs = f"{label.get(step.get('from_run'), step.get('from_run'))} → {label.get(step.get('to_run'), step.get('to_run'))}"
        for sid, moved in (step.get("changes") or {}).items():
            what = "better" if sid in (step.get("better") or []) else "worse" if sid in (step.get("worse") or []) \
                else "mixed"
            detail = ", ".join(f"{scorer} {c}" for scorer, c in sorted(moved.items()))
            lines.append(f"{runs} {what:6} {sid}: {detail}")
    return lines


# ---- replay and diff --------------------------------------------------------------------

def replay(result: dict) -> None:
    columns, row = ["agent", "session", "action", "status"], [
        result.get("agent_id"), result.get("session_id"), result.get("action_id"), result.get("status")]
    session = result.get("session")
    if isinstance(session, dict):
        info = session.get("replay") if isinstance(session.get("replay"), dict) else {}
        columns += ["session status", "reason", "diverged at"]
        row += [session.get("status"), session.get("status_reason"), info.get("diverged_at")]
    render.table(None, columns, [row])
    if isinstance(session, dict) and (session.get("replay") or {}).get("divergence"):
        render.out.print(f"divergence: {session['replay']['divergence']}", markup=False)


def calls_cell(side: dict | None) -> str:
    if not side:
        return ""
    return ", ".join(f"{c.get('name')}:{c.get('status') or '?'}" for c in side.get("tool_calls") or [])


def _side_text(side: dict | None) -> str:
    if side is None:
        return "(no step)"
    return f"{side.get('status')}: {short(side.get('text') or side.get('error'), 40)}"


def diff(document: dict, only_changed: bool = False) -> None:
    """Two sessions side by side: their totals, then a row per iteration
    (``≠`` marks one that differs, ``▶`` the first divergence)."""
    a, b = document.get("a") or {}, document.get("b") or {}
    keys = ["session_id", "status", "status_reason", "steps", "tokens", "cost", "errors", "tool_calls"]
    t = Table(show_edge=False, header_style="bold")
    for column in ("", "a", "b"):
        t.add_column(column, overflow="fold")
    for key in keys:
        t.add_row(key, number(a.get(key)) if key != "session_id" else str(a.get(key)),
                  number(b.get(key)) if key != "session_id" else str(b.get(key)))
    relation = (document.get("lineage") or {}).get("relation")
    if relation:
        render.out.print(f"lineage: b {relation} a" + (f" (common source {document['lineage']['common']})"
                                             if (document.get("lineage") or {}).get("common") else ""), markup=False)
    render.out.print(t)
    first = document.get("first_divergence") or {}
    rows = []
    for row in document.get("iterations") or []:
        if only_changed and not row.get("differs") and row.get("iteration") != first.get("iteration"):
            continue
        mark = "▶" if first and row.get("iteration") == first.get("iteration") else "≠" if row.get("differs") else ""
        rows.append([row.get("iteration"), mark, ",".join(row.get("differs") or []), _side_text(row.get("a")),
                     calls_cell(row.get("a")), _side_text(row.get("b")), calls_cell(row.get("b")),
                     len(row.get("state") or []) or ""])
    render.table(None, ["iter", "", "differs", "a", "a tools", "b", "b tools", "state ops"], rows)
    summary = document.get("summary") or {}
    if first:
        render.out.print(f"first divergence at iteration {first.get('iteration')}: {first.get('detail')}",
                         markup=False)
    else:
        render.out.print("no divergence", markup=False)
    if summary:
        render.out.print(f"{summary.get('compared', 0)} iterations compared, {summary.get('differing', 0)} differ"
                         + (f", {summary['shared_before']} shared before" if summary.get("shared_before") else "")
                         + (" (cut at the limit)" if summary.get("truncated") else ""), markup=False)
