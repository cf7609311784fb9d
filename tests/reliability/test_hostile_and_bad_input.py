"""Bad input is a typed error naming the field, and changes nothing, on both live backends.

Fills the gaps left by tests/unit/test_validation.py (errors before I/O on an
unreachable store): NUL and non-JSON values wherever a value enters, size and nesting
limits, and bad options, each checked on a live store that must be left exactly as it
was. Hostile text that is valid input (field names, 100 KB strings) is in
test_hostile_text.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore, SpecError
from airflow_atomic_store.spec.conditions import MAX_CONDITIONS
from airflow_atomic_store.spec.values import MAX_DEPTH
from tests.reliability.support import snapshot
from tests.support.sentinel import fresh_table, sentinel_check
from tests.support.specs import INCREMENT as BUMP


@pytest.fixture
def guarded(shared_store: AtomicStore) -> Callable[[], None]:
    """A check that the sentinel table (tests/support/sentinel.py) is unchanged."""
    return sentinel_check(shared_store)


# -- bad values, typed errors naming the field ----------------------------------------------


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def cyclic() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


BAD_VALUES: dict[str, tuple[Callable[[AtomicStore, str], Any], str]] = {
    # NUL and lone surrogates wherever text enters
    "nul-in-nested-string": (lambda s, t: s.put(t, "k", {"a": ["ok", "x\x00"]}), "value.a[1]"),
    "nul-in-object-key": (lambda s, t: s.put(t, "k", {"a": {"b\x00": 1}}), "value.a"),
    "nul-in-insert-value": (
        lambda s, t: s.atomic_upsert(t, "k", insert_value={"\x00": 1}),
        "insert_value",
    ),
    "nul-in-set-value": (
        lambda s, t: s.atomic_update(
            t, "k", mutations=[{"field": "a", "op": "set", "value": "\x00"}]
        ),
        "mutations[0].value",
    ),
    "nul-in-upsert-mutation": (
        lambda s, t: s.atomic_upsert(
            t, "k", insert_value={}, mutations=[{"field": "a", "op": "set", "value": ["\x00"]}]
        ),
        "mutations[0].value[0]",
    ),
    "nul-in-in-list": (
        lambda s, t: s.query(t, where=[{"field": "a", "operator": "in", "value": ["a", "\x00"]}]),
        "where[0].value[1]",
    ),
    "nul-in-execution-id": (lambda s, t: s.atomic_claim(t, execution_id="run\x00"), "execution_id"),
    "surrogate-in-execution-id": (
        lambda s, t: s.atomic_claim(t, execution_id="\ud800"),
        "execution_id",
    ),
    "surrogate-in-value": (lambda s, t: s.put(t, "k", {"a": "\udfff"}), "value.a"),
    "surrogate-in-key": (lambda s, t: s.put(t, "\ud800", {}), "key"),
    "nul-in-return-field": (
        lambda s, t: s.atomic_claim(t, return_fields=["a\x00"]),
        "return_fields",
    ),
    # values that are not JSON objects
    "put-none": (lambda s, t: s.put(t, "k", None), "value"),
    "put-number": (lambda s, t: s.put(t, "k", 5), "value"),
    "put-boolean": (lambda s, t: s.put(t, "k", True), "value"),
    "put-pairs": (lambda s, t: s.put(t, "k", [("a", 1)]), "value"),
    "insert-none": (lambda s, t: s.atomic_upsert(t, "k", insert_value=None), "insert_value"),
    "insert-text": (lambda s, t: s.atomic_upsert(t, "k", insert_value='{"a": 1}'), "insert_value"),
    # values that are not JSON at all
    "non-string-object-key": (lambda s, t: s.put(t, "k", {"a": {1: "x"}}), "value.a"),
    "bytes": (lambda s, t: s.put(t, "k", {"a": b"x"}), "value.a"),
    "set-of-values": (
        lambda s, t: s.atomic_update(
            t, "k", mutations=[{"field": "a", "op": "set", "value": {1, 2}}]
        ),
        "mutations[0].value",
    ),
    "integer-beyond-64-bits-in-list": (
        lambda s, t: s.put(t, "k", {"a": [1, -(2**63) - 1]}),
        "value.a[1]",
    ),
    # non-finite floats
    "negative-infinity-nested": (
        lambda s, t: s.put(t, "k", {"a": {"b": float("-inf")}}),
        "value.a.b",
    ),
    "nan-in-insert-value-list": (
        lambda s, t: s.atomic_upsert(t, "k", insert_value={"a": [float("nan")]}),
        "insert_value.a[0]",
    ),
    "infinity-in-where-in-list": (
        lambda s, t: s.query(
            t, where=[{"field": "a", "operator": "in", "value": [1, float("inf")]}]
        ),
        "where[0].value[1]",
    ),
    "increment-by-negative-infinity": (
        lambda s, t: s.atomic_update(
            t, "k", mutations=[{"field": "n", "op": "increment", "value": float("-inf")}]
        ),
        "mutations[0].value",
    ),
    "nan-in-claim-mutation": (
        lambda s, t: s.atomic_claim(
            t, mutations=[{"field": "n", "op": "set", "value": [float("nan")]}]
        ),
        "mutations[0].value[0]",
    ),
    # increments by something that is not a number
    "increment-by-false": (
        lambda s, t: s.atomic_update(
            t, "k", mutations=[BUMP[0], {"field": "n", "op": "increment", "value": False}]
        ),
        "mutations[1].value",
    ),
    "increment-by-none": (
        lambda s, t: s.atomic_upsert(
            t, "k", insert_value={}, mutations=[{"field": "n", "op": "increment", "value": None}]
        ),
        "mutations[0].value",
    ),
    "increment-by-list": (
        lambda s, t: s.atomic_claim(t, mutations=[{"field": "n", "op": "increment", "value": [1]}]),
        "mutations[0].value",
    ),
    "increment-by-numeric-text": (
        lambda s, t: s.atomic_claim(
            t, mutations=[{"field": "n", "op": "increment", "value": "-1"}]
        ),
        "mutations[0].value",
    ),
    # nesting
    "too-deep-value": (
        lambda s, t: s.put(t, "k", nested(MAX_DEPTH + 2)),
        "value" + ".a" * (MAX_DEPTH + 1),
    ),
    "deep-beyond-recursion-limit": (
        lambda s, t: s.put(t, "k", nested(5000)),
        "value" + ".a" * (MAX_DEPTH + 1),
    ),
    "too-deep-where-value": (
        lambda s, t: s.query(
            t, where=[{"field": "a", "operator": "equals", "value": nested(3000)}]
        ),
        "where[0].value" + ".a" * (MAX_DEPTH + 1),
    ),
    "too-deep-set-value": (
        lambda s, t: s.atomic_update(
            t, "k", mutations=[{"field": "a", "op": "set", "value": [nested(3000)]}]
        ),
        "mutations[0].value[0]" + ".a" * MAX_DEPTH,
    ),
    "cyclic-value": (lambda s, t: s.put(t, "k", cyclic()), "value" + ".self" * (MAX_DEPTH + 1)),
}


@pytest.mark.parametrize(("call", "field"), BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_bad_values_are_spec_errors_naming_the_field_and_change_nothing(
    shared_store: AtomicStore,
    guarded: Callable[[], None],
    call: Callable[[AtomicStore, str], Any],
    field: str,
) -> None:
    table = fresh_table()
    shared_store.put(table, "k", {"n": 1, "status": "pending"})
    before = snapshot(shared_store, table)
    with pytest.raises(SpecError) as raised:
        call(shared_store, table)
    assert raised.value.field == field
    assert snapshot(shared_store, table) == before
    guarded()


def test_values_at_the_nesting_limit_are_stored_exactly(
    shared_store: AtomicStore, guarded: Callable[[], None]
) -> None:
    table = fresh_table()
    deepest = nested(MAX_DEPTH + 1)  # the top-level object plus MAX_DEPTH levels below it
    shared_store.put(table, "k", deepest)
    assert shared_store.get(table, "k") == deepest
    guarded()


# -- bad options -----------------------------------------------------------------------------

BAD_OPTIONS: dict[str, tuple[Callable[[AtomicStore, str], Any], str]] = {
    "claim-limit-none": (lambda s, t: s.atomic_claim(t, limit=None), "limit"),
    "claim-limit-whole-float": (lambda s, t: s.atomic_claim(t, limit=10.0), "limit"),
    "claim-limit-huge": (lambda s, t: s.atomic_claim(t, limit=10**20), "limit"),
    "claim-limit-sql": (lambda s, t: s.atomic_claim(t, limit="1; DROP TABLE x"), "limit"),
    "query-limit-negative": (lambda s, t: s.query(t, limit=-1), "limit"),
    "query-limit-over": (lambda s, t: s.query(t, limit=10_001), "limit"),
    "query-limit-fraction": (lambda s, t: s.query(t, limit=1.5), "limit"),
    "order-by-sql": (
        lambda s, t: s.atomic_claim(t, order_by="created_at; DROP TABLE x"),
        "order_by",
    ),
    "order-by-value-path": (lambda s, t: s.query(t, order_by="value->>'priority'"), "order_by"),
    "order-by-list": (lambda s, t: s.atomic_claim(t, order_by=["createdAt"]), "order_by"),
    "order-by-none": (lambda s, t: s.query(t, order_by=None), "order_by"),
    "direction-sql": (lambda s, t: s.atomic_claim(t, direction="asc, key DESC"), "direction"),
    "direction-none": (lambda s, t: s.query(t, direction=None), "direction"),
    "match-sql": (
        lambda s, t: s.query(t, where=[{"field": "n", "op": "exists"}], match="all OR 1=1"),
        "match",
    ),
    "operator-sql": (
        lambda s, t: s.atomic_update(
            t, "k", where=[{"field": "n", "operator": "= 1 OR 1=1", "value": 1}], mutations=BUMP
        ),
        "where[0].operator",
    ),
    "operator-uppercase": (
        lambda s, t: s.query(t, where=[{"field": "n", "operator": "EQUALS", "value": 1}]),
        "where[0].operator",
    ),
    "operator-list": (
        lambda s, t: s.query(t, where=[{"field": "n", "operator": ["equals"], "value": 1}]),
        "where[0].operator",
    ),
    "operation-sql": (
        lambda s, t: s.atomic_update(
            t, "k", mutations=[{"field": "n", "operation": "set = 1 --", "value": 1}]
        ),
        "mutations[0].operation",
    ),
    "too-many-conditions": (
        lambda s, t: s.query(t, where=[{"field": "n", "op": "exists"}] * (MAX_CONDITIONS + 1)),
        "where",
    ),
    "too-many-conditions-in-claim": (
        lambda s, t: s.atomic_claim(
            t, where=[{"field": "n", "op": "gt", "value": 0}] * 1000, match="any"
        ),
        "where",
    ),
    "return-fields-number": (
        lambda s, t: s.atomic_update(t, "k", mutations=BUMP, return_fields=5),
        "return_fields",
    ),
}


@pytest.mark.parametrize(("call", "field"), BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_bad_options_are_spec_errors_naming_the_field_and_change_nothing(
    shared_store: AtomicStore,
    guarded: Callable[[], None],
    call: Callable[[AtomicStore, str], Any],
    field: str,
) -> None:
    table = fresh_table()
    shared_store.put(table, "k", {"n": 1, "status": "pending"})
    before = snapshot(shared_store, table)
    with pytest.raises(SpecError) as raised:
        call(shared_store, table)
    assert raised.value.field == field
    assert raised.value.problem
    assert snapshot(shared_store, table) == before
    guarded()


@pytest.mark.parametrize("match", ["all", "any"])
def test_a_where_with_the_most_conditions_runs_on_both_backends(
    shared_store: AtomicStore, match: str
) -> None:
    table = fresh_table()
    shared_store.put(table, "k", {"n": 1, "s": "text", "l": [1, 2]})
    shared_store.put(table, "decoy", {"n": 2})
    kinds = [
        {"field": "n", "operator": "equals", "value": 1},
        {"field": "s", "operator": "contains", "value": "ex"},
        {"field": "l", "operator": "contains", "value": 2},
        {"field": "n", "operator": "in", "value": [1, "1"]},
        {"field": "s", "operator": "ends_with", "value": "xt"},
    ]
    where = (kinds * MAX_CONDITIONS)[:MAX_CONDITIONS]
    assert [row["key"] for row in shared_store.query(table, where=where, match=match)] == ["k"]
    claimed = shared_store.atomic_claim(table, where=where, match=match, limit=1000)
    assert [row["key"] for row in claimed["claimed"]] == ["k"]
