"""Arrow schemas of the tables, and which of their columns hold JSON text."""
import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")


def _schema(*fields):
    return pa.schema([pa.field(name, typ, nullable=nullable) for name, typ, nullable in fields])


ACTIONS = _schema(
    ("id", pa.string(), False),
    ("created_at", TS, False),
    ("type", pa.string(), False),
    ("agent_id", pa.string(), True),
    ("session_id", pa.string(), True),
    ("conversation_id", pa.string(), True),
    ("priority", pa.int32(), False),
    ("payload", pa.string(), True),
    ("status", pa.string(), False),  # pending | processing | done | failed
    ("processed", pa.bool_(), False),
    ("processed_at", TS, True),
    ("claimed_by", pa.string(), True),
    ("lease_until", TS, True),
    ("attempts", pa.int32(), False),
    ("error", pa.string(), True),
    ("actor", pa.string(), True),  # the name of the API token that asked (api/auth.py); null: the service itself
    # Idempotency-Key (api/idempotency.py): the key's hash, scoped by actor; the request's hash; and, on the
    # first row a request queued, the answer it got, so a retry is given the same answer
    ("idempotency_key", pa.string(), True),
    ("request_hash", pa.string(), True),
    ("answer", pa.string(), True),
)

AGENT_STATE = _schema(
    ("session_id", pa.string(), False),
    ("agent_id", pa.string(), False),
    ("moniker", pa.string(), False),
    ("task", pa.string(), True),
    ("name", pa.string(), True),  # optional, for people (POST /api/agents {name})
    ("config", pa.string(), True),
    ("status", pa.string(), False),
    ("status_reason", pa.string(), True),
    ("iteration", pa.int64(), False),  # last persisted iteration, -1 before the first
    ("step_token", pa.string(), True),
    ("next_step_token", pa.string(), True),
    ("state", pa.string(), True),
    ("result", pa.string(), True),
    ("pending_guidance", pa.string(), True),
    ("used_guidance", pa.string(), True),  # ids of guidance actions already used (bounded)
    ("conversation_id", pa.string(), True),
    ("parent_agent_id", pa.string(), True),
    ("parent_session_id", pa.string(), True),
    ("usage", pa.string(), True),
    ("last_error", pa.string(), True),
    ("created_at", TS, False),
    ("updated_at", TS, False),
    # ownership and liveness (several agents.py workers on one database)
    ("owner", pa.string(), True),  # worker_id running this session
    ("status_changed_at", TS, True),
    ("step_started_at", TS, True),  # set while a long step is in flight
    ("heartbeat_at", TS, True),  # refreshed while that step runs
    ("forked_from", pa.string(), True),  # {"session_id", "iteration"} when this session is a fork
    # a replay (runtime/session/replay.py): {"session_id", "from_iteration"}, and how it replays and where it diverged
    ("replayed_from", pa.string(), True),
    ("replay", pa.string(), True),
    ("tool_step", pa.int64(), True),  # iteration whose tool results no step has consumed yet
    # sub-agents (runtime/session/child_sessions.py): the tree a child belongs to, and which of
    # its outcomes (one per activation, its "generation") reached its parent
    ("root_session_id", pa.string(), True),  # the tree's root; null for a root
    ("generation", pa.int64(), True),  # activations of a child: 1 at create, +1 per reactivation
    ("reported_generation", pa.int64(), True),  # the last generation whose outcome was queued for the parent
    ("subagent", pa.string(), True),  # {depth, max_depth, wait_call, wait_generation, on_parent_destroy}
)

