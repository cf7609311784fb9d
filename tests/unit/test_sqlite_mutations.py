"""Which mutation lists SQLite compiles to one ``json_set``, and the SQL it writes."""

from __future__ import annotations

import pytest

from airflow_atomic_store.spec import parse_mutations
from airflow_atomic_store.spec.options import parse_ordering
from airflow_atomic_store.store.sql import in_claim_order
from airflow_atomic_store.store.sqlite.statements import (
    json_set_params,
    json_set_sql,
    plain_fields,
)


def test_the_default_claim_mutations_compile_to_one_json_set():
    mutations = parse_mutations(
        [
            {"field": "status", "operation": "set", "value": "in_flight"},
            {"field": "claimedAt", "operation": "set", "value": "2026-01-01T00:00:00.000000Z"},
            {"field": "_by2", "op": "set", "value": {"a": [1, None]}},
        ]
    )
    fields = plain_fields(mutations)
    assert fields == ("status", "claimedAt", "_by2")
    assert json_set_sql(fields) == (
        "json_set(value, '$.status', json(:m0), '$.claimedAt', json(:m1), '$._by2', json(:m2))"
    )
    assert json_set_params(mutations) == {
        "m0": '"in_flight"',
        "m1": '"2026-01-01T00:00:00.000000Z"',
        "m2": '{"a":[1,null]}',
    }


@pytest.mark.parametrize(
    "field", ["a.b", "a[0]", "é", "sp ace", "1st", "it's", "$1", 'q"t', "a-b", "%s"]
)
def test_a_field_that_is_not_a_plain_top_level_name_keeps_the_python_path(field):
    mutations = parse_mutations(
        [{"field": "ok", "operation": "set", "value": 1}, {"field": field, "op": "set", "value": 2}]
    )
    assert plain_fields(mutations) is None


def test_an_increment_keeps_the_python_path():
    assert plain_fields(parse_mutations([{"field": "n", "op": "increment", "value": 1}])) is None


@pytest.mark.parametrize("direction", ["asc", "desc"])
def test_returned_rows_are_put_back_in_claim_order_ties_by_key(direction):
    rows = [("b", "{}", "t1"), ("é", "{}", "t0"), ("a", "{}", "t1"), ("Z", "{}", "t1")]
    keys = [key for key, _ in in_claim_order(rows, parse_ordering("createdAt", direction))]
    expected = ["é", "Z", "a", "b"]  # code point order, as SQLite's BINARY collation
    assert keys == (expected if direction == "asc" else expected[::-1])
