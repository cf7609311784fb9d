"""Both SQL backends agree with the reference evaluator on random values and specs.

Any disagreement is a bug in a backend or in the evaluator; when hypothesis
finds one, fix it and keep the example as a regular test in
``tests/integration/test_conformance.py``.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_atomic_store import MutationError
from airflow_atomic_store.spec import apply, evaluate, parse_mutations, parse_where
from airflow_atomic_store.spec.values import json_equal
from tests.property.strategies import (
    documents,
    edge_documents,
    mutation_lists,
    set_conditions,
    top_level_sets,
    wheres,
)

_tables = itertools.count()


def fresh_table() -> str:
    return f"prop-{next(_tables)}"


def oracle_update(document: dict[str, Any], where: list, match: str, mutations: list):
    """``(updated, new value)`` or the MutationError the oracle raises."""
    if not evaluate(parse_where(where), match, document):
        return False, None
    return True, apply(parse_mutations(mutations), document)


@given(data=st.data(), match=st.sampled_from(["all", "any"]))
def test_atomic_update_matches_the_oracle(module_store, data, match):
    document = data.draw(documents, label="document")
    where = data.draw(wheres(document), label="where")
    mutations = data.draw(mutation_lists(document), label="mutations")
    table = fresh_table()
    module_store.put(table, "row", document)
    try:
        expected = oracle_update(document, where, match, mutations)
    except MutationError:
        with pytest.raises(MutationError):
            module_store.atomic_update(table, "row", where=where, match=match, mutations=mutations)
        assert json_equal(module_store.get(table, "row"), document), "nothing may be written"
        return
    result = module_store.atomic_update(table, "row", where=where, match=match, mutations=mutations)
    updated, new_value = expected
    assert result["updated"] is updated
    assert json_equal(result["value"], new_value)
    stored = module_store.get(table, "row")
    assert json_equal(stored, new_value if updated else document)


@given(
    data=st.data(),
    match=st.sampled_from(["all", "any"]),
    rows=st.lists(documents, min_size=1, max_size=6),
)
def test_atomic_claim_selects_exactly_the_rows_the_oracle_accepts(module_store, data, match, rows):
    where = data.draw(wheres(rows[0]), label="where")
    table = fresh_table()
    for index, document in enumerate(rows):
        module_store.put(table, f"k{index}", document)
    conditions = parse_where(where)
    expected = {f"k{i}" for i, document in enumerate(rows) if evaluate(conditions, match, document)}
    result = module_store.atomic_claim(
        table,
        where=where,
        match=match,
        mutations=[{"field": "claimed", "operation": "set", "value": True}],
        limit=1000,
    )
    assert {row["key"] for row in result["claimed"]} == expected
    assert result["count"] == len(expected)


@given(data=st.data(), match=st.sampled_from(["all", "any"]), rows=st.lists(documents, max_size=6))
def test_query_returns_the_rows_the_oracle_accepts(module_store, data, match, rows):
    where = data.draw(wheres(rows[0] if rows else None), label="where")
    table = fresh_table()
    for index, document in enumerate(rows):
        module_store.put(table, f"k{index}", document)
    conditions = parse_where(where)
    expected = [f"k{i}" for i, document in enumerate(rows) if evaluate(conditions, match, document)]
    found = module_store.query(table, where=where, match=match, limit=100)
    assert [row["key"] for row in found] == expected
    for row in found:
        assert json_equal(row["value"], rows[int(row["key"][1:])])


@given(data=st.data(), exists=st.booleans())
def test_atomic_upsert_matches_the_oracle(module_store, data, exists):
    document = data.draw(documents, label="document")
    insert_value = data.draw(documents, label="insert_value")
    mutations = data.draw(st.just([]) | mutation_lists(document), label="mutations")
    table = fresh_table()
    if exists:
        module_store.put(table, "row", document)
    if not exists:
        result = module_store.atomic_upsert(
            table, "row", insert_value=insert_value, mutations=mutations
        )
        assert result["inserted"] is True
        assert json_equal(result["value"], insert_value)
        return
    try:
        expected = apply(parse_mutations(mutations), document)
    except MutationError:
        with pytest.raises(MutationError):
            module_store.atomic_upsert(table, "row", insert_value=insert_value, mutations=mutations)
        assert json_equal(module_store.get(table, "row"), document)
        return
    result = module_store.atomic_upsert(
        table, "row", insert_value=insert_value, mutations=mutations
    )
    assert result["inserted"] is False
    assert json_equal(result["value"], expected)
    assert json_equal(module_store.get(table, "row"), expected)


@given(
    data=st.data(),
    rows=st.lists(edge_documents, min_size=1, max_size=6),
    order_by=st.sampled_from(["createdAt", "recordTimestamp"]),
    direction=st.sampled_from(["asc", "desc"]),
)
def test_atomic_claim_returns_and_stores_what_apply_gives_in_claim_order(
    module_store, data, rows, order_by, direction
):
    # Top-level sets take SQLite's json_set statement, the rest its Python path.
    mutations = data.draw(top_level_sets | mutation_lists(rows[0]), label="mutations")
    limit = data.draw(st.integers(1, 7), label="limit")
    table = fresh_table()
    for index, document in enumerate(rows):
        module_store.put(table, f"k{index}", document)
    keys = [f"k{i}" for i in range(len(rows))][:: 1 if direction == "asc" else -1][:limit]
    parsed = parse_mutations(mutations)
    try:
        expected = [(key, apply(parsed, rows[int(key[1:])])) for key in keys]
    except MutationError:
        with pytest.raises(MutationError):
            module_store.atomic_claim(
                table, mutations=mutations, order_by=order_by, direction=direction, limit=limit
            )
        for index, document in enumerate(rows):
            assert json_equal(module_store.get(table, f"k{index}"), document)
        return
    result = module_store.atomic_claim(
        table, mutations=mutations, order_by=order_by, direction=direction, limit=limit
    )
    assert [row["key"] for row in result["claimed"]] == keys
    for row, (_, value) in zip(result["claimed"], expected, strict=True):
        assert json_equal(row["value"], value)
        assert json_equal(module_store.get(table, row["key"]), value)


@given(
    data=st.data(),
    match=st.sampled_from(["all", "any"]),
    rows=st.lists(documents, min_size=1, max_size=6),
)
def test_claims_through_a_declared_set_agree_with_the_oracle_in_any_condition_order(
    module_store, data, match, rows
):
    """The claim's conditions, shuffled and repeated, plus (for ``all``) narrower ones:
    written through the set's index (SQLite names it), in claim order."""
    declared = data.draw(st.lists(set_conditions(), min_size=1, max_size=3), label="set")
    if match == "any" and len(declared) > 1:
        where = data.draw(st.permutations(declared + declared[:1]), label="where")
    else:
        extra = data.draw(wheres(rows[0]), label="narrower")
        where = data.draw(st.permutations(declared + extra), label="where")
        match = "all"
    table = fresh_table()
    for index, document in enumerate(rows):
        module_store.put(table, f"k{index}", document)
    name = module_store.ensure_claim_index(table=table, where=declared, match=match)
    try:
        conditions = parse_where(where)
        expected = [f"k{i}" for i, row in enumerate(rows) if evaluate(conditions, match, row)]
        result = module_store.atomic_claim(
            table,
            where=where,
            match=match,
            mutations=[{"field": "claimed", "operation": "set", "value": True}],
            limit=1000,
        )
        assert [row["key"] for row in result["claimed"]] == expected
    finally:
        module_store.drop_claim_set(name)