AGENT_STEPS = _schema(
    ("id", pa.string(), False),
    ("created_at", TS, False),
    ("agent_id", pa.string(), False),
    ("session_id", pa.string(), False),
    ("iteration", pa.int64(), False),
    ("step_token", pa.string(), True),
    ("next_step_token", pa.string(), True),
    ("status", pa.string(), False),  # ok | done | error
    ("text", pa.string(), True),
    ("data", pa.string(), True),
    ("state", pa.string(), True),
    ("guidance", pa.string(), True),
    ("notes", pa.string(), True),
    ("latency_ms", pa.float64(), True),
    ("error", pa.string(), True),
    ("usage", pa.string(), True),
    ("attempts", pa.int32(), True),  # 1 + retries of transient failures
    ("tool_calls", pa.string(), True),  # [{id, call_id, name, args}] this step asked for (StepFrame-v1)
    ("inputs", pa.string(), True),  # {tool_results, inbox}: what this step's frame_in consumed
    ("observers", pa.string(), True),  # {before, after, flow, counters}: what the profile's observers and flow rules did
    ("session_iteration", pa.string(), True),  # derived, internal: see session_iteration() below
    # internal: set when ``state`` holds a delta against the previous iteration's state rather than the
    # whole state; the iteration of the row with the whole state its run starts from (store/steps.py)
    ("state_base", pa.int64(), True),
    ("state_prev", pa.string(), True),  # internal: with state_base, the id of the row the delta applies to
)

# One row per tool call a step asked for (StepFrame-v1), rewritten whole at each
# change of status by the worker that owns the session.
TOOL_CALLS = _schema(
    ("id", pa.string(), False),
    ("created_at", TS, False),
    ("updated_at", TS, True),
    ("agent_id", pa.string(), False),
    ("session_id", pa.string(), False),
    ("iteration", pa.int64(), False),  # the step that made the call
    ("seq", pa.int32(), False),  # its place among that step's calls
    ("call_id", pa.string(), True),  # the moniker's id for the call (frame_out), echoed in its result
    ("name", pa.string(), False),
    ("args", pa.string(), True),
    ("original_args", pa.string(), True),  # what the model asked, when a person changed the args before approving
    # pending | waiting_approval | waiting_result | running | success | failed | denied | unknown | replayed
    ("status", pa.string(), False),
    ("result", pa.string(), True),
    ("error", pa.string(), True),
    ("attempts", pa.int32(), False),  # times the tool was started
    ("started_at", TS, True),
    ("finished_at", TS, True),
    ("duration_ms", pa.float64(), True),
    ("usage", pa.string(), True),
    ("decided_by", pa.string(), True),  # id of the action that approved, denied or posted the result
    # a replay's call given the recorded outcome (status replayed): that call's id and status
    ("replay_of", pa.string(), True),
    ("replayed_status", pa.string(), True),
)

# One row per agents.py process: its heartbeat tells the others it is alive.
WORKERS = _schema(
    ("worker_id", pa.string(), False),
    ("host", pa.string(), True),
    ("pid", pa.int64(), True),
    ("status", pa.string(), False),  # running | stopped
    ("started_at", TS, False),
    ("heartbeat_at", TS, False),
    ("maintenance", pa.string(), True),  # per table: shape after the last run, runs, failures (JSON)
    ("polling", pa.bool_(), True),  # polling the queue (its sessions adopted, not stopping): GET /readyz
)

CONVERSATIONS = _schema(
    ("conversation_id", pa.string(), False),
    ("title", pa.string(), True),
    ("created_by", pa.string(), True),
    ("status", pa.string(), False),  # open | closed
    ("tags", pa.string(), True),
    ("created_at", TS, False),
)

CONVERSATION_PARTICIPANTS = _schema(
    ("id", pa.string(), False),  # "<conversation_id>|user|<user_id>" or "<conversation_id>|agent|<session_id>"
    ("conversation_id", pa.string(), False),
    ("kind", pa.string(), False),  # user | agent
    ("user_id", pa.string(), True),
    ("agent_id", pa.string(), True),
    ("session_id", pa.string(), True),
    ("role", pa.string(), True),
    ("joined_at", TS, False),
    ("left_at", TS, True),
)

CONVERSATION_MESSAGES = _schema(
    ("message_id", pa.string(), False),
    ("conversation_id", pa.string(), False),
    ("created_at", TS, False),
    ("sender_type", pa.string(), False),  # user | agent
    ("user_id", pa.string(), True),
    ("agent_id", pa.string(), True),
    ("session_id", pa.string(), True),
    ("text", pa.string(), True),
    ("data", pa.string(), True),
    ("status", pa.string(), True),
    ("event_type", pa.string(), True),
    ("iteration", pa.int64(), True),
    ("step_token", pa.string(), True),
    ("next_step_token", pa.string(), True),
    ("notes", pa.string(), True),
)

