"""A queue over time from its rows' timestamps (``StoreInspector.activity``), on both backends.

The page's charts are drawn from it: items finished per minute and the backlog at
the end of each minute. Rows are put through the store, then their timestamps set
directly (``created_at``, ``record_timestamp``) to a known history.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import datetime, timedelta, timezone

import pytest

from airflow_atomic_store import AtomicStore, SpecError
from airflow_atomic_store.inspection import QueueActivity, StoreInspector
from airflow_atomic_store.timestamps import format_timestamp
from tests.support.physical import PG_ROWS_OF, PHYSICAL_TABLE

NOW = datetime(2026, 6, 1, 12, 0, 30, tzinfo=timezone.utc)
SET = "UPDATE {t} SET created_at = {mark}, record_timestamp = {mark} WHERE {rows_of} AND key = {k}"


def backdate(url: str, table: str, key: str, created: float, written: float) -> None:
    """Give a row the ``created_at`` and last write of ``created``/``written`` minutes ago."""
    moments = [format_timestamp(NOW - timedelta(minutes=m)) for m in (created, written)]
    if url.startswith("sqlite:///"):
        statement = SET.format(t=PHYSICAL_TABLE, mark="?", rows_of="table_name = ?", k="?")
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute(statement, (moments[0], moments[1], table, key))
    else:
        import psycopg

        statement = SET.format(t=PHYSICAL_TABLE, mark="%s::timestamptz", rows_of=PG_ROWS_OF, k="%s")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(statement.encode(), (moments[0], moments[1], table, key))


def at(activity: QueueActivity, hhmm: str) -> tuple[int, int]:
    """(finished, backlog at its end) of the point holding ``hhmm`` of NOW's day."""
    hour, minute = map(int, hhmm.split(":"))
    moment = NOW.replace(hour=hour, minute=minute, second=0)
    (point,) = [p for p in activity.points if p.start <= moment < p.start + activity.bucket]
    return point.finished, point.backlog


def test_activity_counts_finished_items_per_minute_and_walks_the_backlog_back(
    store: AtomicStore, store_url: str
) -> None:
    history = {  # key: (value now, created minutes ago, last written minutes ago)
        "a": ({"status": "pending"}, 90, 90),
        "b": ({"status": "done"}, 50, 30),
        "c": ({"status": "failed"}, 20, 10),
        "d": ({"status": "in_flight"}, 5, 5),
        "lease": ({"holder": "run-1"}, 40, 1),  # no status: not a queue item
        "old": ({"status": "done"}, 2 * 1440, 2 * 1440),  # before the window
    }
    for key, (value, created, written) in history.items():
        store.put("jobs", key, value)
        backdate(store_url, "jobs", key, created, written)
    inspector = StoreInspector(store, clock=lambda: NOW)
    day = inspector.activity("jobs")
    assert len(day.points) == 1440 and day.bucket == timedelta(minutes=1)
    assert day.points[-1].start == NOW.replace(second=0)
    assert sum(p.finished for p in day.points) == 2
    hour = day.last(timedelta(hours=1), timedelta(minutes=1))
    assert at(hour, "11:05") == (0, 1)  # a
    assert at(hour, "11:15") == (0, 2)  # a, b
    assert at(hour, "11:30") == (1, 1)  # b finished at 11:30:30
    assert at(hour, "11:45") == (0, 2)  # a, c
    assert at(hour, "11:50") == (1, 1)  # c finished
    assert at(hour, "12:00") == (0, 2)  # a, d: today's pending + in_flight
    quarters = day.last(timedelta(days=1), timedelta(minutes=15))
    assert len(quarters.points) == 96
    assert at(quarters, "11:30") == (1, 1)  # 11:16-11:31: b done; a is left
    assert at(quarters, "11:45") == (0, 2)  # 11:31-11:46: c created
    assert at(quarters, "11:55") == (1, 2)  # 11:46-12:01: c done, d created
    data = quarters.to_dict()
    assert data["bucket_seconds"] == 900 and len(data["points"]) == 96


def test_activity_of_a_table_without_a_queue_is_flat_and_a_bad_window_is_refused(
    store: AtomicStore,
) -> None:
    store.put("leases", "leader", {"holder": "run-1"})
    inspector = StoreInspector(store, clock=lambda: NOW)
    flat = inspector.activity("leases", window=timedelta(hours=1))
    assert {(p.finished, p.backlog) for p in flat.points} == {(0, 0)}
    for window in (timedelta(seconds=30), timedelta(days=8), 60):
        with pytest.raises(SpecError, match="window"):
            inspector.activity("leases", window=window)  # type: ignore[arg-type]
