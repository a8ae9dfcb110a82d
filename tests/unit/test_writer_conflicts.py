"""store.writer.retry_conflicts: which errors are retried, how often, and what
the log says about each lost race (the table, the kind of write and how long
the try took: a try can last as long as Lance's own 30 s of retries)."""
import logging

import pytest

from store import writer


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(writer.time, "sleep", lambda s: None)


def failing(times: int, message: str):
    calls = []

    def commit():
        calls.append(1)
        if len(calls) <= times:
            raise RuntimeError(message)
        return "committed"
    return commit, calls


def test_a_lost_race_is_retried_and_logged_with_its_table_kind_and_duration(caplog):
    commit, calls = failing(2, "Too many concurrent writers. Attempted 10 times, but failed on retry_timeout")
    with caplog.at_level(logging.INFO, logger="store.writer"):
        assert writer.retry_conflicts("agent_state", "upsert", commit) == "committed"
    assert len(calls) == 3
    lines = [r.getMessage() for r in caplog.records if "commit conflict" in r.getMessage()]
    assert len(lines) == 2
    assert lines[0].startswith("commit conflict on agent_state (upsert, attempt 1, the try took ")
    assert "Too many concurrent writers" in lines[0]


def test_an_error_that_is_not_a_conflict_is_raised_at_once():
    commit, calls = failing(1, "Invalid user input: no such column")
    with pytest.raises(RuntimeError, match="no such column"):
        writer.retry_conflicts("agent_steps", "append", commit)
    assert len(calls) == 1


def test_a_conflict_that_keeps_coming_is_raised_after_the_last_attempt():
    commit, calls = failing(100, "Retryable commit conflict for version 7")
    with pytest.raises(RuntimeError, match="Retryable commit conflict"):
        writer.retry_conflicts("actions", "update", commit)
    assert len(calls) == writer.CONFLICT_ATTEMPTS