# One row per archived session or quiet conversation (runtime/record/archive.py); its
# id is "session:<session_id>" or "conversation:<conversation_id>", upserted so
# a session summarised again (resumed and finished anew) keeps one row.
SUMMARIES = _schema(
    ("id", pa.string(), False),
    ("created_at", TS, False),
    ("kind", pa.string(), False),  # session | conversation
    ("agent_id", pa.string(), True),
    ("session_id", pa.string(), True),
    ("conversation_id", pa.string(), True),
    ("moniker", pa.string(), True),
    ("status", pa.string(), True),  # the session's status when summarised
    ("method", pa.string(), False),  # llm | extractive
    ("text", pa.string(), True),
    ("data", pa.string(), True),  # counts, key points, the model's usage
    ("first_iteration", pa.int64(), True),
    ("last_iteration", pa.int64(), True),
    ("last_message_id", pa.string(), True),  # conversations: the newest message covered
)

# One row per agents.py process: the tools it can run (built-ins, plugins and
# what its MCP servers offered), for app.py's GET /api/tools.
TOOL_CATALOG = _schema(
    ("worker_id", pa.string(), False),
    ("updated_at", TS, False),
    ("tools", pa.string(), True),  # JSON list of tool descriptions
)

# One row per turn of a session (runtime/record/turn_tracker.py): the steps from a trigger (the
# create, a user message, a child's result, an answer) until the agent waits or
# finishes.  Written twice per turn, when it starts and when it ends (with its
# summary); id "<session_id>:<turn>", upserted.
TURNS = _schema(
    ("id", pa.string(), False),
    ("agent_id", pa.string(), False),
    ("session_id", pa.string(), False),
    ("turn", pa.int64(), False),  # 0, 1, 2... per session
    ("status", pa.string(), False),  # open | ended
    ("end_reason", pa.string(), True),  # waiting:user | done:done | stopped:destroyed | error:... (status:reason)
    ("first_iteration", pa.int64(), False),
    ("last_iteration", pa.int64(), True),  # set when it ends
    ("steps", pa.int64(), True),
    ("trigger_kind", pa.string(), False),  # create | guidance | message | child_result | answer | resume
    ("trigger_ids", pa.string(), True),  # JSON list of the action (or event) ids that brought the trigger
    ("trigger_text", pa.string(), True),  # the trigger's text, clipped
    ("usage", pa.string(), True),  # the turn's steps' usage, summed
    ("summary", pa.string(), True),
    ("summary_method", pa.string(), True),  # llm | extractive
    ("summary_data", pa.string(), True),  # key points, the summary's own LLM usage, or why the LLM failed
    ("started_at", TS, False),
    ("ended_at", TS, True),
    ("updated_at", TS, False),
)

# Shared model rate limits (runtime/base/rate_limits.py): one row per rate-limited
# model, holding each worker's share of the model's budget.  Changed only by a
# conditional update on ``version`` (compare-and-swap), when a share changes,
# a lease is renewed or a 429 slows the model down: never per model call.
RATE_LEDGER = _schema(
    ("id", pa.string(), False),  # unique per row; of racing creations, the smallest id is the model's row
    ("model_key", pa.string(), False),  # a hash of the model's name (names are not ids)
    ("model", pa.string(), False),
    ("version", pa.int64(), False),
    ("shares", pa.string(), True),  # {worker_id: {r, t, until, want}} requests and tokens held until `until`
    ("throttle", pa.float64(), True),  # the slow-down multiplier after a 429 (1 = none, at most 3)
    ("throttle_at", pa.float64(), True),  # epoch seconds it was set; it decays from there
    ("blocked_until", pa.float64(), True),  # epoch seconds: a Retry-After holds every worker back until then
    ("created_at", TS, False),
    ("updated_at", TS, False),
)

