"""Numbers at every magnitude compare and add on both backends as the oracle's Python does.

Integers beyond 2^53 next to floats of nearly the same value are where a decimal
(PostgreSQL's ``numeric``) and a binary float part ways: a float's shortest
decimal is not its value there. Kept apart from the whole-spec tests so that
every example exercises a number.
"""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from airflow_atomic_store.spec import apply, evaluate, parse_mutations, parse_where
from airflow_atomic_store.spec.values import json_equal
from tests.property.strategies import number_pairs, numbers, numeric_neighbours

_tables = itertools.count()
COMPARISONS = ["equals", "not_equals", "lt", "lte", "gt", "gte", "in", "not_in"]


@given(pair=number_pairs(), operator=st.sampled_from(COMPARISONS))
def test_a_guard_on_a_number_agrees_with_the_oracle(module_store, pair, operator):
    stored, value = pair
    table = f"num-{next(_tables)}"
    document = {"n": stored}
    where = [{"field": "n", "operator": operator, "value": [value] if "in" in operator else value}]
    module_store.put(table, "row", document)
    expected = evaluate(parse_where(where), "all", document)
    mutations = [{"field": "hit", "operation": "set", "value": True}]
    result = module_store.atomic_update(table, "row", where=where, mutations=mutations)
    assert result["updated"] is expected


@given(start=numbers, delta=numbers, probe=numbers)
def test_an_increment_stores_what_apply_gives_and_compares_like_it(
    module_store, start, delta, probe
):
    table = f"num-{next(_tables)}"
    mutations = [{"field": "n", "operation": "increment", "value": delta}]
    module_store.put(table, "row", {"n": start})
    try:
        expected = apply(parse_mutations(mutations), {"n": start})
    except Exception as error:  # the oracle's MutationError: the store must raise it too
        try:
            module_store.atomic_update(table, "row", mutations=mutations)
        except type(error):
            return
        raise AssertionError(f"the store applied what the oracle refused: {error}") from None
    result = module_store.atomic_update(table, "row", mutations=mutations)
    assert json_equal(result["value"], expected)
    for value in [probe, expected["n"], *numeric_neighbours(expected["n"])]:
        for operator in ("equals", "lt", "gt"):
            where = [{"field": "n", "operator": operator, "value": value}]
            found = bool(module_store.query(table, where=where))
            assert found is evaluate(parse_where(where), "all", expected), (operator, value)
