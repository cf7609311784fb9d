"""What a store remembers between calls never serves a stale statement.

A repeated claim reuses its parsed spec, its chosen claimable set and its
compiled statement (``spec/memo.py``, ``AtomicStore._serving``,
``WhereCompiler.compile``, the SQLite backend's compiled selections). These
tests change what those depend on between two equal calls: the sets of a table,
the table, and the caller's own spec objects.
"""

from __future__ import annotations

import pytest

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.store import atomic_store as claim_sets
from tests.support.physical import PHYSICAL_TABLE
from tests.support.specs import PENDING


def _queue(store: AtomicStore, table: str, done: int, pending: int) -> None:
    for number in range(done + pending):
        store.put(table, f"{number:04}", {"status": "done" if number < done else "pending"})


def _planned(store: AtomicStore, url: str, table: str) -> str:
    """The claim's plan with statistics as autovacuum leaves them (SQLite names its index)."""
    if url.startswith("postgresql"):
        with store._backend._cursor() as cursor:  # type: ignore[attr-defined]
            cursor.execute(f"ANALYZE {PHYSICAL_TABLE}")
    return store.explain_claim(table, where=PENDING)


def _keys(result: dict) -> list[str]:
    return [row["key"] for row in result["claimed"]]


def test_a_repeated_claim_follows_its_tables_sets_as_they_are_declared_and_dropped(store_url):
    with AtomicStore(store_url) as store:
        _queue(store, "jobs", done=1500, pending=8)
        assert _keys(store.atomic_claim("jobs", where=PENDING, limit=2)) == ["1500", "1501"]
        name = store.ensure_claim_index(table="jobs", where=PENDING)
        assert name in _planned(store, store_url, "jobs")
        assert _keys(store.atomic_claim("jobs", where=PENDING, limit=2)) == ["1502", "1503"]
        assert store.drop_claim_set(name) is True
        assert name not in _planned(store, store_url, "jobs")
        assert _keys(store.atomic_claim("jobs", where=PENDING, limit=2)) == ["1504", "1505"]
        again = store.ensure_claim_index(table="jobs", where=PENDING)
        assert again in _planned(store, store_url, "jobs")
        assert _keys(store.atomic_claim("jobs", where=PENDING, limit=5)) == ["1506", "1507"]


def test_a_set_another_process_declares_is_used_once_the_catalog_is_read_again(
    store_url, monkeypatch
):
    with (
        AtomicStore(store_url) as store,
        AtomicStore(store_url) as other,
    ):
        _queue(store, "jobs", done=1500, pending=6)
        for listed in other.claim_sets():  # the schema's own pending set too
            other.drop_claim_set(listed["name"])
        assert store.atomic_claim("jobs", where=PENDING, limit=1)["count"] == 1
        name = other.ensure_claim_index(table="jobs", where=PENDING)
        monkeypatch.setattr(claim_sets, "REFRESH_SECONDS", 0.0)
        assert name in _planned(store, store_url, "jobs")
        assert _keys(store.atomic_claim("jobs", where=PENDING, limit=2)) == ["1501", "1502"]
        assert other.drop_claim_set(name) is True  # behind this store's back
        assert _keys(store.atomic_claim("jobs", where=PENDING, limit=10)) == [
            "1503",
            "1504",
            "1505",
        ]
        assert name not in _planned(store, store_url, "jobs")


def test_the_same_spec_object_on_two_tables_claims_each_tables_own_rows(store_url):
    with AtomicStore(store_url) as store:
        _queue(store, "a", done=1500, pending=4)
        _queue(store, "b", done=3, pending=4)
        name = store.ensure_claim_index(table="a", where=PENDING)
        for round_ in range(2):
            claimed_a = _keys(store.atomic_claim("a", where=PENDING, limit=2))
            claimed_b = _keys(store.atomic_claim("b", where=PENDING, limit=2))
            assert claimed_a == [f"{1500 + 2 * round_:04}", f"{1501 + 2 * round_:04}"]
            assert claimed_b == [f"{3 + 2 * round_:04}", f"{4 + 2 * round_:04}"]
        assert name in _planned(store, store_url, "a")  # the set is the filter's: b's too
        assert store.get("a", "1500")["status"] == store.get("b", "0003")["status"] == "in_flight"


IN_PENDING = {"field": "status", "operator": "in", "value": ["pending"]}


@pytest.mark.parametrize("declared", [False, True])
def test_a_spec_the_caller_changes_in_place_is_read_again(store_url, declared):
    with AtomicStore(store_url) as store:
        if declared:
            store.ensure_claim_index(table="jobs", where=[IN_PENDING])
        _queue(store, "jobs", done=2, pending=3)
        for number in range(3):
            store.put("jobs", f"r{number}", {"status": "retry"})
        where = [{"field": "status", "operator": "in", "value": ["pending"]}]
        assert _keys(store.atomic_claim("jobs", where=where, limit=10)) == ["0002", "0003", "0004"]
        where[0]["value"].append("retry")  # type: ignore[attr-defined]
        assert _keys(store.atomic_claim("jobs", where=where, limit=10)) == ["r0", "r1", "r2"]
        where[0]["value"] = ["done"]
        assert _keys(store.atomic_claim("jobs", where=where, limit=10)) == ["0000", "0001"]
        marks = [{"field": "status", "operation": "set", "value": "done"}]
        assert store.atomic_update("jobs", "r0", mutations=marks)["value"]["status"] == "done"
        marks[0]["value"] = "failed"
        assert store.atomic_update("jobs", "r1", mutations=marks)["value"]["status"] == "failed"
