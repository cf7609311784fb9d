"""SQLite runs top-level ``set`` claims and updates as one ``json_set`` statement.

The statement must give what the Python path (reference ``apply``) gives: the
same stored JSON text, byte for byte, the same rows in the same claim order,
and the same idempotency receipts.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.spec import apply, parse_mutations
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store.sqlite import driver as sqlite_backend

#: Values SQLite must write back exactly when it re-serialises a row around a set.
AWKWARD = {
    "big_float": 1e16,
    "sum": 0.1 + 0.2,
    "negative_zero": -0.0,
    "tiny": 5e-324,
    "huge": 1.7976931348623157e308,
    "small": 1.5e-7,
    "max_int": 2**63 - 1,
    "min_int": -(2**63),
    "beyond_double": 2**53 + 1,
    "one_point_zero": 1.0,
    "unicode": "é ü 😀 \u2028\u2029 \u00a0",
    "escapes": 'q"t back\\slash \n\t\r\b\f \u0001 \u001f </script>',
    "nested": {"é": [1e16, -0.0, {'q"t': "\\"}], "empty": {}, "list": []},
    "flags": [True, False, None],
}

#: One set per JSON kind, on fields new to the row and already in it.
SETS = [
    {"field": "status", "operation": "set", "value": "in_flight"},
    {"field": "number", "operation": "set", "value": 1e16},
    {"field": "integer", "operation": "set", "value": 2**63 - 1},
    {"field": "flag", "operation": "set", "value": False},
    {"field": "nothing", "operation": "set", "value": None},
    {"field": "object", "operation": "set", "value": {"a": [0.1 + 0.2, "é\n"], "b": {}}},
    {"field": "array", "operation": "set", "value": [1, "two", None, [-0.0]]},
    {"field": "unicode", "operation": "set", "value": "replaced 😀"},
    {"field": "status", "operation": "set", "value": "set twice"},
]


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "store.db")


@pytest.fixture
def store(path: str) -> Iterator[AtomicStore]:
    with AtomicStore(f"sqlite:///{path}") as opened:
        yield opened


def stored_text(path: str, key: str) -> str:
    with sqlite3.connect(path) as connection:
        row = connection.execute("SELECT value FROM atomic_store_rows WHERE key = ?", (key,))
        text: str = row.fetchone()[0]
    connection.close()
    return text


def traced(store: AtomicStore) -> list[str]:
    """Every statement the store's connection runs from now on."""
    store.get("t", "open the connection")
    statements: list[str] = []
    store._backend.connection._connection.set_trace_callback(  # type: ignore[attr-defined]
        statements.append
    )
    return statements


def written(statements: list[str]) -> list[str]:
    """The statements but transaction control and the listing of claimable sets."""
    return [
        statement
        for statement in statements
        if statement.split(None, 1)[0] not in ("BEGIN", "COMMIT", "ROLLBACK")
        and "_claim_sets AS s" not in statement
    ]


def test_update_of_top_level_sets_stores_the_text_apply_gives(store, path):
    store.put("t", "row", AWKWARD)
    result = store.atomic_update("t", "row", mutations=SETS)
    expected = apply(parse_mutations(SETS), AWKWARD)
    assert stored_text(path, "row") == dumps(expected)
    assert repr(result["value"]) == repr(expected)
    assert repr(store.get("t", "row")) == repr(expected)


def test_claim_of_top_level_sets_stores_the_text_apply_gives(store, path):
    for key in ("a", "b"):
        store.put("t", key, AWKWARD)
    result = store.atomic_claim("t", mutations=SETS, limit=5)
    expected = apply(parse_mutations(SETS), AWKWARD)
    assert [row["key"] for row in result["claimed"]] == ["a", "b"]
    for row in result["claimed"]:
        assert repr(row["value"]) == repr(expected)
        assert stored_text(path, row["key"]) == dumps(expected)


def test_default_claim_is_one_update_statement(store):
    store.put("t", "a", {"status": "pending"})
    statements = traced(store)
    result = store.atomic_claim(
        "t", where=[{"field": "status", "operator": "eq", "value": "pending"}]
    )
    assert result["count"] == 1
    (statement,) = written(statements)
    assert statement.startswith("UPDATE atomic_store_rows SET value = json_set(value, '$.status'")
    assert "RETURNING" in statement
    assert "BEGIN IMMEDIATE" not in statements  # one statement is its own transaction


def test_a_keyed_claim_records_its_receipt_in_the_same_transaction(store):
    store.put("t", "a", {"status": "pending"})
    statements = traced(store)
    assert store.atomic_claim("t", idempotency_key="k")["count"] == 1
    claim = next(i for i, statement in enumerate(statements) if "json_set" in statement)
    start = claim - statements[claim::-1].index("BEGIN IMMEDIATE")
    body = statements[start + 1 : statements.index("COMMIT", start)]
    assert [statement.split(None, 1)[0] for statement in body] == ["SELECT", "UPDATE", "INSERT"]
    assert "_receipts" in body[0] and "json_set" in body[1] and "_receipts" in body[2]


def test_claim_through_a_claimable_set_is_one_update_statement_on_its_index(store):
    where = [{"field": "status", "operator": "equals", "value": "pending"}]
    store.ensure_claim_index(table="t", where=where)
    store.put("t", "a", {"status": "pending"})
    statements = traced(store)
    assert store.atomic_claim("t", where=where)["count"] == 1
    (statement,) = written(statements)
    assert statement.startswith("UPDATE") and "INDEXED BY atomic_store_rows_set_" in statement


