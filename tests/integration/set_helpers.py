"""What the claimable-set tests share: an aged queue and stores with or without automatic sets."""

from __future__ import annotations

from airflow_atomic_store import AtomicStore
from tests.support.physical import PHYSICAL_TABLE

PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]
STALE = [
    {"field": "status", "operator": "equals", "value": "in_flight"},
    {"field": "claimedAt", "operator": "lt", "value": "2100-01-01T00:00:00.000000Z"},
]


def aged_queue(
    store: AtomicStore, table: str = "queue", done: int = 1500, pending: int = 30
) -> None:
    """``done`` consumed rows beneath ``pending`` claimable ones, as a queue keeps its history."""
    for number in range(done + pending):
        status = "done" if number < done else "pending"
        store.put(table, f"{number:05}", {"status": status, "n": number})


def analyze(store: AtomicStore, url: str) -> None:
    """PostgreSQL statistics as autovacuum would leave them (SQLite's claim names its index)."""
    if url.startswith("postgresql"):
        with store._backend._cursor() as cursor:  # type: ignore[attr-defined]
            cursor.execute(f"ANALYZE {PHYSICAL_TABLE}")


def manual(url: str) -> AtomicStore:
    """A store that declares no set by itself."""
    return AtomicStore(url)


def age_set(url: str, name: str, seconds: float = 2 * 86400) -> None:
    """Make the set look unused for ``seconds`` (two days: a catalog row left by a finished run)."""
    if url.startswith("sqlite:///"):
        import sqlite3
        from contextlib import closing
        from datetime import timedelta

        from airflow_atomic_store import timestamps

        then = timestamps.format_timestamp(timestamps.utc_now() - timedelta(seconds=seconds))
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute(
                f"UPDATE {PHYSICAL_TABLE}_claim_sets SET used_at = ? WHERE name = ?", (then, name)
            )
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                f"UPDATE {PHYSICAL_TABLE}_claim_sets "
                "SET used_at = clock_timestamp() - make_interval(secs => %s) WHERE name = %s".encode(),
                (seconds, name),
            )


def set_indexes(url: str) -> set[str]:
    """The claimable sets' indexes on the rows table, as the database lists them."""
    from tests.support.physical import index_names

    return {name for name in index_names(url) if "_set_" in name}
