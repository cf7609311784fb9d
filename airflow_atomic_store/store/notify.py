"""Which PostgreSQL notification channel a logical table's writes are announced on.

A trigger that waits for claimable rows ``LISTEN``s on the channel of its table,
and the store's writes to that table ``pg_notify`` it in the same statement, so a
notification is sent only when the write commits (PostgreSQL delivers
notifications at commit, never for a rolled-back transaction).

The channel is derived, not configured: a hash of the storage table and the
logical table, so that it is a plain identifier of fixed length (a logical table
name is any text, and a channel name is an identifier of at most 63 bytes) and
two stores in one database do not wake each other's triggers. Stores that share
a storage table name in different schemas of one database share channels: a
trigger then wakes for the other schema's writes too, counts, and goes back to
waiting, which costs a count and is never wrong.

Which writes notify is the store's ``notify`` option (:data:`NOTIFY_MODES`).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Final

from airflow_atomic_store.exceptions import SpecError

#: The write families that notify, per ``notify`` mode. A claim marks rows in place, and
#: its new values match another filter only when a pipeline watches a claim's own marks;
#: "writes" keeps claims (the hot path) out of PostgreSQL's commit-time notify lock.
NOTIFY_MODES: Final[dict[str, frozenset[str]]] = {
    "writes": frozenset({"put", "update", "upsert"}),
    "all": frozenset({"put", "update", "upsert", "claim"}),
    "off": frozenset(),
}
DEFAULT_NOTIFY: Final = "writes"


def parse_notify(mode: object) -> frozenset[str]:
    if not isinstance(mode, str) or mode not in NOTIFY_MODES:
        raise SpecError("notify", f"must be one of {', '.join(NOTIFY_MODES)}, got {mode!r}")
    return NOTIFY_MODES[mode]


@lru_cache(maxsize=1024)
def channel_for(storage_table: str, table: str) -> str:
    """The channel of ``table`` in ``storage_table``: ``atomic_store_`` and 32 hex digits."""
    digest = hashlib.sha256(f"{storage_table}\x00{table}".encode()).hexdigest()
    return f"atomic_store_{digest[:32]}"