def test_guarded_update_of_top_level_sets_is_one_update_statement(store):
    store.put("t", "a", {"status": "in_flight"})
    statements = traced(store)
    result = store.atomic_update(
        "t",
        "a",
        where=[{"field": "status", "operator": "equals", "value": "in_flight"}],
        mutations=[{"field": "status", "operation": "set", "value": "done"}],
    )
    assert result["value"] == {"status": "done"}
    (statement,) = written(statements)
    assert statement.startswith("UPDATE atomic_store_rows AS r SET value = json_set(")


@pytest.mark.parametrize(
    "mutations",
    [
        [{"field": "a.b", "operation": "set", "value": 1}],
        [{"field": "items[0]", "operation": "set", "value": 1}],
        [{"field": "n", "operation": "increment", "value": 1}],
        [{"field": "é", "operation": "set", "value": 1}],
        [{"field": "sp ace", "operation": "set", "value": 1}],
        [{"field": "1st", "operation": "set", "value": 1}],
        [
            {"field": "ok", "operation": "set", "value": 1},
            {"field": "a.b", "op": "set", "value": 2},
        ],
    ],
    ids=["nested", "index", "increment", "non-ascii", "space", "digit-first", "mixed"],
)
def test_other_mutations_keep_the_python_path(store, mutations):
    store.put("t", "a", {"items": [0], "a": {}})
    statements = traced(store)
    store.atomic_update("t", "a", mutations=mutations)
    kinds = [statement.split(None, 1)[0] for statement in written(statements)]
    assert kinds == ["SELECT", "UPDATE"]
    assert "json_set" not in written(statements)[-1]


KEYS = ["b", "a", "Z", "é", "😀", "a2", "c"]


def _load_queue(path: str) -> None:
    """Rows whose order columns tie, so the key breaks ties, with non-ASCII keys."""
    with AtomicStore(f"sqlite:///{path}") as store:
        for key in KEYS:
            store.put("q", key, {"status": "pending", "key": key, **AWKWARD})
        store.put("q", "done", {"status": "done"})
    with sqlite3.connect(path, isolation_level=None) as connection:
        for number, key in enumerate(KEYS):
            connection.execute(
                "UPDATE atomic_store_rows SET created_at = ?, record_timestamp = ? WHERE key = ?",
                (f"2026-01-0{number % 3 + 1}", f"2026-02-0{(number + 1) % 2 + 1}", key),
            )
    connection.close()


def _claims(path: str, order_by: str, direction: str) -> tuple[list[Any], list[str]]:
    with AtomicStore(f"sqlite:///{path}") as store:
        batches = [
            store.atomic_claim(
                "q",
                where=[{"field": "status", "operator": "equals", "value": "pending"}],
                mutations=SETS[:3],
                order_by=order_by,
                direction=direction,
                limit=3,
                idempotency_key=f"claim-{number}",
            )
            for number in range(4)
        ]
    with sqlite3.connect(path) as connection:
        receipts = [
            r for (r,) in connection.execute("SELECT result FROM atomic_store_rows_receipts")
        ]
    connection.close()
    return batches, sorted(receipts)


@pytest.mark.parametrize("order_by", ["createdAt", "recordTimestamp"])
@pytest.mark.parametrize("direction", ["asc", "desc"])
def test_claims_return_what_the_python_path_returns_in_its_order(
    tmp_path, monkeypatch, order_by, direction
):
    fast, reference = str(tmp_path / "fast.db"), str(tmp_path / "reference.db")
    _load_queue(fast)
    _load_queue(reference)
    fast_claims = _claims(fast, order_by, direction)
    monkeypatch.setattr(sqlite_backend, "plain_fields", lambda mutations: None)
    reference_claims = _claims(reference, order_by, direction)
    assert repr(fast_claims) == repr(reference_claims)
    batches, receipts = fast_claims
    assert sum(batch["count"] for batch in batches) == len(KEYS)
    assert len(receipts) == 4


def test_replayed_claim_and_update_return_the_first_result(store):
    store.put("t", "a", {"status": "pending"})
    first = store.atomic_claim("t", mutations=SETS, idempotency_key="k")
    again = store.atomic_claim("t", mutations=SETS, idempotency_key="k")
    assert again["replayed"] is True and again["claimed"] == first["claimed"]
    update = store.atomic_update("t", "a", mutations=SETS[:1], idempotency_key="u")
    repeat = store.atomic_update("t", "a", mutations=SETS[:1], idempotency_key="u")
    assert repeat["replayed"] is True and repeat["value"] == update["value"]


def test_a_failed_guard_writes_nothing_and_records_a_null_result(store, path):
    store.put("t", "a", {"status": "done"})
    before = stored_text(path, "a")
    result = store.atomic_update(
        "t",
        "a",
        where=[{"field": "status", "operator": "equals", "value": "in_flight"}],
        mutations=SETS,
        idempotency_key="u",
    )
    assert result == {"updated": False, "value": None, "key": "a", "replayed": False}
    assert stored_text(path, "a") == before
    with sqlite3.connect(path) as connection:
        (recorded,) = connection.execute("SELECT result FROM atomic_store_rows_receipts").fetchone()
    connection.close()
    assert recorded == "[null]"
