"""rate_ledger: each rate-limited model's budget, shared out among the workers.

One row per model (runtime/base/rate_limits.py decides what goes in it).  A row is
created by an append; should two workers create one at once, both rows exist
and everyone uses the one with the smallest id, so a creation never overwrites
a row in use.  Every change is a compare-and-swap: a conditional update that
applies only if ``version`` is still the one read, and bumps it; exactly one of
two racing workers wins (measured with conditional updates racing across
processes), and the loser reads again.
"""
import hashlib

from ulid import ULID

from store import codec, filters, query


def model_key(model: str) -> str:
    """A filter-safe key for a model name (names hold '/', ':' and spaces)."""
    return hashlib.sha1(model.encode()).hexdigest()[:24]


class RateLedger:
    name = "rate_ledger"

    def __init__(self, table, writer):
        self.table = table
        self.writer = writer

    def current(self, model: str) -> dict | None:
        """The model's row (the smallest id, should a creation race have made two)."""
        return query.first(self.table, self.name, filters.eq_id("model_key", model_key(model)), order=[("id", True)])

    def create(self, model: str) -> None:
        now = codec.utcnow()
        self.writer.append(self.name, [{"id": f"rl-{ULID()}", "model_key": model_key(model), "model": model,
                                        "version": 0, "shares": {}, "throttle": 1.0, "throttle_at": None,
                                        "blocked_until": None, "created_at": now, "updated_at": now}])

    def swap(self, row: dict, values: dict) -> bool:
        """Apply ``values`` to ``row`` if nobody changed it since it was read; True if applied."""
        where = filters.all_of(filters.eq_id("id", row["id"]), filters.int_cmp("version", "=", row["version"]))
        return self.writer.update(self.name, where, {**values, "version": row["version"] + 1,
                                                     "updated_at": codec.utcnow()}) == 1

    def versions(self) -> int:
        """How many versions the table has (its commits), for measuring the write load."""
        return len(self.table.list_versions())
