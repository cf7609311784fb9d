"""A queue in a known state at a known clock, and the whole physical state of a store.

Shared by the inspection tests (tests/integration/test_inspection.py) and the tests of a
store opened read-only (test_read_only_store.py): both seed the same queue, read it
at a fixed clock, and prove that nothing was written by comparing :func:`dump` before
and after.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.timestamps import format_timestamp

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=timezone.utc)


def at(minutes_ago: float) -> str:
    """The canonical timestamp ``minutes_ago`` minutes before :data:`NOW`."""
    return format_timestamp(NOW - timedelta(minutes=minutes_ago))


def fixed_clock() -> datetime:
    """An inspector's clock that stands at :data:`NOW`, so ages are exact."""
    return NOW


def seed_queue(store: AtomicStore) -> None:
    """3 pending, 3 in flight (claimed 1, 20 and 90 minutes before NOW), 2 done."""
    for key in ("p1", "p2", "p3"):
        store.put("jobs", key, {"status": "pending"})
    for key, minutes, by in (("f1", 1, "dag/run-a"), ("f2", 20, "dag/run-b"), ("f3", 90, "d/c")):
        store.put("jobs", key, {"status": "in_flight", "claimedAt": at(minutes), "claimedBy": by})
    for key in ("d1", "d2"):
        store.put("jobs", key, {"status": "done"})


def dump(url: str) -> dict[str, Any]:
    """Every table the store keeps, row by row, and every index: the whole physical state."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            objects = conn.execute(
                "SELECT type, name, sql FROM sqlite_master ORDER BY name"
            ).fetchall()
            tables = [name for kind, name, _ in objects if kind == "table"]
            contents = {
                name: sorted(map(repr, conn.execute(f'SELECT * FROM "{name}"'))) for name in tables
            }
        return {"objects": objects, "contents": contents}
    with psycopg.connect(url, autocommit=True) as conn:
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "ORDER BY 1"
        ).fetchall()
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
            )
        ]
        contents = {
            name: sorted(
                str(row[0])
                for row in conn.execute(
                    psycopg.sql.SQL("SELECT to_jsonb(t)::text FROM {} AS t").format(
                        psycopg.sql.Identifier(name)
                    )
                )
            )
            for name in tables
        }
    return {"objects": indexes, "contents": contents}
