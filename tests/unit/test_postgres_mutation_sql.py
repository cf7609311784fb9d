"""Which SQL a PostgreSQL update runs for a mutation list (no database).

The PL/pgSQL apply function is correct for every mutation but costs a
primitive about half again its time, so the common shapes (a claim's marks, a
counter, a token bucket) must stay in plain SQL. Their results are proven equal
to the reference ``apply`` by tests/integration/test_conformance.py; these tests
keep a refactor from silently sending them back through the function.
"""

from __future__ import annotations

import re
from typing import Any

from airflow_atomic_store.spec import parse_mutations
from airflow_atomic_store.store.postgres.statements import (
    ADD_FUNCTION,
    APPLY_FUNCTION,
    mutations_sql,
)


def compiled(*mutations: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return mutations_sql(parse_mutations(list(mutations)), "r.value")


def inc(field: str, value: Any) -> dict[str, Any]:
    return {"field": field, "operation": "increment", "value": value}


def put(field: str, value: Any) -> dict[str, Any]:
    return {"field": field, "operation": "set", "value": value}


def test_top_level_sets_are_one_object_merge() -> None:
    expression, params = compiled(put("status", "done"), put("status", "failed"), put("by", 1))
    assert expression == "jsonb_concat(r.value, %(m0)s)"
    assert params["m0"].obj == {"status": "failed", "by": 1}


def test_integer_increments_of_distinct_top_level_fields_need_no_function_on_the_common_path() -> (
    None
):
    expression, params = compiled(inc("tokens", -1), put("takenBy", "run-1"))
    assert APPLY_FUNCTION not in expression
    assert expression.startswith("jsonb_concat(r.value, jsonb_build_object(")
    # An integer plus an integer within 64 bits is summed in SQL; the add
    # function only backs up the cases that branch does not cover.
    integer_branch = expression.split(" THEN ")[2].split(" END")[0]
    assert integer_branch == "to_jsonb(((r.value -> 'tokens')::numeric + %(m1)s::numeric))"
    assert set(re.findall(r"%\((\w+)\)s", expression)) == set(params)


def test_float_increments_of_top_level_fields_call_only_the_add_function() -> None:
    expression, params = compiled(inc("score", 0.5))
    assert APPLY_FUNCTION not in expression
    assert f"{ADD_FUNCTION}((r.value -> 'score'), %(m1)s, %(m2)s)" in expression
    assert set(re.findall(r"%\((\w+)\)s", expression)) == set(params)


def test_field_names_enter_as_quoted_literals_with_percent_signs_doubled() -> None:
    expression, params = compiled(inc("100%", 1))
    assert "(r.value -> '100%%')" in expression
    assert "100%" in params.values()  # the key of jsonb_build_object, bound


def test_a_field_mutated_twice_or_a_nested_path_goes_through_the_apply_function() -> None:
    for mutations in (
        (inc("n", 1), inc("n", 1)),
        (put("n", 1), inc("n", 1)),
        (inc("a.n", 1),),
        (put("items[0]", 1),),
    ):
        expression, params = compiled(*mutations)
        assert expression == f"{APPLY_FUNCTION}(r.value, %(m0)s)"
        assert len(params) == 1
