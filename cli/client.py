"""The command line's view of the service: the Python client (client/) with
the CLI's exit codes.

Each method is one call of :class:`client.Client`; what it answers is handed
on as the document the service sent (``as_dict``: what ``--json`` prints and
cli/render.py reads), and what it raises becomes :class:`ApiFailure`, which
carries the service's ``{"error": {"code", "message"}}`` and the exit code
the CLI ends with (README, "The command line").  Retries, the
Idempotency-Key and the stream's resuming are the client's.
"""
import functools

from client import Client as HttpClient
from client import errors

# Exit codes (README, "The command line").
OK, FAILED, USAGE, NOT_FOUND, REJECTED, UNREACHABLE, TIMEOUT = 0, 1, 2, 3, 4, 5, 6


class ApiFailure(Exception):
    def __init__(self, exit_code: int, code: str, message: str, status: int | None = None):
        super().__init__(message)
        self.exit_code, self.code, self.message, self.status = exit_code, code, message, status


def failure(exc: errors.ClientError) -> ApiFailure:
    """The client's exception as the CLI ends with it."""
    if isinstance(exc, errors.Unreachable):
        return ApiFailure(UNREACHABLE, "timeout" if exc.timed_out else "unreachable", exc.reason)
    if isinstance(exc, errors.WaitTimeout):
        return ApiFailure(TIMEOUT, "timeout", str(exc))
    if isinstance(exc, errors.ApiError):
        exit_code = NOT_FOUND if exc.status == 404 else REJECTED if exc.status < 500 else UNREACHABLE
        return ApiFailure(exit_code, exc.code, exc.message, exc.status)
    return ApiFailure(UNREACHABLE, "error", str(exc))


def _documents(method):
    """Run a client call: a model comes back as the service's document, an error as ApiFailure."""
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return _plain(method(*args, **kwargs))
        except errors.ClientError as exc:
            raise failure(exc) from None
    return wrapper


def _plain(value):
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout_s: float = 30.0):
        self.http = HttpClient(url, token, timeout=timeout_s)
        self.url = self.http.url

    # ---- any route ---------------------------------------------------------------

    @_documents
    def get(self, path: str, **params) -> dict:
        return self.http.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    @_documents
    def post(self, path: str, body: dict | None = None) -> dict:
        """A POST with an Idempotency-Key: sent again with it when its answer is lost."""
        return self.http.request("POST", path, json=body or {}, idempotent=True)

    # ---- agents and sessions ---------------------------------------------------------

    @_documents
    def create(self, body: dict) -> dict:
        return self.http.create_agent(**body)

    @_documents
    def agents(self, limit: int = 100, offset: int = 0, **filters) -> dict:
        """One page of agents: ``{agents, total, counts}`` (filters: status, moniker, q, sort)."""
        return self.http.agent_page(limit=limit, offset=offset, **filters)

    @_documents
    def agent(self, agent_id: str) -> dict:
        return self.http.agent(agent_id)

    @_documents
    def session(self, session_id: str) -> dict:
        return self.http.session(session_id)

    @_documents
    def steps(self, session_id: str, *, min_iteration: int | None = None, status: str | None = None,
              limit: int = 100, newest: bool = False) -> list[dict]:
        """A session's steps in iteration order, at most ``limit``; ``newest``: the last ``limit`` of them."""
        if newest:
            return self.http.last_steps(session_id, limit, min_iteration=min_iteration, status=status)
        return list(self.http.steps(session_id, min_iteration=min_iteration, status=status,
                                    page_size=min(limit, 1000), max_items=limit))

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

    @_documents
    def control(self, snapshot: dict, verb: str, **body) -> dict:
        """pause / resume / destroy / interrupt one session: the 202 answer."""
        agent_id, session_id = snapshot["agent_id"], snapshot["session_id"]
        if verb == "interrupt":
            return self.http.interrupt(agent_id, body.pop("guidance"), session_id, **body)
        return getattr(self.http, verb)(agent_id, session_id, **body)

    def search(self, q: str, **filters) -> dict:
        return self.get("/api/search", q=q, **filters)

    # ---- tool calls and questions ----------------------------------------------------

    @_documents
    def decide_tool_call(self, tool_call_id: str, verb: str, **body) -> dict:
        """approve / deny / result of one tool call: the 202 answer (409 when it does not wait for that)."""
        if verb == "result":
            return self.http.post_result(tool_call_id, body.get("result"), error=body.get("error"))
        return getattr(self.http, verb)(tool_call_id, **body)

    @_documents
    def answer(self, session_id: str, text: str, tool_call_id: str | None = None,
               user_id: str | None = None) -> dict:
        """Answer a session's open ask_user question: the 202 answer (409 when none is open)."""
        return self.http.answer(session_id, text, tool_call_id=tool_call_id, user_id=user_id)

    @_documents
    def waiting(self, **filters) -> dict:
        """Open questions and approvals, oldest first (one page of GET /api/waiting)."""
        return self.http.waiting_page(**{k: v for k, v in filters.items() if v is not None})

    @_documents
    def action(self, action_id: str) -> dict:
        return self.http.action(action_id)

    @_documents
    def wait_action(self, action_id: str, timeout_s: float) -> dict:
        return self.http.wait_action(action_id, timeout_s)

    # ---- replay, diff, evals --------------------------------------------------------------

    @_documents
    def replay(self, session_id: str, body: dict) -> dict:
        """Replay a recorded session: the 202 answer (a new session, like a create)."""
        return self.http.replay(session_id, **body)

    @_documents
    def diff(self, session_id: str, against: str, **params) -> dict:
        """``session_id`` (side b) step by step against ``against`` (side a); params: from_iteration, limit."""
        return self.http.diff(session_id, against, **params)

    @_documents
    def create_evalset(self, body: dict) -> dict:
        return self.http.create_evalset(**body)

    @_documents
    def evalsets(self, limit: int = 100) -> dict:
        return self.http.evalsets(limit=limit)

    @_documents
    def evalset(self, evalset_id: str) -> dict:
        return self.http.evalset(evalset_id)

    @_documents
    def start_eval_run(self, evalset_id: str, body: dict) -> dict:
        return self.http.start_eval_run(evalset_id, **body)

    @_documents
    def eval_runs(self, evalset_id: str) -> dict:
        """The set's runs side by side: ``{runs, sessions, ...}``."""
        return self.http.eval_runs(evalset_id)

    @_documents
    def eval_run(self, run_id: str) -> dict:
        return self.http.eval_run(run_id)

    @_documents
    def wait_eval_run(self, run_id: str, timeout_s: float) -> dict:
        return self.http.wait_eval_run(run_id, timeout_s)

    # ---- conversations -----------------------------------------------------------------

    @_documents
    def conversation(self, conversation_id: str) -> dict:
        return self.http.conversation(conversation_id)

    @_documents
    def say(self, conversation_id: str, text: str, user_id: str | None = None) -> dict:
        return self.http.say(conversation_id, text, user_id=user_id)
