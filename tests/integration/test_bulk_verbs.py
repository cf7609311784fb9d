"""Many rows per call: ``atomic_upsert_many`` (enqueue many) and ``atomic_update_many``
(finish a batch), with the one-row verbs' guarantees, on both backends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore, IdempotencyKeyError, MutationError, SpecError
from airflow_atomic_store.spec.options import BULK_LIMIT
from tests.support.specs import INCREMENT, PENDING, SET_DONE
from tests.support.store_dump import dump_store

PENDING_ROW = {"status": "pending"}


def items(*keys: str, value: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [{"key": key, "insert_value": value or {"status": "pending", "n": 0}} for key in keys]


def mine(owner: str) -> list[dict[str, Any]]:
    return [{"field": "claimedBy", "operator": "equals", "value": owner}]


# -- atomic_upsert_many --------------------------------------------------------------------


def test_upsert_many_inserts_the_missing_rows_and_leaves_the_others(store: AtomicStore) -> None:
    store.put("q", "b", {"status": "in_flight", "claimedBy": "run-1"})
    result = store.atomic_upsert_many("q", items("a", "b", "c"))
    assert result == {
        "items": [
            {"key": "a", "inserted": True},
            {"key": "b", "inserted": False},
            {"key": "c", "inserted": True},
        ],
        "inserted": 2,
    }
    assert store.get("q", "b") == {"status": "in_flight", "claimedBy": "run-1"}
    assert store.get("q", "a") == {"status": "pending", "n": 0}


def test_upsert_many_repeated_by_a_producer_adds_nothing_twice(store: AtomicStore) -> None:
    first = store.atomic_upsert_many("q", items("a", "b"))
    store.atomic_claim("q", where=PENDING, limit=1, execution_id="run-1")
    again = store.atomic_upsert_many("q", items("a", "b"))
    assert first["inserted"] == 2
    assert again["inserted"] == 0
    assert [row["value"]["status"] for row in store.query("q")] == ["in_flight", "pending"]


def test_upsert_many_rows_are_claimed_in_the_order_given(store: AtomicStore) -> None:
    given = ["zulu", "alpha", "mike", "bravo"]
    store.atomic_upsert_many("q", items(*given))
    claimed = store.atomic_claim("q", where=PENDING, limit=10)["claimed"]
    assert [row["key"] for row in claimed] == given


def test_upsert_many_takes_items_as_lists_too(store: AtomicStore) -> None:
    result = store.atomic_upsert_many("q", [("a", {"n": 1}), ["b", {"n": 2}, INCREMENT]])
    assert result["inserted"] == 2
    assert store.get("q", "b") == {"n": 2}


def test_upsert_many_applies_each_items_mutations_where_its_row_exists(
    store: AtomicStore,
) -> None:
    store.put("counters", "a", {"n": 10})
    store.put("counters", "c", {"n": 1, "note": "kept"})
    result = store.atomic_upsert_many(
        "counters",
        [
            {"key": "a", "insert_value": {"n": 0}, "mutations": INCREMENT},
            {"key": "b", "insert_value": {"n": 0}, "mutations": INCREMENT},
            {"key": "c", "insert_value": {"n": 0}},  # a seed: left alone
            {
                "key": "d",
                "insert_value": {"n": 5},
                "mutations": [{"field": "x.y", "operation": "set", "value": 1}],
            },
        ],
    )
    assert [item["inserted"] for item in result["items"]] == [False, True, False, True]
    assert store.get("counters", "a") == {"n": 11}
    assert store.get("counters", "b") == {"n": 0}
    assert store.get("counters", "c") == {"n": 1, "note": "kept"}
    assert store.get("counters", "d") == {"n": 5}


def test_upsert_many_stores_values_as_the_one_row_upsert_does(store: AtomicStore) -> None:
    value = {"f": 0.1, "big": 1e16, "i": 2**62, "nested": [{"ü": "ß"}, None, True], "e": {}}
    store.atomic_upsert("one", "k", insert_value=value)
    store.atomic_upsert_many("many", [("k", value)])
    assert store.get("many", "k") == store.get("one", "k") == value
    same_types = store.get("many", "k")
    assert isinstance(same_types["big"], float) and isinstance(same_types["i"], int)


def test_upsert_many_mutation_that_cannot_apply_writes_nothing(
    store: AtomicStore, store_url: str
) -> None:
    store.put("counters", "text", {"n": "many"})
    before = dump_store(store_url)
    with pytest.raises(MutationError):
        store.atomic_upsert_many(
            "counters",
            [
                {"key": "new", "insert_value": {"n": 0}},
                {"key": "text", "insert_value": {"n": 0}, "mutations": INCREMENT},
            ],
        )
    assert dump_store(store_url) == before


def test_upsert_many_with_a_key_replays_its_first_result(store: AtomicStore) -> None:
    first = store.atomic_upsert_many("q", items("a", "b"), idempotency_key="enqueue-1")
    store.delete("q", "a")
    again = store.atomic_upsert_many("q", items("b", "a"), idempotency_key="enqueue-1")
    assert first == {
        "items": [{"key": "a", "inserted": True}, {"key": "b", "inserted": True}],
        "inserted": 2,
        "replayed": False,
    }
    assert again == {
        "items": [{"key": "b", "inserted": True}, {"key": "a", "inserted": True}],
        "inserted": 2,
        "replayed": True,
    }
    assert store.get("q", "a") is None  # the replay applied nothing


@pytest.mark.parametrize(
    "reuse",
    [
        lambda s: s.atomic_upsert_many("q", items("a", "c"), idempotency_key="k"),
        lambda s: s.atomic_upsert_many("other", items("a", "b"), idempotency_key="k"),
        lambda s: s.atomic_update_many("q", ["a", "b"], mutations=SET_DONE, idempotency_key="k"),
        lambda s: s.atomic_upsert("q", "a", insert_value={}, idempotency_key="k"),
    ],
    ids=["other-keys", "other-table", "other-verb", "one-row-verb"],
)
def test_a_bulk_key_reused_for_another_call_is_an_error_and_writes_nothing(
    store: AtomicStore, store_url: str, reuse: Callable[[AtomicStore], Any]
) -> None:
    store.atomic_upsert_many("q", items("a", "b"), idempotency_key="k")
    before = rows_and_receipts(store_url)
    with pytest.raises(IdempotencyKeyError):
        reuse(store)
    assert rows_and_receipts(store_url) == before


def rows_and_receipts(url: str) -> dict[str, list[Any]]:
    """The store's dump but PostgreSQL's tables catalog and its id sequence, where a call
    names its table before its statement runs (as the one-row verbs do): a name, not a row."""
    return {
        name: rows
        for name, rows in dump_store(url).items()
        if not name.endswith(("_tables", "_table_ids"))
    }


def test_an_empty_list_is_an_empty_result(store: AtomicStore) -> None:
    assert store.atomic_upsert_many("q", []) == {"items": [], "inserted": 0}
    assert store.atomic_update_many("q", [], mutations=SET_DONE) == {"items": [], "updated": 0}


# -- atomic_update_many ---------------------------------------------------------------------


def test_update_many_applies_only_where_each_rows_guard_holds(store: AtomicStore) -> None:
    store.put("q", "mine-1", {"status": "in_flight", "claimedBy": "me"})
    store.put("q", "theirs", {"status": "in_flight", "claimedBy": "them"})
    store.put("q", "mine-2", {"status": "in_flight", "claimedBy": "me"})
    result = store.atomic_update_many(
        "q", ["mine-1", "theirs", "gone", "mine-2"], where=mine("me"), mutations=SET_DONE
    )
    assert result == {
        "items": [
            {"key": "mine-1", "updated": True},
            {"key": "theirs", "updated": False},
            {"key": "gone", "updated": False},
            {"key": "mine-2", "updated": True},
        ],
        "updated": 2,
    }
    assert store.get("q", "theirs") == {"status": "in_flight", "claimedBy": "them"}
    assert store.get("q", "mine-2") == {"status": "done", "claimedBy": "me"}
    assert store.get("q", "gone") is None  # never creates a row


def test_update_many_applies_mutations_to_each_row_on_its_own(store: AtomicStore) -> None:
    store.put("counters", "a", {"n": 1})
    store.put("counters", "b", {"n": 41})
    store.put("counters", "c", {})
    store.atomic_update_many(
        "counters",
        ["a", "b", "c"],
        mutations=[*INCREMENT, {"field": "seen.by", "operation": "set", "value": "x"}],
    )
    assert [row["value"] for row in store.query("counters")] == [
        {"n": 2, "seen": {"by": "x"}},
        {"n": 42, "seen": {"by": "x"}},
        {"n": 1, "seen": {"by": "x"}},
    ]


def test_update_many_mutation_that_cannot_apply_writes_nothing(
    store: AtomicStore, store_url: str
) -> None:
    store.put("counters", "a", {"n": 1})
    store.put("counters", "b", {"n": "many"})
    before = dump_store(store_url)
    with pytest.raises(MutationError):
        store.atomic_update_many("counters", ["a", "b"], mutations=INCREMENT)
    assert dump_store(store_url) == before


def test_update_many_with_an_archive_moves_the_finished_rows_with_their_new_value(
    store: AtomicStore,
) -> None:
    for key, owner in (("a", "me"), ("b", "them"), ("c", "me")):
        store.put("q", key, {"status": "in_flight", "claimedBy": owner})
    store.put("q_archive", "c", {"stale": True})
    result = store.atomic_update_many(
        "q",
        ["a", "b", "c"],
        where=mine("me"),
        mutations=[*SET_DONE, {"field": "finishedAt", "operation": "set", "value": "t1"}],
        archive_table="q_archive",
    )
    assert [item["updated"] for item in result["items"]] == [True, False, True]
    assert [row["key"] for row in store.query("q")] == ["b"]
    done = {"status": "done", "claimedBy": "me", "finishedAt": "t1"}
    assert store.get("q_archive", "a") == done
    assert store.get("q_archive", "c") == done  # replaced, as retire's archive does


def test_update_many_with_a_key_replays_its_first_result(store: AtomicStore) -> None:
    store.put("q", "a", {"status": "in_flight", "claimedBy": "me", "n": 0})
    store.put("q", "b", {"status": "in_flight", "claimedBy": "them", "n": 0})
    first = store.atomic_update_many(
        "q", ["a", "b"], where=mine("me"), mutations=INCREMENT, idempotency_key="finish-1"
    )
    store.put("q", "b", {"status": "in_flight", "claimedBy": "me", "n": 0})
    again = store.atomic_update_many(
        "q", ["a", "b"], where=mine("me"), mutations=INCREMENT, idempotency_key="finish-1"
    )
    assert (
        first["items"]
        == again["items"]
        == [
            {"key": "a", "updated": True},
            {"key": "b", "updated": False},
        ]
    )
    assert (first["replayed"], again["replayed"]) == (False, True)
    assert store.get("q", "a")["n"] == 1 and store.get("q", "b")["n"] == 0


def test_update_many_refuses_its_own_table_as_archive(store: AtomicStore) -> None:
    with pytest.raises(SpecError) as raised:
        store.atomic_update_many("q", ["a"], mutations=SET_DONE, archive_table="q")
    assert raised.value.field == "archive_table"


# -- bad input: a typed error naming the item, before any write ---------------------------------

BAD_CALLS: dict[str, tuple[str, Callable[[AtomicStore], Any]]] = {
    "not-a-list": ("items", lambda s: s.atomic_upsert_many("q", {"key": "a"})),
    "item-not-an-object": ("items[1]", lambda s: s.atomic_upsert_many("q", [*items("a"), 7])),
    "item-unknown-key": (
        "items[0]",
        lambda s: s.atomic_upsert_many("q", [{"key": "a", "insert_value": {}, "valu": 1}]),
    ),
    "item-without-value": ("items[0]", lambda s: s.atomic_upsert_many("q", [{"key": "a"}])),
    "value-not-an-object": (
        "items[2].insert_value",
        lambda s: s.atomic_upsert_many("q", [*items("a", "b"), ("c", [1, 2])]),
    ),
    "value-not-json": (
        "items[1].insert_value.at",
        lambda s: s.atomic_upsert_many("q", [*items("a"), ("b", {"at": {1, 2}})]),
    ),
    "nan-in-value": (
        "items[0].insert_value.x",
        lambda s: s.atomic_upsert_many("q", [("a", {"x": float("nan")})]),
    ),
    "empty-key": ("items[1].key", lambda s: s.atomic_upsert_many("q", [*items("a"), ("", {})])),
    "key-with-nul": ("items[0].key", lambda s: s.atomic_upsert_many("q", [("a\x00", {})])),
    "duplicate-key": ("items[2].key", lambda s: s.atomic_upsert_many("q", items("a", "b", "a"))),
    "bad-mutation": (
        "items[1].mutations[0].operation",
        lambda s: s.atomic_upsert_many(
            "q",
            [*items("a"), ("b", {}, [{"field": "n", "operation": "double", "value": 1}])],
        ),
    ),
    "too-many-items": (
        "items",
        lambda s: s.atomic_upsert_many("q", [(f"k{i}", {}) for i in range(BULK_LIMIT + 1)]),
    ),
    "keys-not-a-list": ("keys", lambda s: s.atomic_update_many("q", "abc", mutations=SET_DONE)),
    "bad-key": ("keys[1]", lambda s: s.atomic_update_many("q", ["a", None], mutations=SET_DONE)),
    "duplicate-keys": (
        "keys[1]",
        lambda s: s.atomic_update_many("q", ["a", "a"], mutations=SET_DONE),
    ),
    "too-many-keys": (
        "keys",
        lambda s: s.atomic_update_many(
            "q", [f"k{i}" for i in range(BULK_LIMIT + 1)], mutations=SET_DONE
        ),
    ),
    "no-mutations": ("mutations", lambda s: s.atomic_update_many("q", ["a"], mutations=[])),
    "bad-where": (
        "where[0].operator",
        lambda s: s.atomic_update_many(
            "q", ["a"], where=[{"field": "a", "operator": "is", "value": 1}], mutations=SET_DONE
        ),
    ),
}


@pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_bulk_input_fails_before_any_io_naming_the_item(
    unreachable_url: str, call: tuple[str, Callable[[AtomicStore], Any]]
) -> None:
    field, bad = call
    with AtomicStore(unreachable_url) as store, pytest.raises(SpecError) as raised:
        bad(store)
    assert raised.value.field == field


@pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_bulk_input_leaves_the_store_unchanged(
    store: AtomicStore, store_url: str, call: tuple[str, Callable[[AtomicStore], Any]]
) -> None:
    store.atomic_upsert_many("q", items("a", "b"), idempotency_key="earlier")
    before = dump_store(store_url)
    with pytest.raises(SpecError):
        call[1](store)
    assert dump_store(store_url) == before


def test_the_cap_is_items_per_call_and_a_full_call_is_accepted(store: AtomicStore) -> None:
    keys = [f"k{i:05d}" for i in range(BULK_LIMIT)]
    assert store.atomic_upsert_many("q", items(*keys))["inserted"] == BULK_LIMIT
    finished = store.atomic_update_many("q", keys, where=PENDING, mutations=SET_DONE)
    assert finished["updated"] == BULK_LIMIT
    with pytest.raises(SpecError, match="at most 10,000 per call"):
        store.atomic_upsert_many("q", items(*keys, "one-more"))
