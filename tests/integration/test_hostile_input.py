"""Keys, table names and values are data: hostile text round-trips and touches nothing else."""

from __future__ import annotations

import pytest

from airflow_atomic_store import AtomicStore

HOSTILE = [
    "it's",
    'say "hi"',
    "semi;colon",
    "back\\slash",
    "\\",
    "\\'",
    "'\\",
    "%s",
    "%(name)s",
    "%",
    "_",
    "?",
    "$1",
    ":name",
    "x'); DROP TABLE atomic_store_rows; --",
    '"; DELETE FROM atomic_store_rows; --',
    "' OR '1'='1",
    "日本語のキー",
    "ключ",
    "🙂🚀",
    "e\u0301",
    "tab\there",
    "new\nline",
    " padded ",
    "a.b[0]",
    "$.a",
    "{}",
    "null",
    "x" * 500,
]
IDS = [f"hostile-{i:02d}" for i in range(len(HOSTILE))]

SENTINEL = ("sentinel", "row", {"untouched": True})


@pytest.fixture
def guarded_store(store: AtomicStore) -> AtomicStore:
    store.put(*SENTINEL)
    store.put("plain", "neighbour", {"n": 0})
    return store


def assert_nothing_else_changed(store: AtomicStore) -> None:
    table, key, value = SENTINEL
    assert store.query(table) == [{"key": key, "value": value}]
    assert store.query("plain") == [{"key": "neighbour", "value": {"n": 0}}]


@pytest.mark.parametrize("text", HOSTILE, ids=IDS)
def test_hostile_key_round_trips_through_every_primitive(
    guarded_store: AtomicStore, text: str
) -> None:
    store = guarded_store
    store.put("plain", text, {"status": "pending", "name": text})
    assert store.get("plain", text) == {"status": "pending", "name": text}

    upserted = store.atomic_upsert(
        "plain",
        text,
        insert_value={},
        mutations=[{"field": "n", "operation": "increment", "value": 1}],
    )
    assert upserted == {
        "inserted": False,
        "value": {"status": "pending", "name": text, "n": 1},
        "key": text,
    }

    updated = store.atomic_update(
        "plain",
        text,
        where=[{"field": "name", "operator": "equals", "value": text}],
        mutations=[{"field": "name", "operation": "set", "value": text + text}],
    )
    assert updated == {
        "updated": True,
        "value": {"status": "pending", "name": text + text, "n": 1},
        "key": text,
    }

    claimed = store.atomic_claim(
        "plain",
        where=[{"field": "status", "operator": "equals", "value": "pending"}],
        execution_id=text,
    )
    assert [row["key"] for row in claimed["claimed"]] == [text]
    assert claimed["claimed"][0]["value"]["claimedBy"] == text

    assert [row["key"] for row in store.query("plain")] == ["neighbour", text]
    assert store.delete("plain", text) is True
    assert_nothing_else_changed(store)


@pytest.mark.parametrize("text", HOSTILE, ids=IDS)
def test_hostile_table_name_is_its_own_table(guarded_store: AtomicStore, text: str) -> None:
    store = guarded_store
    inserted = store.atomic_upsert(text, "k", insert_value={"table": text})
    assert inserted == {"inserted": True, "value": {"table": text}, "key": "k"}
    store.put(text, "other", {"status": "pending"})
    assert store.get(text, "k") == {"table": text}
    updated = store.atomic_update(
        text, "k", mutations=[{"field": "seen", "operation": "increment", "value": 1}]
    )
    assert updated["value"] == {"table": text, "seen": 1}
    claimed = store.atomic_claim(text, where=[{"field": "status", "operator": "exists"}])
    assert [row["key"] for row in claimed["claimed"]] == ["other"]
    assert [row["key"] for row in store.query(text)] == ["k", "other"]
    assert_nothing_else_changed(store)


@pytest.mark.parametrize("text", HOSTILE, ids=IDS)
def test_hostile_text_in_values_and_filters_is_compared_literally(
    guarded_store: AtomicStore, text: str
) -> None:
    store = guarded_store
    store.put("values", "match", {"s": text, "deep": {"list": [text]}})
    store.put("values", "decoy", {"s": text + "!", "deep": {"list": ["!" + text]}})
    for operator, field, expected in [
        ("equals", "s", ["match"]),
        ("starts_with", "s", ["match", "decoy"]),
        ("ends_with", "s", ["match"]),
        ("contains", "s", ["match", "decoy"]),
        ("contains", "deep.list", ["match"]),
        ("in", "s", ["match"]),
    ]:
        value = [text] if operator == "in" else text
        where = [{"field": field, "operator": operator, "value": value}]
        found = [row["key"] for row in store.query("values", where=where)]
        assert found == expected, (operator, field)
    assert_nothing_else_changed(store)
