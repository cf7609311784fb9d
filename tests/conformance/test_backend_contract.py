"""Each method of the ``Backend`` protocol does what the contract says, on every backend."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from airflow_atomic_store.exceptions import IdempotencyKeyError
from airflow_atomic_store.spec import parse_mutations, parse_ordering, parse_where
from airflow_atomic_store.spec.options import UpsertItem
from airflow_atomic_store.store.contract import (
    Backend,
    Backlog,
    ClaimRequest,
    Receipt,
    Selection,
    UpdatedMany,
    UpdateManyRequest,
    UpdateRequest,
    UpsertedMany,
    UpsertManyRequest,
    UpsertRequest,
)

FIFO = parse_ordering("createdAt", "asc")
LIFO = parse_ordering("createdAt", "desc")
PENDING = parse_where([{"field": "status", "operator": "equals", "value": "pending"}])
TAKE = parse_mutations([{"field": "status", "operation": "set", "value": "taken"}])
ADD_ONE = parse_mutations([{"field": "n", "operation": "increment", "value": 1}])


def _queue(backend: Backend, table: str, count: int) -> list[str]:
    keys = [f"job-{number:02d}" for number in range(count)]
    for key in keys:
        backend.put(table, key, {"status": "pending", "n": 0})
        time.sleep(0.002)  # distinct created_at, so FIFO order is the insertion order
    return keys


def _pending(table: str, limit: int, ordering: Any = FIFO) -> Selection:
    return Selection(table, PENDING, "all", ordering, limit)


def _receipt(key: str, primitive: Any, table: str, target: str = "") -> Receipt:
    return Receipt(key, primitive, table, target, retention=3600.0)


def test_put_get_delete_round_trip_and_put_replaces_the_whole_value(
    contract_backend: Backend,
) -> None:
    contract_backend.put("t", "k", {"a": 1, "b": {"c": [1, 2]}})
    assert contract_backend.get("t", "k") == {"a": 1, "b": {"c": [1, 2]}}
    contract_backend.put("t", "k", {"z": None})
    assert contract_backend.get("t", "k") == {"z": None}
    assert contract_backend.get("other", "k") is None
    assert contract_backend.delete("t", "k") is True
    assert contract_backend.delete("t", "k") is False
    assert contract_backend.get("t", "k") is None


def test_query_returns_the_matching_rows_in_the_selection_order_up_to_its_limit(
    contract_backend: Backend,
) -> None:
    keys = _queue(contract_backend, "q", 5)
    contract_backend.put("q", "done", {"status": "done"})
    assert [key for key, _ in contract_backend.query(_pending("q", 3))] == keys[:3]
    assert [key for key, _ in contract_backend.query(_pending("q", 10, LIFO))] == keys[::-1]
    assert contract_backend.query(_pending("nothing-written", 10)) == []


def test_count_is_capped_and_names_the_first_row_in_the_selection_order(
    contract_backend: Backend,
) -> None:
    keys = _queue(contract_backend, "q", 4)
    assert contract_backend.count(_pending("q", 1000)) == Backlog(4, keys[0])
    assert contract_backend.count(_pending("q", 2)) == Backlog(2, keys[0])
    assert contract_backend.count(_pending("q", 1000, LIFO)) == Backlog(4, keys[-1])
    assert contract_backend.count(_pending("empty", 1000)) == Backlog(0, None)


def test_update_applies_only_when_the_row_exists_and_the_guard_holds(
    contract_backend: Backend,
) -> None:
    contract_backend.put("t", "k", {"status": "pending", "n": 1})
    applied = contract_backend.update(UpdateRequest("t", "k", PENDING, "all", ADD_ONE))
    assert (applied.value, applied.replayed) == ({"status": "pending", "n": 2}, False)
    taken = contract_backend.update(UpdateRequest("t", "k", PENDING, "all", TAKE))
    assert taken.value == {"status": "taken", "n": 2}
    refused = contract_backend.update(UpdateRequest("t", "k", PENDING, "all", ADD_ONE))
    assert refused.value is None
    missing = contract_backend.update(UpdateRequest("t", "absent", (), "all", ADD_ONE))
    assert missing.value is None
    assert contract_backend.get("t", "absent") is None


def test_a_keyed_update_applies_once_and_replays_its_recorded_value(
    contract_backend: Backend,
) -> None:
    contract_backend.put("t", "k", {"n": 0})
    receipt = _receipt("u-1", "update", "t", "k")
    request = UpdateRequest("t", "k", (), "all", ADD_ONE, receipt)
    first, again = contract_backend.update(request), contract_backend.update(request)
    assert (first.value, first.replayed) == ({"n": 1}, False)
    assert (again.value, again.replayed) == ({"n": 1}, True)
    assert contract_backend.get("t", "k") == {"n": 1}
    contract_backend.put("t", "other", {"n": 0})
    reused = _receipt("u-1", "update", "t", "other")  # the same key for another row
    with pytest.raises(IdempotencyKeyError):
        contract_backend.update(UpdateRequest("t", "other", (), "all", ADD_ONE, reused))
    assert contract_backend.get("t", "other") == {"n": 0}


def test_claim_takes_up_to_the_limit_in_claim_order_and_marks_the_rows(
    contract_backend: Backend,
) -> None:
    keys = _queue(contract_backend, "q", 5)
    claimed = contract_backend.claim(ClaimRequest(_pending("q", 3), TAKE))
    assert [key for key, _ in claimed.rows] == keys[:3]
    assert all(value == {"status": "taken", "n": 0} for _, value in claimed.rows)
    assert not claimed.replayed
    rest = contract_backend.claim(ClaimRequest(_pending("q", 10, LIFO), TAKE))
    assert [key for key, _ in rest.rows] == keys[:2:-1]
    assert contract_backend.claim(ClaimRequest(_pending("q", 10), TAKE)).rows == []


def test_a_keyed_claim_replays_the_first_batch_and_claims_nothing_more(
    contract_backend: Backend,
) -> None:
    keys = _queue(contract_backend, "q", 4)
    request = ClaimRequest(_pending("q", 2), TAKE, _receipt("c-1", "claim", "q"))
    first, again = contract_backend.claim(request), contract_backend.claim(request)
    assert [key for key, _ in first.rows] == keys[:2]
    assert (again.rows, again.replayed) == (first.rows, True)
    assert contract_backend.count(_pending("q", 1000)).count == 2


def test_upsert_inserts_when_absent_and_mutates_or_seeds_when_present(
    contract_backend: Backend,
) -> None:
    inserted = contract_backend.upsert(UpsertRequest("t", "k", {"n": 5}, ADD_ONE))
    assert (inserted.inserted, inserted.value) == (True, {"n": 5})
    updated = contract_backend.upsert(UpsertRequest("t", "k", {"n": 5}, ADD_ONE))
    assert (updated.inserted, updated.value) == (False, {"n": 6})
    seeded = contract_backend.upsert(UpsertRequest("t", "k", {"n": 0}, ()))
    assert (seeded.inserted, seeded.value) == (False, {"n": 6})
    fresh = contract_backend.upsert(UpsertRequest("t", "new", {"n": 0}, ()))
    assert (fresh.inserted, fresh.value) == (True, {"n": 0})


def test_a_keyed_upsert_replays_which_branch_fired(contract_backend: Backend) -> None:
    request = UpsertRequest("t", "k", {"n": 1}, ADD_ONE, _receipt("s-1", "upsert", "t", "k"))
    first, again = contract_backend.upsert(request), contract_backend.upsert(request)
    assert (first.inserted, first.value, first.replayed) == (True, {"n": 1}, False)
    assert (again.inserted, again.value, again.replayed) == (True, {"n": 1}, True)
    assert contract_backend.get("t", "k") == {"n": 1}


def test_purge_removes_only_expired_receipts_in_bounded_batches(
    contract_backend: Backend,
) -> None:
    for number in range(3):
        receipt = Receipt(f"p-{number}", "upsert", "t", f"k{number}", retention=0.001)
        contract_backend.upsert(UpsertRequest("t", f"k{number}", {}, (), receipt))
    kept = Receipt("kept", "upsert", "t", "kept", retention=3600.0)
    contract_backend.upsert(UpsertRequest("t", "kept", {}, (), kept))
    time.sleep(0.05)
    assert contract_backend.purge_receipts(2) == 2
    assert contract_backend.purge_receipts(100) == 1
    assert contract_backend.purge_receipts(100) == 0


def test_explain_claim_returns_the_databases_plan_as_text(contract_backend: Backend) -> None:
    _queue(contract_backend, "q", 2)
    for generic in (False, True):
        plan = contract_backend.explain_claim(_pending("q", 10), generic=generic)
        assert isinstance(plan, str) and plan.strip()
    assert contract_backend.count(_pending("q", 1000)).count == 2  # explaining claims nothing


def test_get_many_reads_the_existing_rows_of_the_keys_in_one_call(
    contract_backend: Backend,
) -> None:
    assert contract_backend.get_many("q", ["a", "b"]) == {}  # nothing wrote "q" yet
    contract_backend.put("q", "a", {"n": 1})
    contract_backend.put("q", "c", {"n": 3})
    contract_backend.put("other", "b", {"n": 2})
    assert contract_backend.get_many("q", ["a", "b", "c", "d"]) == {"a": {"n": 1}, "c": {"n": 3}}
    assert contract_backend.get_many("q", []) == {}


def test_notifications_when_offered_read_as_the_backend_does(
    contract_backend: Backend, backend: str, store_url: str
) -> None:
    """The capability's reader (the waiters' shared connection) counts as the backend
    does, and reads the rows whose version moved since it last read them: a write moves
    it (even one that writes the same value), a delete answers no value."""
    notifications = contract_backend.notifications()
    if backend == "sqlite":
        assert notifications is None  # no notifications: its triggers poll
        return
    assert notifications is not None
    assert notifications.channel("q") != notifications.channel("r")
    keys = _queue(contract_backend, "q", 3)

    async def read() -> list[Any]:
        import psycopg

        reader = notifications.reader(psycopg.conninfo.conninfo_to_dict(store_url))
        try:
            counted = await reader.count(_pending("q", 1000))
            assert counted == contract_backend.count(_pending("q", 1000))
            seen: list[Any] = [counted]
            first = await reader.get_changed("q", {keys[0]: None, keys[1]: None, "nope": None})
            seen.append(first)
            versions = {key: version for key, (_, version) in first.items()}
            seen.append(await reader.get_changed("q", versions))  # nothing moved
            contract_backend.put("q", keys[0], {"status": "pending", "n": 0})  # the same value
            contract_backend.delete("q", keys[1])
            seen.append(await reader.get_changed("q", versions))
            return seen
        finally:
            await reader.close()

    counted, first, unchanged, moved = asyncio.run(read())
    assert counted == Backlog(3, keys[0])
    assert {key: value for key, (value, _) in first.items()} == {
        keys[0]: {"status": "pending", "n": 0},
        keys[1]: {"status": "pending", "n": 0},
    }
    assert unchanged == {}
    assert moved[keys[1]] == (None, None)
    assert moved[keys[0]][0] == {"status": "pending", "n": 0}
    assert moved[keys[0]][1] != first[keys[0]][1]


def test_snapshot_is_a_read_only_view_of_the_rows(contract_backend: Backend) -> None:
    _queue(contract_backend, "q", 2)
    contract_backend.put("q", "done", {"status": "done"})
    with contract_backend.snapshot() as snapshot:
        assert snapshot.table_counts() == [("q", 3)]
        assert sorted(snapshot.status_counts("q"), key=str) == [("done", 1), ("pending", 2)]
    assert contract_backend.count(_pending("q", 1000)).count == 2


def test_a_delete_claim_removes_its_rows_and_answers_their_last_values(
    contract_backend: Backend,
) -> None:
    keys = _queue(contract_backend, "q", 4)
    deleted = contract_backend.claim(ClaimRequest(_pending("q", 3), (), mode="delete"))
    assert [key for key, _ in deleted.rows] == keys[:3]
    assert all(value == {"status": "pending", "n": 0} for _, value in deleted.rows)
    assert all(contract_backend.get("q", key) is None for key in keys[:3])
    keyed = ClaimRequest(_pending("q", 3), (), _receipt("d-1", "claim", "q"), mode="delete")
    first, again = contract_backend.claim(keyed), contract_backend.claim(keyed)
    assert [key for key, _ in first.rows] == keys[3:]
    assert (again.rows, again.replayed) == (first.rows, True)


# -- many rows per call (issue 42) ---------------------------------------------------------


def test_upsert_many_inserts_the_absent_rows_mutates_the_present_and_answers_the_inserted(
    contract_backend: Backend,
) -> None:
    contract_backend.put("t", "b", {"n": 5})
    contract_backend.put("t", "c", {"n": 7})
    items = (
        UpsertItem("a", {"n": 0}, ADD_ONE),
        UpsertItem("b", {"n": 0}, ADD_ONE),
        UpsertItem("c", {"n": 0}),
    )
    done = contract_backend.upsert_many(UpsertManyRequest("t", items))
    assert done == UpsertedMany(frozenset({"a"}))
    assert [contract_backend.get("t", key) for key in "abc"] == [{"n": 0}, {"n": 6}, {"n": 7}]


def test_a_keyed_upsert_many_applies_once_and_replays_the_inserted_keys(
    contract_backend: Backend,
) -> None:
    receipt = Receipt("k", "upsert_many", "t", "2 keys", 3600.0)
    items = (UpsertItem("a", {"n": 0}, ADD_ONE), UpsertItem("b", {"n": 0}, ADD_ONE))
    first = contract_backend.upsert_many(UpsertManyRequest("t", items, receipt))
    again = contract_backend.upsert_many(UpsertManyRequest("t", items, receipt))
    assert (first, again) == (
        UpsertedMany(frozenset({"a", "b"})),
        UpsertedMany(frozenset({"a", "b"}), replayed=True),
    )
    assert contract_backend.get("t", "a") == {"n": 0}  # the replay applied nothing


def test_update_many_applies_where_each_rows_guard_holds_and_answers_those_keys(
    contract_backend: Backend,
) -> None:
    contract_backend.put("t", "a", {"status": "pending", "n": 0})
    contract_backend.put("t", "b", {"status": "taken", "n": 0})
    request = UpdateManyRequest("t", ("a", "b", "missing"), PENDING, "all", ADD_ONE)
    assert contract_backend.update_many(request) == UpdatedMany(frozenset({"a"}))
    assert contract_backend.get("t", "a") == {"status": "pending", "n": 1}
    assert contract_backend.get("t", "b") == {"status": "taken", "n": 0}
    assert contract_backend.get("t", "missing") is None


def test_update_many_with_an_archive_moves_the_updated_rows_there(
    contract_backend: Backend,
) -> None:
    contract_backend.put("t", "a", {"status": "pending"})
    contract_backend.put("t", "b", {"status": "taken"})
    request = UpdateManyRequest("t", ("a", "b"), PENDING, "all", TAKE, archive_table="t_old")
    assert contract_backend.update_many(request) == UpdatedMany(frozenset({"a"}))
    assert contract_backend.get("t", "a") is None
    assert contract_backend.get("t_old", "a") == {"status": "taken"}
    assert contract_backend.get("t", "b") == {"status": "taken"}


def test_a_keyed_update_many_replays_and_a_key_reused_elsewhere_is_refused(
    contract_backend: Backend,
) -> None:
    contract_backend.put("t", "a", {"n": 0})
    receipt = Receipt("k", "update_many", "t", "1 keys", 3600.0)
    request = UpdateManyRequest("t", ("a",), (), "all", ADD_ONE, receipt)
    assert contract_backend.update_many(request) == UpdatedMany(frozenset({"a"}))
    assert contract_backend.update_many(request) == UpdatedMany(frozenset({"a"}), replayed=True)
    assert contract_backend.get("t", "a") == {"n": 1}
    other = Receipt("k", "update_many", "other", "1 keys", 3600.0)
    with pytest.raises(IdempotencyKeyError):
        contract_backend.update_many(UpdateManyRequest("other", ("a",), (), "all", ADD_ONE, other))
