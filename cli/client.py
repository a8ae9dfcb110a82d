"""Every HTTP call the CLI makes, in one place.

Errors come back as :class:`ApiFailure` carrying the service's
``{"error": {"code", "message"}}`` and the exit code the CLI ends with.
"""
from domain.statuses import ACTION_FINISHED
import os
import time
import uuid
from urllib.parse import quote

import requests

DEFAULT_URL = "http://127.0.0.1:8765"

# Exit codes (README, "The command line").
OK, FAILED, USAGE, NOT_FOUND, REJECTED, UNREACHABLE, TIMEOUT = 0, 1, 2, 3, 4, 5, 6
RETRIES = 3  # a POST whose answer was lost (unreachable, 5xx) is sent again this many times, with its key


class ApiFailure(Exception):
    def __init__(self, exit_code: int, code: str, message: str, status: int | None = None):
        super().__init__(message)
        self.exit_code, self.code, self.message, self.status = exit_code, code, message, status


def _seg(some_id: str) -> str:
    """An id as one path segment: whatever was typed cannot reach another route."""
    return quote(str(some_id), safe="")


def default_url() -> str:
    port = os.environ.get("AGENTSVC_PORT")
    return os.environ.get("AGENTSVC_URL") or (f"http://127.0.0.1:{port}" if port else DEFAULT_URL)


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout_s: float = 30.0):
        self.url = (url or default_url()).rstrip("/")
        self.timeout_s = timeout_s
        self.http = requests.Session()
        if token:
            self.http.headers["Authorization"] = f"Bearer {token}"

    # ---- plumbing -------------------------------------------------------

    def request(self, method: str, path: str, *, json=None, params=None, ok=(200, 201, 202),
                headers=None) -> dict:
        try:
            r = self.http.request(method, self.url + path, json=json, params=params, timeout=self.timeout_s,
                                  headers=headers)
        except requests.ConnectionError as exc:
            raise ApiFailure(UNREACHABLE, "unreachable", f"cannot reach {self.url}: {exc.__class__.__name__}") from None
        except requests.Timeout:
            raise ApiFailure(UNREACHABLE, "timeout", f"{self.url} did not answer in {self.timeout_s}s") from None
        if r.status_code in ok:
            return r.json()
        try:
            error = r.json()["error"]
            code, message = error["code"], error["message"]
        except (ValueError, KeyError, TypeError):
            code, message = "http_error", f"HTTP {r.status_code}: {r.text[:200]}"
        exit_code = NOT_FOUND if r.status_code == 404 else REJECTED if r.status_code < 500 else UNREACHABLE
        raise ApiFailure(exit_code, code, message, r.status_code)

    def get(self, path: str, **params) -> dict:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: dict | None = None, *, retries: int = RETRIES) -> dict:
        """A POST; one that queues actions carries an Idempotency-Key (api/idempotency.py), so
        when the service is unreachable or errs it is sent again with the same key: never twice in effect."""
        key = {"Idempotency-Key": str(uuid.uuid4())}
        for attempt in range(retries + 1):
            try:
                return self.request("POST", path, json=body or {}, headers=key)
            except ApiFailure as exc:
                if exc.exit_code != UNREACHABLE or attempt == retries:
                    raise
                time.sleep(min(4.0, 0.5 * 2 ** attempt))

    # ---- agents and sessions ---------------------------------------------

    def create(self, body: dict) -> dict:
        return self.post("/api/agents", body)

    def agents(self, limit: int = 100, offset: int = 0, **filters) -> dict:
        """One page of agents: ``{agents, total, counts}`` (filters: status, moniker, q, sort)."""
        return self.get("/api/agents", limit=limit, offset=offset,
                        **{k: v for k, v in filters.items() if v is not None})

    def agent(self, agent_id: str) -> dict:
        return self.get(f"/api/agents/{agent_id}")

    def session(self, session_id: str) -> dict:
        return self.get(f"/api/sessions/{session_id}")

    def sessions(self, agent_id: str, limit: int = 100) -> list[dict]:
        return self.get(f"/api/agents/{agent_id}/sessions", limit=limit)["sessions"]

    def steps(self, session_id: str, *, min_iteration: int | None = None, status: str | None = None,
              limit: int = 100, offset: int = 0, newest: bool = False) -> list[dict]:
        """A page of a session's steps in iteration order; ``newest``: the last
        ``limit`` of them (the API counts back from the newest step)."""
        rows = self.get("/api/agent-steps", session_id=session_id, min_iteration=min_iteration, status=status,
                        limit=limit, offset=offset, order="desc" if newest else None)["steps"]
        return rows[::-1] if newest else rows

    def resolve(self, some_id: str) -> dict:
        """A session id, or an agent id (then its latest session), as the API does:
        the session's snapshot."""
        try:
            return self.session(some_id)
        except ApiFailure as exc:
            if exc.exit_code != NOT_FOUND:
                raise
        try:
            return self.agent(some_id)
        except ApiFailure as exc:
            if exc.exit_code == NOT_FOUND:
                raise ApiFailure(NOT_FOUND, "not_found", f"no session or agent {some_id}", 404) from None
            raise

    def control(self, snapshot: dict, verb: str, **body) -> dict:
        """pause / resume / destroy / interrupt one session: the 202 answer."""
        return self.post(f"/api/agents/{snapshot['agent_id']}/{verb}", {"session_id": snapshot["session_id"], **body})

    def search(self, q: str, **filters) -> dict:
        return self.get("/api/search", q=q, **{k: v for k, v in filters.items() if v is not None})

    def decide_tool_call(self, tool_call_id: str, verb: str, **body) -> dict:
        """approve / deny / result of one tool call: the 202 answer (409 when it does not wait for that)."""
        return self.post(f"/api/tool-calls/{tool_call_id}/{verb}", body)

    def answer(self, session_id: str, text: str, tool_call_id: str | None = None,
               user_id: str | None = None) -> dict:
        """Answer a session's open ask_user question: the 202 answer (409 when none is open)."""
        body = {"text": text, **({"tool_call_id": tool_call_id} if tool_call_id else {}),
                **({"user_id": user_id} if user_id else {})}
        return self.post(f"/api/sessions/{session_id}/answer", body)

    def waiting(self, **filters) -> dict:
        """Open questions and approvals, oldest first (GET /api/waiting)."""
        return self.get("/api/waiting", **{k: v for k, v in filters.items() if v is not None})

    def action(self, action_id: str) -> dict:
        return self.get(f"/api/actions/{action_id}")

    def wait_action(self, action_id: str, timeout_s: float) -> dict:
        """Poll until the action is done or failed (backing off to 0.5 s)."""
        deadline, pause = time.monotonic() + timeout_s, 0.02
        while True:
            action = self.action(action_id)
            if action["status"] in ACTION_FINISHED:
                return action
            if time.monotonic() > deadline:
                raise ApiFailure(TIMEOUT, "timeout", f"action {action_id} still {action['status']} after {timeout_s}s")
            time.sleep(pause)
            pause = min(pause * 1.5, 0.5)

    # ---- replay, diff, evals --------------------------------------------------

    def replay(self, session_id: str, body: dict) -> dict:
        """Replay a recorded session: the 202 answer (a new session, like a create)."""
        return self.post(f"/api/sessions/{_seg(session_id)}/replay", body)

    def diff(self, session_id: str, against: str, **params) -> dict:
        """``session_id`` (side b) step by step against ``against`` (side a); params: from_iteration, limit."""
        return self.get(f"/api/sessions/{_seg(session_id)}/diff", against=against, **params)

    def create_evalset(self, body: dict) -> dict:
        return self.post("/api/evalsets", body, retries=0)  # no Idempotency-Key there: never sent twice

    def evalsets(self, limit: int = 100) -> dict:
        return self.get("/api/evalsets", limit=limit)

    def evalset(self, evalset_id: str) -> dict:
        return self.get(f"/api/evalsets/{_seg(evalset_id)}")

    def start_eval_run(self, evalset_id: str, body: dict) -> dict:
        return self.post(f"/api/evalsets/{_seg(evalset_id)}/runs", body, retries=0)

    def eval_runs(self, evalset_id: str) -> dict:
        """The set's runs side by side: ``{runs, sessions, ...}``."""
        return self.get(f"/api/evalsets/{_seg(evalset_id)}/runs")

    def eval_run(self, run_id: str) -> dict:
        return self.get(f"/api/evalruns/{_seg(run_id)}")

    def wait_eval_run(self, run_id: str, timeout_s: float, poll_s: float = 1.0) -> dict:
        """Poll until the run is no longer running."""
        deadline = time.monotonic() + timeout_s
        while True:
            run = self.eval_run(run_id)
            if run.get("status") != "running":
                return run
            if time.monotonic() > deadline:
                raise ApiFailure(TIMEOUT, "timeout", f"eval run {run_id} still running after {timeout_s}s")
            time.sleep(poll_s)

    # ---- conversations -----------------------------------------------------

    def conversation(self, conversation_id: str) -> dict:
        return self.get(f"/api/conversations/{conversation_id}")

    def say(self, conversation_id: str, text: str, user_id: str | None = None) -> dict:
        body = {"text": text, **({"user_id": user_id} if user_id else {})}
        return self.post(f"/api/conversations/{conversation_id}/messages", body)

    # ---- the event stream ----------------------------------------------------

    def open_stream(self, rooms: list[str], cursor: str | None, tail: int | None):
        """GET /api/stream, streaming (cli.sse reads it)."""
        params = {"rooms": ",".join(rooms)}
        if tail is not None and not cursor:
            params["tail"] = tail
        headers = {"Accept": "text/event-stream", **({"Last-Event-ID": cursor} if cursor else {})}
        return self.http.get(self.url + "/api/stream", params=params, headers=headers, stream=True,
                             timeout=(10, 60))  # the server sends a comment every 15 s
