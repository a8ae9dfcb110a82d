"""How fast a person's answer resumes an agent: ``ask_user`` answered through
the ``answer`` action, against the plain external ``human`` tool answered
through ``tool_result`` (the same queue path without the question's
bookkeeping: posting, the choice match, the echo into conversations).

    python -m bench.bench_ask_user [--quick] [--sessions 40]

Runs AgentService in this process (QuestionDesk attached, as agents.py does)
on a Store in a temporary directory.  ``--sessions`` scripted sessions of each
kind ask at once (``human`` and ``ask_user`` in a conversation, and
``ask_user`` in none: no question posted, no answer echoed); once every call
waits, all are answered at once, the kinds interleaved (one action each,
group-committed), and the figure is the time from an answer's action row
(``created_at``) to the persisted next step (``agent_steps.created_at`` of
iteration 1): queue pickup + apply + the step.  Printed: p50/p99 per kind and
the ratio ask_user/human of the p50s, in one run.
"""
import argparse
import asyncio
import sys
import tempfile

from bench.common import emit, machine, progress, run_in_process, summary, ts, wait_until
from monikers import default_registry
from runtime.worker import fanout_targets
from store import Store


def frames(tool: str) -> list[dict]:
    args = {"question": "Which city?", "choices": ["Paris", "Rome"]} if tool == "ask_user" else {"question": "?"}
    return [{"tool_calls": [{"name": tool, "args": args}]}, {"text": "thanks", "done": True}]


def create(store, n: int, tool: str, conversation_id: str) -> list[str]:
    from ulid import ULID

    sessions = []
    for _ in range(n):
        sid = str(ULID())
        store.actions.enqueue("create", agent_id=str(ULID()), session_id=sid, conversation_id=conversation_id,
                              payload={"moniker": "scripted", "conversation_id": conversation_id,
                                       "config": {"interval_s": 0, "tools": [tool], "frames": frames(tool)}})
        sessions.append(sid)
    return sessions


def latencies(store, sessions: dict[str, str]) -> list[float]:
    """ms from each answer's action row to the session's step 1."""
    out = []
    for sid, action_id in sessions.items():
        action = store.actions.get(action_id)
        (step,) = store.steps.search(session_id=sid, min_iteration=1, max_iteration=1, limit=1)
        out.append((ts(step["created_at"]) - ts(action["created_at"])).total_seconds() * 1000)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=40, help="sessions of each kind")
    parser.add_argument("--quick", action="store_true", help="10 sessions of each kind (the smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sessions = 10
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp + "/db")
        conversation = store.conversations.create(title="bench")["conversation_id"]
        result = {"bench": "ask_user", "machine": machine(), "sessions": args.sessions}

        async def scenario(service):
            fanout_targets.attach_questions(service)
            kinds = {"human": ("human", "tool_result", conversation), "ask_user": ("ask_user", "answer", conversation),
                     "ask_user_no_conversation": ("ask_user", "answer", None)}
            sessions = {kind: create(store, args.sessions, tool, conv) for kind, (tool, _, conv) in kinds.items()}
            kind_of = {sid: kind for kind, sids in sessions.items() for sid in sids}
            total = len(kind_of)
            waiting = await wait_until(lambda: store.tool_calls.waiting(limit=10_000)
                                       if store.tool_calls.count_waiting() >= total else None,
                                       timeout=180, what="every call to wait")
            progress(f"{len(waiting)} calls wait; answering them all at once, the kinds interleaved")

            def payload(row, verb):
                if verb == "answer":
                    return {"tool_call_id": row["id"], "text": "Rome", "via": "api"}
                return {"tool_call_id": row["id"], "result": "Rome"}

            rows = sorted(waiting, key=lambda r: sessions[kind_of[r["session_id"]]].index(r["session_id"]))
            answered: dict[str, dict[str, str]] = {kind: {} for kind in kinds}
            for row in rows:
                kind = kind_of[row["session_id"]]
                verb = kinds[kind][1]
                action = await asyncio.to_thread(store.actions.enqueue, verb, agent_id=row["agent_id"],
                                                 session_id=row["session_id"], payload=payload(row, verb))
                answered[kind][row["session_id"]] = action["id"]
            await wait_until(lambda: all(store.states.get(s)["status"] == "done" for s in kind_of),
                             timeout=180, what="every session to finish")
            return {kind: summary(latencies(store, answered[kind])) for kind in kinds}

        figures = run_in_process(store, scenario, registry=default_registry())
        ratio = round(figures["ask_user"]["p50_ms"] / figures["human"]["p50_ms"], 2)
        result.update(answer_to_next_step=figures, ratio_p50_ask_user_over_human=ratio)
        emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
