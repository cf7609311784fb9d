"""The inspection counts and pages agree with the reference evaluator over random rows.

What the backends count and page in SQL must be what a Python loop over the
rows would find: rows per string ``status``, the in-flight and stale counts
(``claimedAt lt cutoff`` as the oracle compares it), and the rows a ``where``
selects, page by page.
"""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from airflow_atomic_store.inspection import StoreInspector
from airflow_atomic_store.spec import evaluate, parse_where
from tests.property.strategies import documents, json_values, timestamps, wheres

_tables = itertools.count()
NOW = datetime(2026, 6, 15, 12, 0, tzinfo=timezone.utc)

statuses = st.sampled_from(["pending", "in_flight", "done", "é", "In_Flight"]) | json_values
queue_rows = st.fixed_dictionaries(
    {"status": statuses},
    optional={
        "claimedAt": timestamps | json_values,
        "claimedBy": st.sampled_from(["dag/run", "other"]) | json_values,
    },
)


@given(rows=st.lists(queue_rows, max_size=12), minutes=st.integers(1, 600 * 24 * 400))
def test_stats_counts_agree_with_the_rows(module_store, rows, minutes):
    table = f"inspect-{next(_tables)}"
    for index, row in enumerate(rows):
        module_store.put(table, f"k{index:02d}", row)
    stale_after = timedelta(minutes=minutes)
    stats = StoreInspector(module_store, clock=lambda: NOW).stats(
        table, stale_after=stale_after, in_flight_limit=100
    )
    expected = Counter(row["status"] for row in rows if isinstance(row["status"], str))
    assert stats.rows == len(rows)
    assert stats.status_counts == dict(expected)
    assert stats.in_flight_count == expected["in_flight"]
    cutoff = (NOW - stale_after).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    stale = parse_where(
        [
            {"field": "status", "operator": "equals", "value": "in_flight"},
            {"field": "claimedAt", "operator": "lt", "value": cutoff},
        ]
    )
    stale_keys = {f"k{i:02d}" for i, row in enumerate(rows) if evaluate(stale, "all", row)}
    assert stats.stale_count == len(stale_keys)
    assert {row.key for row in stats.in_flight if row.stale} == stale_keys
    in_flight = [row for row in rows if row["status"] == "in_flight"]
    assert len(stats.in_flight) == len(in_flight)
    claimed_at = [row.claimed_at for row in stats.in_flight if row.claimed_at is not None]
    assert claimed_at == sorted(claimed_at)  # oldest claims first


@given(
    data=st.data(),
    match=st.sampled_from(["all", "any"]),
    rows=st.lists(documents, max_size=8),
    limit=st.integers(1, 4),
)
def test_row_pages_hold_the_rows_the_oracle_accepts(module_store, data, match, rows, limit):
    where = data.draw(wheres(rows[0] if rows else None), label="where")
    table = f"inspect-{next(_tables)}"
    for index, document in enumerate(rows):
        module_store.put(table, f"k{index}", document)
    conditions = parse_where(where)
    expected = [f"k{i}" for i, document in enumerate(rows) if evaluate(conditions, match, document)]
    inspector = StoreInspector(module_store)
    found: list[str] = []
    for offset in range(0, len(rows) + 1, limit):
        page = inspector.rows(table, where=where, match=match, limit=limit, offset=offset)
        found.extend(row.key for row in page.rows)
        assert page.has_more == (offset + limit < len(expected))
    assert found == expected