# Eval sets and runs (store/evals.py, issue 29): a frozen list of sessions, the
# runs that replay them under changed settings, one row per (run, session) with
# its replay's create payload and progress, and one row per (run, session, scorer).
EVALSETS = _schema(
    ("id", pa.string(), False),
    ("name", pa.string(), False),
    ("session_ids", pa.string(), False),  # JSON list, frozen at creation
    ("from_iteration", pa.int64(), False),
    ("search", pa.string(), True),  # the /api/search parameters it was resolved from, if any
    ("created_at", TS, False),
)

EVAL_RUNS = _schema(
    ("id", pa.string(), False),
    ("evalset_id", pa.string(), False),
    ("status", pa.string(), False),  # running | done | failed
    ("request", pa.string(), True),  # {config, profile, moniker, tools, children, scorers, concurrency, judge}
    ("total", pa.int64(), False),  # sessions in the run
    ("owner", pa.string(), True),  # the agents.py worker driving it (a lease, renewed)
    ("lease_until", TS, True),
    ("error", pa.string(), True),
    ("created_at", TS, False),
    ("updated_at", TS, False),
    ("finished_at", TS, True),
)

EVAL_RESULTS = _schema(
    ("id", pa.string(), False),  # "<run_id>/<source_session_id>"
    ("run_id", pa.string(), False),
    ("evalset_id", pa.string(), False),
    ("position", pa.int64(), False),  # the session's place in the set
    ("source_session_id", pa.string(), False),
    ("replay_session_id", pa.string(), False),  # assigned when the run is created
    ("agent_id", pa.string(), True),
    ("payload", pa.string(), True),  # the replay's create payload (api.replays.replay_payload)
    ("status", pa.string(), False),  # pending | enqueued | scored | failed
    ("replay_status", pa.string(), True),  # the replay session's status when it was scored
    ("error", pa.string(), True),
    ("created_at", TS, False),
    ("updated_at", TS, False),
)

EVAL_SCORES = _schema(
    ("id", pa.string(), False),  # "<run_id>/<source_session_id>/<scorer>": a re-score replaces
    ("run_id", pa.string(), False),
    ("evalset_id", pa.string(), False),
    ("source_session_id", pa.string(), False),
    ("replay_session_id", pa.string(), False),
    ("scorer", pa.string(), False),
    ("value", pa.float64(), True),
    ("passed", pa.bool_(), True),
    ("detail", pa.string(), True),  # JSON
    ("created_at", TS, False),
)

# What a model was sent and answered, per model call of a step, for each
# session's last steps (store/model_io.py); deleted as newer steps come.
MODEL_IO = _schema(
    ("id", pa.string(), False),  # "<session_id>:<iteration>:<ask>"
    ("created_at", TS, False),
    ("agent_id", pa.string(), False),
    ("session_id", pa.string(), False),
    ("iteration", pa.int64(), False),
    ("ask", pa.int32(), False),  # 0, then 1, 2... when the step re-asked the model
    ("function", pa.string(), True),  # the BAML function
    ("model", pa.string(), True),
    ("mode", pa.string(), True),  # structured output: json_schema | grammar | off
    ("request", pa.string(), True),  # JSON: the body as sent (messages, schema, options), no headers
    ("reply", pa.string(), True),  # the reply's text as received
    ("tokens", pa.string(), True),  # JSON: the prompt's estimated split by part, and the server's counts
)

TABLES = {"actions": ACTIONS, "agent_state": AGENT_STATE, "agent_steps": AGENT_STEPS, "workers": WORKERS}
TABLES.update(conversations=CONVERSATIONS, conversation_participants=CONVERSATION_PARTICIPANTS,
              conversation_messages=CONVERSATION_MESSAGES, tool_calls=TOOL_CALLS, summaries=SUMMARIES)
TABLES.update(tool_catalog=TOOL_CATALOG, turns=TURNS, rate_ledger=RATE_LEDGER)
TABLES.update(evalsets=EVALSETS, eval_runs=EVAL_RUNS, eval_results=EVAL_RESULTS, eval_scores=EVAL_SCORES)
TABLES.update(model_io=MODEL_IO)

# Tables whose rows are upserted name their key here; it is declared as the
# table's primary key so that concurrent merge_insert calls cannot duplicate
# rows (measured: without the key, racing merge_inserts duplicated rows every time).
PRIMARY_KEYS = {"agent_state": "session_id", "conversation_participants": "id", "workers": "worker_id",
                "tool_calls": "id", "tool_catalog": "worker_id", "summaries": "id", "turns": "id",
                "rate_ledger": "id", "evalsets": "id", "eval_runs": "id", "eval_results": "id",
                "eval_scores": "id"}

