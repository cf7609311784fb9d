"""atomic_upsert: insert when absent, mutate on conflict, and say which happened."""

from __future__ import annotations

import pytest

from airflow_atomic_store import AtomicStore, MutationError
from tests.support.physical import PHYSICAL_TABLE

BUMP = [{"field": "count", "operation": "increment", "value": 1}]


def test_upsert_inserts_a_missing_row(store: AtomicStore) -> None:
    result = store.atomic_upsert("events", "e1", insert_value={"count": 1, "payload": "x"})
    assert result == {"inserted": True, "value": {"count": 1, "payload": "x"}, "key": "e1"}
    assert store.get("events", "e1") == {"count": 1, "payload": "x"}


def test_upsert_insert_branch_ignores_the_conflict_mutations(store: AtomicStore) -> None:
    result = store.atomic_upsert("events", "e1", insert_value={"count": 1}, mutations=BUMP)
    assert result == {"inserted": True, "value": {"count": 1}, "key": "e1"}


def test_upsert_applies_mutations_to_an_existing_row(store: AtomicStore) -> None:
    store.put("events", "e1", {"count": 1, "payload": "x"})
    result = store.atomic_upsert("events", "e1", insert_value={"count": 100}, mutations=BUMP)
    assert result == {"inserted": False, "value": {"count": 2, "payload": "x"}, "key": "e1"}
    assert store.get("events", "e1") == {"count": 2, "payload": "x"}


def test_seed_if_missing_returns_the_existing_value_untouched(store: AtomicStore) -> None:
    first = store.atomic_upsert("rate_limits", "api", insert_value={"tokens": 100})
    store.atomic_update(
        "rate_limits", "api", mutations=[{"field": "tokens", "operation": "increment", "value": -7}]
    )
    again = store.atomic_upsert("rate_limits", "api", insert_value={"tokens": 100}, mutations=[])
    assert first == {"inserted": True, "value": {"tokens": 100}, "key": "api"}
    assert again == {"inserted": False, "value": {"tokens": 93}, "key": "api"}
    assert store.get("rate_limits", "api") == {"tokens": 93}


def test_upsert_keeps_the_creation_place_of_an_existing_row(store: AtomicStore) -> None:
    store.put("q", "a", {"count": 0})
    store.put("q", "b", {"count": 0})
    store.atomic_upsert("q", "a", insert_value={"count": 0}, mutations=BUMP)
    assert [row["key"] for row in store.query("q")] == ["a", "b"]
    assert [row["key"] for row in store.query("q", order_by="recordTimestamp")] == ["b", "a"]


def test_upsert_return_fields_trims_both_branches(store: AtomicStore) -> None:
    inserted = store.atomic_upsert(
        "leases", "d", insert_value={"holder": "me", "expiresAt": "x"}, return_fields=["holder"]
    )
    assert inserted == {"inserted": True, "value": {"holder": "me"}, "key": "d"}
    conflict = store.atomic_upsert(
        "leases", "d", insert_value={"holder": "you"}, return_fields=["holder"]
    )
    assert conflict == {"inserted": False, "value": {"holder": "me"}, "key": "d"}
    assert store.get("leases", "d") == {"holder": "me", "expiresAt": "x"}


def test_upsert_conflict_set_creates_nested_parents(store: AtomicStore) -> None:
    store.put("t", "k", {})
    result = store.atomic_upsert(
        "t",
        "k",
        insert_value={},
        mutations=[
            {"field": "stats.daily.hits", "operation": "increment", "value": 1},
            {"field": "stats.last", "operation": "set", "value": "now"},
        ],
    )
    assert result["value"] == {"stats": {"daily": {"hits": 1}, "last": "now"}}


def test_upsert_conflict_that_cannot_mutate_raises_and_writes_nothing(store: AtomicStore) -> None:
    store.put("events", "e1", {"count": "many"})
    with pytest.raises(MutationError):
        store.atomic_upsert(
            "events",
            "e1",
            insert_value={"count": 0},
            mutations=[
                {"field": "seen", "operation": "set", "value": True},
                *BUMP,
            ],
        )
    assert store.get("events", "e1") == {"count": "many"}


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_duplicate_seed_writes_no_new_row_version(store: AtomicStore) -> None:
    """Seed-if-missing on an existing row only reads: no dead tuple per duplicate delivery."""
    store.atomic_upsert("events", "e-1", insert_value={"n": 1})

    def version() -> tuple[str, str]:
        with store._backend._cursor() as cursor:  # type: ignore[attr-defined]
            row = cursor.execute(
                f"SELECT ctid::text, xmin::text FROM {PHYSICAL_TABLE} WHERE key = 'e-1'"
            ).fetchone()
        return row

    before = version()
    for _ in range(3):
        result = store.atomic_upsert("events", "e-1", insert_value={"n": 2})
        assert result == {"inserted": False, "value": {"n": 1}, "key": "e-1"}
    assert version() == before
