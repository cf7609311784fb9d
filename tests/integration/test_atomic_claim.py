"""atomic_claim: take up to `limit` matching rows and mark them in the same step."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from airflow_atomic_store import AtomicStore, MutationError
from tests.support.physical import give_all_rows_the_same_timestamps
from tests.support.specs import PENDING

CANONICAL = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


def enqueue(store: AtomicStore, table: str, keys: list[str], **extra: object) -> None:
    for key in keys:
        store.put(table, key, {"status": "pending", "payload": key, **extra})


def claimed_keys(result: dict) -> list[str]:
    return [row["key"] for row in result["claimed"]]


def test_claim_marks_rows_in_flight_with_time_and_execution_id(store: AtomicStore) -> None:
    enqueue(store, "ops", ["a", "b"])
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    result = store.atomic_claim("ops", where=PENDING, execution_id="dag/run_1")
    after = datetime.now(timezone.utc) + timedelta(seconds=1)
    assert result["count"] == 2
    for row in result["claimed"]:
        value = row["value"]
        assert value["status"] == "in_flight"
        assert value["claimedBy"] == "dag/run_1"
        assert value["payload"] == row["key"]
        assert CANONICAL.match(value["claimedAt"]), value["claimedAt"]
        moment = datetime.strptime(value["claimedAt"], "%Y-%m-%dT%H:%M:%S.%fZ")
        assert before <= moment.replace(tzinfo=timezone.utc) <= after
        assert store.get("ops", row["key"]) == value


def test_claim_without_execution_id_uses_one_fresh_id_per_call(store: AtomicStore) -> None:
    enqueue(store, "ops", ["a", "b", "c", "d"])
    first = store.atomic_claim("ops", where=PENDING, limit=2)
    second = store.atomic_claim("ops", where=PENDING, limit=2)
    first_ids = {row["value"]["claimedBy"] for row in first["claimed"]}
    second_ids = {row["value"]["claimedBy"] for row in second["claimed"]}
    assert len(first_ids) == 1
    assert len(second_ids) == 1
    assert first_ids != second_ids
    (claimer,) = first_ids
    assert isinstance(claimer, str)
    assert claimer


def test_claim_is_fifo_by_default(store: AtomicStore) -> None:
    enqueue(store, "ops", ["e", "d", "c", "b", "a"])
    assert claimed_keys(store.atomic_claim("ops", where=PENDING, limit=2)) == ["e", "d"]
    assert claimed_keys(store.atomic_claim("ops", where=PENDING, limit=2)) == ["c", "b"]
    assert claimed_keys(store.atomic_claim("ops", where=PENDING, limit=2)) == ["a"]
    assert store.atomic_claim("ops", where=PENDING, limit=2) == {"claimed": [], "count": 0}


def test_claim_descending_takes_the_newest_first(store: AtomicStore) -> None:
    enqueue(store, "ops", ["e", "d", "c", "b", "a"])
    result = store.atomic_claim("ops", where=PENDING, direction="desc", limit=3)
    assert claimed_keys(result) == ["a", "b", "c"]


def test_claim_by_record_timestamp_follows_the_latest_write(store: AtomicStore) -> None:
    enqueue(store, "ops", ["a", "b", "c"])
    store.put("ops", "a", {"status": "pending", "payload": "again"})
    result = store.atomic_claim("ops", where=PENDING, order_by="recordTimestamp", limit=10)
    assert claimed_keys(result) == ["b", "c", "a"]


def test_claim_limit_caps_the_batch(store: AtomicStore) -> None:
    enqueue(store, "ops", [f"k{i:02d}" for i in range(30)])
    result = store.atomic_claim("ops", where=PENDING)
    assert result["count"] == 10
    assert claimed_keys(result) == [f"k{i:02d}" for i in range(10)]
    result = store.atomic_claim("ops", where=PENDING, limit=1000)
    assert result["count"] == 20


def test_claim_breaks_timestamp_ties_by_key_in_the_claim_direction(
    store: AtomicStore, store_url: str
) -> None:
    enqueue(store, "ops", ["m", "z", "a", "k"])
    give_all_rows_the_same_timestamps(store_url, "ops")
    assert claimed_keys(store.atomic_claim("ops", where=PENDING, limit=3)) == ["a", "k", "m"]
    enqueue(store, "ops2", ["m", "z", "a", "k"])
    give_all_rows_the_same_timestamps(store_url, "ops2")
    result = store.atomic_claim("ops2", where=PENDING, direction="desc", limit=3)
    assert claimed_keys(result) == ["z", "m", "k"]


def test_claim_only_takes_rows_matching_the_filter(store: AtomicStore) -> None:
    store.put("ops", "p1", {"status": "pending", "kind": "email"})
    store.put("ops", "done", {"status": "done", "kind": "email"})
    store.put("ops", "p2", {"status": "pending", "kind": "sms"})
    store.put("ops", "p3", {"status": "pending", "kind": "email"})
    where = [*PENDING, {"field": "kind", "operator": "equals", "value": "email"}]
    assert claimed_keys(store.atomic_claim("ops", where=where)) == ["p1", "p3"]
    assert store.get("ops", "done") == {"status": "done", "kind": "email"}
    assert store.get("ops", "p2") == {"status": "pending", "kind": "sms"}


def test_claim_without_filter_takes_any_row(store: AtomicStore) -> None:
    store.put("ops", "x", {"status": "done"})
    store.put("ops", "y", {})
    result = store.atomic_claim("ops", execution_id="e")
    assert claimed_keys(result) == ["x", "y"]
    assert all(row["value"]["status"] == "in_flight" for row in result["claimed"])


def test_claim_with_custom_mutations_applies_only_those(store: AtomicStore) -> None:
    enqueue(store, "ops", ["a"], attempts=1)
    mutations = [
        {"field": "status", "operation": "set", "value": "taken"},
        {"field": "attempts", "operation": "increment", "value": 1},
    ]
    result = store.atomic_claim("ops", where=PENDING, mutations=mutations)
    expected = {"status": "taken", "payload": "a", "attempts": 2}
    assert result == {"claimed": [{"key": "a", "value": expected}], "count": 1}
    assert store.get("ops", "a") == expected


def test_claim_return_fields_trims_values_but_not_rows(store: AtomicStore) -> None:
    enqueue(store, "ops", ["a", "b"])
    result = store.atomic_claim("ops", where=PENDING, return_fields=["payload", "status"])
    assert result == {
        "claimed": [
            {"key": "a", "value": {"payload": "a", "status": "in_flight"}},
            {"key": "b", "value": {"payload": "b", "status": "in_flight"}},
        ],
        "count": 2,
    }
    stored = store.get("ops", "a")
    assert stored is not None
    assert set(stored) == {"status", "payload", "claimedAt", "claimedBy"}


def test_claim_of_an_empty_or_fully_claimed_queue_returns_nothing(store: AtomicStore) -> None:
    assert store.atomic_claim("ops", where=PENDING) == {"claimed": [], "count": 0}
    enqueue(store, "ops", ["a"])
    store.atomic_claim("ops", where=PENDING)
    assert store.atomic_claim("ops", where=PENDING) == {"claimed": [], "count": 0}


def test_stale_claims_can_be_reclaimed_with_a_timestamp_filter(store: AtomicStore) -> None:
    store.put("ops", "old", {"status": "in_flight", "claimedAt": "2020-01-01T00:00:00.000000Z"})
    store.put("ops", "new", {"status": "in_flight", "claimedAt": "2999-01-01T00:00:00.000000Z"})
    threshold = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    where = [
        {"field": "status", "operator": "equals", "value": "in_flight"},
        {"field": "claimedAt", "operator": "lt", "value": threshold},
    ]
    result = store.atomic_claim("ops", where=where, execution_id="recovery")
    assert claimed_keys(result) == ["old"]
    assert result["claimed"][0]["value"]["claimedAt"] >= threshold


def test_claim_that_cannot_mutate_one_row_claims_none(store: AtomicStore) -> None:
    store.put("ops", "a", {"status": "pending", "attempts": 0})
    store.put("ops", "b", {"status": "pending", "attempts": "zero"})
    store.put("ops", "c", {"status": "pending", "attempts": 0})
    mutations = [
        {"field": "status", "operation": "set", "value": "in_flight"},
        {"field": "attempts", "operation": "increment", "value": 1},
    ]
    with pytest.raises(MutationError):
        store.atomic_claim("ops", where=PENDING, mutations=mutations)
    assert store.get("ops", "a") == {"status": "pending", "attempts": 0}
    assert store.get("ops", "b") == {"status": "pending", "attempts": "zero"}
    assert store.get("ops", "c") == {"status": "pending", "attempts": 0}