# Scalar indexes that fit the queries: BITMAP for small closed sets (the queue's
# status filter), BTREE for ids, cursors and ranges.  Rows appended after an
# index was built are still found (scanned) until maintenance folds them in.
INDEXES = {
    "actions": [("status", "bitmap"), ("id", "btree"), ("session_id", "btree"), ("agent_id", "btree"),
                ("idempotency_key", "btree")],
    "agent_state": [("session_id", "btree"), ("agent_id", "btree"), ("status", "bitmap"), ("owner", "btree"),
                    ("parent_session_id", "btree"), ("root_session_id", "btree")],
    # session_iteration serves a session's pages (a range of iterations); the
    # iteration index it replaced stays on tables created before it, unused.
    "agent_steps": [("session_id", "btree"), ("session_iteration", "btree"), ("agent_id", "btree"),
                    ("created_at", "btree")],
    "conversation_messages": [("conversation_id", "btree"), ("created_at", "btree")],
    "conversation_participants": [("conversation_id", "btree"), ("kind", "bitmap")],
    "tool_calls": [("id", "btree"), ("session_id", "btree"), ("agent_id", "btree"), ("status", "bitmap"),
                   ("created_at", "btree")],
    "summaries": [("session_id", "btree"), ("conversation_id", "btree"), ("agent_id", "btree")],
    "turns": [("session_id", "btree"), ("status", "bitmap")],
    "model_io": [("session_id", "btree")],
    "rate_ledger": [("model_key", "btree")],
}

# A step's place in its session as one string that sorts in iteration order.
# A page of a session is then one range of one BTREE index, so its cost does
# not grow with the session's history: filtering on session_id and iteration
# (two indexes) made the session_id index hand back every step of the session
# for each page (a page of a 400k-step session took 18.7 ms against 4.1 ms for
# a 100-step one; with this key 4.2 ms, BENCHMARKS.md §4e).  "/" cannot occur in an id
# (store/filters.py), so one session's range holds no other session's keys.
ITERATION_DIGITS = 12


def session_iteration(session_id: str, iteration: int) -> str:
    if not 0 <= iteration < 10 ** ITERATION_DIGITS:
        raise ValueError(f"iteration out of range: {iteration}")
    return f"{session_id}/{iteration:0{ITERATION_DIGITS}d}"


# Columns computed from others: filled in on every write (store/codec.py), and
# by the SQL expression for the rows of a table that was created without them
# (store/db.py).  Both must give the same string (a test checks).
DERIVED_COLUMNS = {
    "agent_steps": {
        "session_iteration": (
            lambda row: session_iteration(row["session_id"], row["iteration"]),
            f"concat(session_id, '/', lpad(CAST(iteration AS VARCHAR), {ITERATION_DIGITS}, '0'))",
            ("session_id", "iteration"),
        ),
    },
}
# Internal columns: never in the rows handed back to callers.
HIDDEN_COLUMNS = {table: set(columns) for table, columns in DERIVED_COLUMNS.items()}

JSON_COLUMNS = {
    "actions": {"payload", "answer"},
    "agent_state": {"config", "state", "result", "pending_guidance", "used_guidance", "usage", "forked_from",
                    "replayed_from", "replay", "subagent"},
    "agent_steps": {"data", "state", "guidance", "usage", "tool_calls", "inputs", "observers"},
    "tool_calls": {"args", "original_args", "result", "usage"},
    "conversations": {"tags"},
    "conversation_messages": {"data"},
    "summaries": {"data"},
    "tool_catalog": {"tools"},
    "workers": {"maintenance"},
    "turns": {"trigger_ids", "usage", "summary_data"},
    "model_io": {"request", "tokens"},
    "rate_ledger": {"shares"},
    "evalsets": {"session_ids", "search"},
    "eval_runs": {"request"},
    "eval_results": {"payload"},
    "eval_scores": {"detail"},
}
