"""Numbers compare and add as the reference evaluator's Python does, at every magnitude.

Python compares an integer with a float by their exact values, and a float is a
binary number: ``1.7334500001234568e18`` is exactly ``1733450000123456768``.
PostgreSQL's ``jsonb`` compares decimals, so a float written as its shortest
decimal (``1733450000123456800``) compared wrongly with a nearby integer: a
guard passed that the evaluator refuses, a claim missed a row it accepts.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_atomic_store.spec import apply, evaluate, json_equal, parse_mutations, parse_where

TIMESTAMP_MS = 1733450000123456780  # an integer beyond 2^53 (ulp of a float there: 256)
FLOAT_NEAR = 1.7334500001234568e18  # shortest decimal ...800, exact value ...768

#: (stored number, operator, guard): integers and floats on both sides, at 2^53..2^63.
PROBES: list[tuple[Any, str, Any]] = [
    (stored, operator, guard)
    for stored, guard in [
        (TIMESTAMP_MS, FLOAT_NEAR),
        (FLOAT_NEAR, TIMESTAMP_MS),
        (1733450000123456768, FLOAT_NEAR),
        (FLOAT_NEAR, 1733450000123456768),
        (-(2**63), -(2.0**63)),
        (-(2.0**63), -(2**63)),
        (2**63 - 1, 2.0**63),
        (2**53 + 1, 2.0**53),
        (2.0**60, 2**60),
        (0.1, 0.1),
        (0.1 + 0.2, 0.3),
        (1e300, 1e300),
    ]
    for operator in ("equals", "not_equals", "lt", "lte", "gt", "gte")
]


def _disagreements(store, probes: list[tuple[Any, str, Any]]) -> list[str]:
    wrong = []
    for number, (stored, operator, guard) in enumerate(probes):
        key = f"k{number}"
        store.put("t", key, {"n": stored})
        where = [{"field": "n", "operator": operator, "value": guard}]
        expected = evaluate(parse_where(where), "all", {"n": stored})
        mutations = [{"field": "hit", "operation": "set", "value": True}]
        got = store.atomic_update("t", key, where=where, mutations=mutations)["updated"]
        if got is not expected:
            wrong.append(f"{stored!r} {operator} {guard!r}: store {got}, evaluator {expected}")
    return wrong


def test_a_guard_compares_integers_and_floats_by_their_exact_values(store):
    assert _disagreements(store, PROBES) == []


def test_a_guard_lt_a_float_just_above_a_stored_integer_in_decimal_does_not_pass(store):
    # The red-team case: the float's shortest decimal is above the integer, its value below.
    store.put("t", "row", {"n": TIMESTAMP_MS})
    result = store.atomic_update(
        "t",
        "row",
        where=[{"field": "n", "operator": "lt", "value": FLOAT_NEAR}],
        mutations=[{"field": "n", "operation": "set", "value": 0}],
    )
    assert result["updated"] is False
    assert store.get("t", "row") == {"n": TIMESTAMP_MS}


def test_a_claim_on_a_float_equal_to_the_smallest_integer_takes_its_row(store):
    store.put("t", "row", {"n": -(2**63), "status": "pending"})
    claimed = store.atomic_claim(
        "t", where=[{"field": "n", "operator": "equals", "value": -(2.0**63)}]
    )
    assert [row["key"] for row in claimed["claimed"]] == ["row"]


@pytest.mark.parametrize("operator", ["in", "not_in", "contains", "not_contains"])
def test_members_of_lists_compare_by_exact_value(store, operator):
    document = {"n": 2**60, "ns": [2**60, 3]}
    field = "ns" if "contains" in operator else "n"
    value: Any = 2.0**60 if "contains" in operator else [2.0**60, "x"]
    where = [{"field": field, "operator": operator, "value": value}]
    store.put("t", "row", document)
    expected = evaluate(parse_where(where), "all", document)
    assert [row["key"] for row in store.query("t", where=where)] == (["row"] if expected else [])


def test_objects_holding_an_integer_and_the_equal_float_are_deep_equal(store):
    store.put("t", "row", {"o": {"x": 2.0**60, "y": [0.1]}})
    where = [{"field": "o", "operator": "equals", "value": {"x": 2**60, "y": [0.1]}}]
    assert [row["key"] for row in store.query("t", where=where)] == ["row"]


@pytest.mark.parametrize(
    ("start", "delta"),
    [(2**62 + 1, 0.5), (TIMESTAMP_MS, 0.25), (0.1, 0.2), (1e300, 1e284), (-(2**63), -1.5)],
)
def test_an_increment_by_a_float_stores_the_value_apply_gives(store, start, delta):
    """Stored as apply's float: equal to the integers Python finds it equal to, and no other."""
    mutations = [{"field": "n", "operation": "increment", "value": delta}]
    store.put("t", "row", {"n": start})
    expected = apply(parse_mutations(mutations), {"n": start})["n"]
    result = store.atomic_update("t", "row", mutations=mutations)
    assert json_equal(result["value"], {"n": expected})
    exact = int(expected)
    near = [n for n in (exact - 1, exact, exact + 1) if -(2**63) <= n < 2**63]
    for probe in [*near, expected]:
        where = [{"field": "n", "operator": "equals", "value": probe}]
        found = [row["key"] for row in store.query("t", where=where)]
        assert found == (["row"] if probe == expected else []), probe


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_exact_value_function_writes_each_double_as_python_s_decimal_does(store, store_url):
    """``atomic_store_exact_v1`` (an increment's float result) against ``Decimal(float)``:
    every magnitude, subnormals and the largest double included."""
    import random
    import struct

    import psycopg

    from airflow_atomic_store.store.postgres.statements import float_text

    store.put("t", "k", {})  # creates the schema and its functions
    pick = random.Random(35)
    doubles = [0.0, 5e-324, 2.2250738585072014e-308, 0.1, 1e16, 2.0**53 + 2, 1.7976931348623157e308]
    doubles += [struct.unpack("<d", struct.pack("<Q", pick.getrandbits(64)))[0] for _ in range(400)]
    doubles = [d for d in doubles if d == d and abs(d) != float("inf")]
    with psycopg.connect(store_url, autocommit=True) as connection:
        for double in doubles:
            row = connection.execute("SELECT atomic_store_exact_v1(%s)::text", (double,))
            assert row.fetchone() == (float_text(double),), double
