"""``mode="delete"``: a claim that removes its rows in the claiming statement."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from airflow_atomic_store import AtomicStore, SpecError
from devkit.processes import run_in_processes
from tests.support import claim_modes
from tests.support.specs import PENDING


def _enqueue(store: AtomicStore, table: str, count: int) -> list[str]:
    keys = [f"job-{number:03d}" for number in range(count)]
    for key in keys:
        store.put(table, key, {"status": "pending", "payload": key})
        time.sleep(0.001)  # distinct created_at: FIFO is the insertion order
    return keys


def test_a_delete_claim_returns_rows_in_claim_order_with_their_last_value_and_removes_them(
    store: AtomicStore,
) -> None:
    keys = _enqueue(store, "q", 5)
    store.put("q", "done", {"status": "done"})
    result = store.atomic_claim("q", where=PENDING, limit=3, mode="delete")
    assert [row["key"] for row in result["claimed"]] == keys[:3]
    assert result["claimed"][0]["value"] == {"status": "pending", "payload": keys[0]}
    assert result["count"] == 3
    assert [row["key"] for row in store.query("q")] == [*keys[3:], "done"]
    newest_first = store.atomic_claim("q", where=PENDING, direction="desc", mode="delete")
    assert [row["key"] for row in newest_first["claimed"]] == keys[:2:-1]
    assert store.atomic_claim("q", where=PENDING, mode="delete") == {"claimed": [], "count": 0}
    assert store.get("q", "done") == {"status": "done"}


def test_a_delete_claim_ordered_by_record_timestamp_takes_the_least_recently_written(
    store: AtomicStore,
) -> None:
    keys = _enqueue(store, "q", 3)
    store.put("q", keys[0], {"status": "pending", "payload": "rewritten"})
    result = store.atomic_claim(
        "q", where=PENDING, order_by="recordTimestamp", limit=3, mode="delete"
    )
    assert [row["key"] for row in result["claimed"]] == [keys[1], keys[2], keys[0]]
    assert result["claimed"][2]["value"]["payload"] == "rewritten"


def test_return_fields_keep_only_the_named_fields_of_deleted_rows(store: AtomicStore) -> None:
    _enqueue(store, "q", 1)
    result = store.atomic_claim("q", mode="delete", return_fields=["payload"])
    assert result["claimed"] == [{"key": "job-000", "value": {"payload": "job-000"}}]


def test_a_keyed_delete_claim_replays_the_deleted_batch(store: AtomicStore) -> None:
    keys = _enqueue(store, "q", 4)
    first = store.atomic_claim("q", where=PENDING, limit=2, mode="delete", idempotency_key="d1")
    again = store.atomic_claim("q", where=PENDING, limit=2, mode="delete", idempotency_key="d1")
    assert [row["key"] for row in first["claimed"]] == keys[:2]
    assert again == {**first, "replayed": True}
    assert first["replayed"] is False
    assert [row["key"] for row in store.query("q")] == keys[2:]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        (
            {"mode": "delete", "mutations": [{"field": "a", "operation": "set", "value": 1}]},
            "mutations",
        ),
        ({"mode": "remove"}, "mode"),
        ({"mode": None}, "mode"),
    ],
)
def test_a_bad_claim_mode_is_a_spec_error_before_any_write(
    store: AtomicStore, arguments: dict[str, object], field: str
) -> None:
    _enqueue(store, "q", 1)
    with pytest.raises(SpecError) as raised:
        store.atomic_claim("q", **arguments)  # type: ignore[arg-type]
    assert raised.value.field == field
    assert store.count("q", where=PENDING) == 1


def test_a_declared_claimable_set_serves_delete_claims(store_url: str) -> None:
    with AtomicStore(store_url) as store:
        for number in range(1_500):  # a history of consumed rows beneath the queue
            store.put("q", f"old-{number:04d}", {"status": "done"})
        keys = _enqueue(store, "q", 5)
        name = store.ensure_claim_index(table="q", where=PENDING)
        if store_url.startswith("postgresql"):  # statistics as autovacuum would leave them
            with store._backend._cursor() as cursor:  # type: ignore[attr-defined]
                cursor.execute("ANALYZE atomic_store_rows")
        assert name in store.explain_claim("q", where=PENDING, limit=2)
        assert name in store.explain_claim("q", where=PENDING, limit=2, generic=True)
        result = store.atomic_claim("q", where=PENDING, limit=2, mode="delete")
        assert [row["key"] for row in result["claimed"]] == keys[:2]
        assert store.count("q", where=PENDING) == 3


@pytest.mark.parametrize(
    "modes", [["delete"] * 16, ["delete", "mark"] * 8], ids=["delete", "mixed"]
)
def test_sixteen_processes_delete_claiming_never_get_one_row_twice_and_lose_none(
    store: AtomicStore, store_url: str, modes: list[str]
) -> None:
    keys = [f"op-{number:05d}" for number in range(3_000)]
    for key in keys:
        store.put("q", key, {"status": "pending"})
    won = run_in_processes(
        claim_modes.drain_in_mode,
        [(store_url, "q", 10, mode) for mode in modes],
        timeout=300,
    )
    claims = Counter(key for batch in won for key in batch)
    assert [key for key, times in claims.items() if times > 1] == []
    assert set(claims) == set(keys)
    deleted = {
        key for batch, mode in zip(won, modes, strict=True) if mode == "delete" for key in batch
    }
    assert deleted and all(store.get("q", key) is None for key in deleted)
    marked = set(keys) - deleted
    assert all(store.get("q", key)["status"] == "in_flight" for key in marked)  # type: ignore[index]
