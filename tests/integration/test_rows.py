"""put / get / delete / query on both backends."""

from __future__ import annotations

import pytest

from airflow_atomic_store import AtomicStore, SpecError


def keys(rows: list[dict]) -> list[str]:
    return [row["key"] for row in rows]


def test_get_returns_what_put_stored(store: AtomicStore) -> None:
    value = {"s": "text", "i": 7, "f": 2.5, "b": True, "none": None, "list": [1, "a", {"x": []}]}
    store.put("things", "k1", value)
    assert store.get("things", "k1") == value


def test_get_keeps_integers_and_floats_apart(store: AtomicStore) -> None:
    store.put("things", "k", {"i": 1, "f": 1.0, "big": 9007199254740993, "neg": -0.5})
    got = store.get("things", "k")
    assert got is not None
    assert type(got["i"]) is int
    assert type(got["f"]) is float
    assert got["big"] == 9007199254740993
    assert type(got["big"]) is int
    assert got["neg"] == -0.5


def test_get_of_a_missing_row_is_none(store: AtomicStore) -> None:
    assert store.get("things", "nope") is None


def test_tables_are_separate_namespaces(store: AtomicStore) -> None:
    store.put("left", "same-key", {"side": "left"})
    store.put("right", "same-key", {"side": "right"})
    assert store.get("left", "same-key") == {"side": "left"}
    assert store.get("right", "same-key") == {"side": "right"}
    assert store.get("other", "same-key") is None


def test_put_replaces_the_whole_value(store: AtomicStore) -> None:
    store.put("things", "k", {"old": 1, "shared": "a"})
    store.put("things", "k", {"shared": "b"})
    assert store.get("things", "k") == {"shared": "b"}


def test_delete_reports_whether_a_row_was_removed(store: AtomicStore) -> None:
    store.put("things", "k", {"x": 1})
    store.put("things", "other", {"x": 2})
    assert store.delete("things", "k") is True
    assert store.get("things", "k") is None
    assert store.delete("things", "k") is False
    assert store.get("things", "other") == {"x": 2}


def test_query_orders_by_creation_ascending_by_default(store: AtomicStore) -> None:
    for key in ["c", "b", "a", "d"]:
        store.put("q", key, {"key": key})
    rows = store.query("q")
    assert keys(rows) == ["c", "b", "a", "d"]
    assert rows[0] == {"key": "c", "value": {"key": "c"}}


def test_query_descending_returns_newest_first(store: AtomicStore) -> None:
    for key in ["c", "b", "a", "d"]:
        store.put("q", key, {})
    assert keys(store.query("q", direction="desc")) == ["d", "a", "b", "c"]


def test_query_limit_keeps_the_first_rows_in_order(store: AtomicStore) -> None:
    for key in ["c", "b", "a", "d"]:
        store.put("q", key, {})
    assert keys(store.query("q", limit=2)) == ["c", "b"]
    assert keys(store.query("q", direction="desc", limit=1)) == ["d"]


def test_put_on_an_existing_row_keeps_its_creation_place_and_moves_its_record_place(
    store: AtomicStore,
) -> None:
    for key in ["c", "b", "a"]:
        store.put("q", key, {"v": 1})
    store.put("q", "c", {"v": 2})
    assert keys(store.query("q", order_by="createdAt")) == ["c", "b", "a"]
    assert keys(store.query("q", order_by="recordTimestamp")) == ["b", "a", "c"]
    assert keys(store.query("q", order_by="recordTimestamp", direction="desc")) == ["c", "a", "b"]


def test_delete_then_put_starts_a_new_creation_place(store: AtomicStore) -> None:
    for key in ["a", "b"]:
        store.put("q", key, {})
    store.delete("q", "a")
    store.put("q", "a", {})
    assert keys(store.query("q")) == ["b", "a"]


def test_query_where_filters_with_all_and_any(store: AtomicStore) -> None:
    store.put("q", "p1", {"status": "pending", "n": 1})
    store.put("q", "d1", {"status": "done", "n": 2})
    store.put("q", "p2", {"status": "pending", "n": 3})
    pending = [{"field": "status", "operator": "equals", "value": "pending"}]
    big = [{"field": "n", "operator": "gte", "value": 2}]
    assert keys(store.query("q", where=pending)) == ["p1", "p2"]
    assert keys(store.query("q", where=pending + big)) == ["p2"]
    assert keys(store.query("q", where=pending + big, match="any")) == ["p1", "d1", "p2"]
    assert keys(store.query("q", where=[])) == ["p1", "d1", "p2"]


def test_query_of_an_empty_table_is_an_empty_list(store: AtomicStore) -> None:
    assert store.query("nothing-here") == []


def test_query_rejects_a_bad_order_before_touching_the_store(store: AtomicStore) -> None:
    with pytest.raises(SpecError):
        store.query("q", order_by="priority")
    with pytest.raises(SpecError):
        store.query("q", direction="sideways")
