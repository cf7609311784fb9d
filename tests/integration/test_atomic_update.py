"""atomic_update: a compare-and-swap on one row, never an insert."""

from __future__ import annotations

import pytest

from airflow_atomic_store import AtomicStore, MutationError
from tests.support.specs import HAS_TOKENS as TOKENS_LEFT
from tests.support.specs import TAKE_TOKEN as TAKE_ONE


def test_update_applies_when_the_guard_matches(store: AtomicStore) -> None:
    store.put("buckets", "api", {"tokens": 2, "name": "api"})
    result = store.atomic_update("buckets", "api", where=TOKENS_LEFT, mutations=TAKE_ONE)
    assert result == {"updated": True, "value": {"tokens": 1, "name": "api"}, "key": "api"}
    assert store.get("buckets", "api") == {"tokens": 1, "name": "api"}


def test_update_reports_a_failed_guard_and_changes_nothing(store: AtomicStore) -> None:
    store.put("buckets", "api", {"tokens": 0})
    result = store.atomic_update("buckets", "api", where=TOKENS_LEFT, mutations=TAKE_ONE)
    assert result == {"updated": False, "value": None, "key": "api"}
    assert store.get("buckets", "api") == {"tokens": 0}


def test_update_of_a_missing_row_never_creates_it(store: AtomicStore) -> None:
    result = store.atomic_update("buckets", "ghost", mutations=TAKE_ONE)
    assert result == {"updated": False, "value": None, "key": "ghost"}
    guarded = store.atomic_update("buckets", "ghost", where=TOKENS_LEFT, mutations=TAKE_ONE)
    assert guarded == {"updated": False, "value": None, "key": "ghost"}
    assert store.get("buckets", "ghost") is None
    assert store.query("buckets") == []


def test_update_without_a_guard_always_applies_to_an_existing_row(store: AtomicStore) -> None:
    store.put("counters", "c", {"n": 41})
    result = store.atomic_update(
        "counters", "c", mutations=[{"field": "n", "operation": "increment", "value": 1}]
    )
    assert result == {"updated": True, "value": {"n": 42}, "key": "c"}


def test_update_match_any_applies_when_one_guard_holds(store: AtomicStore) -> None:
    store.put("leases", "l", {"holder": "me", "expired": False})
    guard = [
        {"field": "holder", "operator": "equals", "value": "someone-else"},
        {"field": "holder", "operator": "equals", "value": "me"},
    ]
    renew = [{"field": "renewals", "operation": "increment", "value": 1}]
    assert store.atomic_update("leases", "l", where=guard, match="any", mutations=renew)["updated"]
    assert not store.atomic_update("leases", "l", where=guard, match="all", mutations=renew)[
        "updated"
    ]
    assert store.get("leases", "l") == {"holder": "me", "expired": False, "renewals": 1}


def test_update_return_fields_trims_the_result_but_not_the_row(store: AtomicStore) -> None:
    store.put("buckets", "api", {"tokens": 5, "name": "api", "meta": {"a": 1}})
    result = store.atomic_update(
        "buckets", "api", mutations=TAKE_ONE, return_fields=["tokens", "not-there"]
    )
    assert result == {"updated": True, "value": {"tokens": 4}, "key": "api"}
    assert store.get("buckets", "api") == {"tokens": 4, "name": "api", "meta": {"a": 1}}


def test_update_applies_mutations_left_to_right(store: AtomicStore) -> None:
    store.put("t", "k", {"n": 10})
    mutations = [
        {"field": "n", "operation": "set", "value": 1},
        {"field": "n", "operation": "increment", "value": 2},
        {"field": "copy", "operation": "set", "value": "x"},
        {"field": "copy", "operation": "set", "value": "y"},
    ]
    assert store.atomic_update("t", "k", mutations=mutations)["value"] == {"n": 3, "copy": "y"}


def test_set_creates_missing_parent_objects(store: AtomicStore) -> None:
    store.put("t", "k", {"a": {"keep": 1}})
    mutations = [
        {"field": "a.b.c", "operation": "set", "value": 1},
        {"field": "x.y", "operation": "set", "value": {"z": [1, None]}},
    ]
    expected = {"a": {"keep": 1, "b": {"c": 1}}, "x": {"y": {"z": [1, None]}}}
    assert store.atomic_update("t", "k", mutations=mutations)["value"] == expected
    assert store.get("t", "k") == expected


def test_increment_keeps_integers_integral(store: AtomicStore) -> None:
    store.put("t", "k", {"i": 1, "f": 1.5})
    mutations = [
        {"field": "i", "operation": "increment", "value": 2},
        {"field": "f", "operation": "increment", "value": 1},
        {"field": "fresh", "operation": "increment", "value": 3},
        {"field": "nested.count", "operation": "increment", "value": -2},
    ]
    value = store.atomic_update("t", "k", mutations=mutations)["value"]
    assert value == {"i": 3, "f": 2.5, "fresh": 3, "nested": {"count": -2}}
    stored = store.get("t", "k")
    assert stored is not None
    assert type(stored["i"]) is int
    assert type(stored["fresh"]) is int
    assert type(stored["nested"]["count"]) is int
    assert type(stored["f"]) is float


def test_increment_of_null_starts_from_zero(store: AtomicStore) -> None:
    store.put("t", "k", {"n": None})
    assert store.atomic_update(
        "t", "k", mutations=[{"field": "n", "operation": "increment", "value": 5}]
    )["value"] == {"n": 5}


@pytest.mark.parametrize(
    "stored",
    [{"n": "5"}, {"n": True}, {"n": {"x": 1}}, {"n": [1]}],
    ids=["string", "boolean", "object", "array"],
)
def test_increment_of_a_non_number_raises_and_writes_nothing(
    store: AtomicStore, stored: dict
) -> None:
    store.put("t", "k", stored)
    store.put("t", "other", {"n": 1})
    mutations = [
        {"field": "touched", "operation": "set", "value": True},
        {"field": "n", "operation": "increment", "value": 1},
    ]
    with pytest.raises(MutationError):
        store.atomic_update("t", "k", mutations=mutations)
    assert store.get("t", "k") == stored
    assert store.get("t", "other") == {"n": 1}


def test_set_through_a_non_object_raises_and_writes_nothing(store: AtomicStore) -> None:
    store.put("t", "k", {"a": "text"})
    with pytest.raises(MutationError):
        store.atomic_update(
            "t",
            "k",
            mutations=[
                {"field": "first", "operation": "set", "value": 1},
                {"field": "a.b", "operation": "set", "value": 1},
            ],
        )
    assert store.get("t", "k") == {"a": "text"}


def test_update_moves_the_row_in_record_order_but_not_creation_order(store: AtomicStore) -> None:
    for key in ["a", "b", "c"]:
        store.put("t", key, {"n": 0})
    store.atomic_update("t", "a", mutations=[{"field": "n", "operation": "increment", "value": 1}])
    assert [r["key"] for r in store.query("t", order_by="createdAt")] == ["a", "b", "c"]
    assert [r["key"] for r in store.query("t", order_by="recordTimestamp")] == ["b", "c", "a"]


def test_failed_guard_leaves_the_record_order_alone(store: AtomicStore) -> None:
    store.put("t", "a", {"tokens": 0})
    store.put("t", "b", {"tokens": 0})
    store.atomic_update("t", "a", where=TOKENS_LEFT, mutations=TAKE_ONE)
    assert [r["key"] for r in store.query("t", order_by="recordTimestamp")] == ["a", "b"]
