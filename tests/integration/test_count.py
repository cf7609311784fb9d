"""``AtomicStore.count``: what a trigger asks before waking a dispatcher, on both backends."""

from __future__ import annotations

import pytest

from airflow_atomic_store import AtomicStore, SpecError
from tests.support.specs import PENDING


def test_count_counts_only_rows_matching_where_in_that_table(store: AtomicStore) -> None:
    for n in range(3):
        store.put("jobs", f"p{n}", {"status": "pending"})
    store.put("jobs", "d0", {"status": "done"})
    store.put("other", "p9", {"status": "pending"})
    assert store.count("jobs", PENDING) == 3
    assert store.count("jobs") == 4
    assert store.count("empty", PENDING) == 0


def test_count_stops_at_its_cap(store: AtomicStore) -> None:
    for n in range(5):
        store.put("jobs", f"p{n}", {"status": "pending"})
    assert store.count("jobs", PENDING, at_most=2) == 2


def test_count_sees_claimed_rows_leave_the_filter(store: AtomicStore) -> None:
    for n in range(4):
        store.put("jobs", f"p{n}", {"status": "pending"})
    store.atomic_claim("jobs", where=PENDING, limit=3)
    assert store.count("jobs", PENDING) == 1


def test_count_through_a_claimable_set_agrees_with_the_plain_count(store: AtomicStore) -> None:
    store.ensure_claim_index(table="jobs", where=PENDING)
    for n in range(3):
        store.put("jobs", f"p{n}", {"status": "pending", "n": n})
    store.put("jobs", "d0", {"status": "done"})
    where = [*PENDING, {"field": "n", "operator": "gte", "value": 1}]
    assert store.count("jobs", where) == 2
    assert store.count("jobs", PENDING, match="all") == 3


def test_count_with_a_bad_cap_names_the_field(store: AtomicStore) -> None:
    with pytest.raises(SpecError) as raised:
        store.count("jobs", PENDING, at_most=0)
    assert raised.value.field == "at_most"


def test_backlog_names_the_row_a_fifo_claim_takes_next(store: AtomicStore) -> None:
    assert store.backlog("jobs", PENDING) == {"count": 0, "first": None}
    for n in range(3):
        store.put("jobs", f"p{n}", {"status": "pending"})
    assert store.backlog("jobs", PENDING) == {"count": 3, "first": "p0"}
    store.atomic_claim("jobs", where=PENDING, limit=1)
    store.put("jobs", "p3", {"status": "pending"})
    assert store.backlog("jobs", PENDING) == {"count": 3, "first": "p1"}
