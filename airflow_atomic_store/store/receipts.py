"""Idempotency receipts: a primitive called with a key applies at most once per key.

The receipt (the key, what it was used for: the primitive, for a claim its mode,
the table and row; the call's raw result) is written
in the same transaction as the effect, so a call that applied has a receipt
and a call that did not apply has none. A later call with the key applies
nothing and returns the recorded result; a concurrent one waits for the first
to commit and then does the same. Receipts expire after a retention and are
removed a bounded batch at a time by the calls that use keys: no daemon.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from airflow_atomic_store.exceptions import IdempotencyKeyError, ResultTooLargeError, SpecError
from airflow_atomic_store.spec import check_text

Primitive = Literal["update", "claim", "upsert", "upsert_many", "update_many"]
#: What a receipt records as its use: the primitive, and for a claim its mode.
#: A mark-claim records "claim" (as receipts always have); a delete-claim records
#: "delete-claim", so a key reused across modes is refused: a replayed mark batch
#: is still in the table (``in_flight``), a replayed delete batch is gone from it.
#: Text in the existing ``primitive`` column: no schema change.
Use = Literal["update", "claim", "delete-claim", "upsert", "upsert_many", "update_many"]

#: Long enough to outlive Airflow's retry windows many times over (retries with
#: exponential back-off, a task cleared and re-run the next day).
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600.0
#: A century: a receipt's expiry must stay a timestamp both databases and Python hold.
MAX_RETENTION_SECONDS = 100 * 365 * 24 * 3600.0
#: Expired receipts one purge removes, and how many keyed calls pass between purges.
PURGE_BATCH = 500
PURGE_EVERY = 100
MAX_KEY_BYTES = 1024
#: The largest result a receipt records: PostgreSQL's limit on one ``jsonb`` value
#: (measured there as the ``jsonb``'s size, on SQLite as the UTF-8 JSON text's).
#: Read at each call, so a test can lower it.
MAX_RESULT_BYTES = 268_435_455


@dataclass(frozen=True)
class Receipt:
    """What a keyed call records: the key and the one use it may be replayed for."""

    key: str
    primitive: Use
    table: str
    target: str  # the row key; claims have none
    retention: float

    @property
    def max_result_bytes(self) -> int:
        return MAX_RESULT_BYTES

    def check_result_size(self, size: int) -> None:
        """Refuse, before anything commits, a result too large to record."""
        if size > MAX_RESULT_BYTES:
            raise ResultTooLargeError(MAX_RESULT_BYTES, size)

    def check_reuse(self, primitive: str, table: str, target: str) -> None:
        """Raise unless a recorded use is this one: a key serves one primitive on one row."""
        if (primitive, table, target) != (self.primitive, self.table, self.target):
            raise IdempotencyKeyError(self.key, self.primitive, self.table, self.target)


def parse_idempotency_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise SpecError("idempotency_key", f"must be a non-empty string, got {key!r}")
    check_text(key, "idempotency_key", "idempotency keys")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise SpecError("idempotency_key", f"must be at most {MAX_KEY_BYTES} bytes in UTF-8")
    return key


def parse_retention(seconds: object) -> float:
    """Checked up front: an infinite or huge retention used to fail every keyed call."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not 0 < seconds <= MAX_RETENTION_SECONDS
    ):
        raise SpecError(
            "receipt_retention",
            f"must be a positive number of seconds, at most {MAX_RETENTION_SECONDS:.0f} "
            f"(a century), got {seconds!r}",
        )
    return float(seconds)
