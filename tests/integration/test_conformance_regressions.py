"""Disagreements that property tests found once, kept as regular tests on both backends."""

from __future__ import annotations

import pytest

from airflow_atomic_store import MutationError
from airflow_atomic_store.spec import apply, evaluate, json_equal, parse_mutations, parse_where


def check_update_agrees(store, document, where, mutations, match="all"):
    store.put("t", "row", document)
    expected_hit = evaluate(parse_where(where), match, document)
    result = store.atomic_update("t", "row", where=where, match=match, mutations=mutations)
    assert result["updated"] is expected_hit
    expected = apply(parse_mutations(mutations), document) if expected_hit else None
    assert json_equal(result["value"], expected)


def test_container_equality_guard_is_safe_on_an_unwrapped_boolean(store):
    # SQLite evaluated the deep-equality function on json_extract's 0 for
    # `false` before the json_type guard beside it, and the function raised.
    check_update_agrees(
        store,
        {"a": None, "$1": False},
        [{"field": "$1", "operator": "not_equals", "value": []}],
        [{"field": "n", "operation": "increment", "value": 1}],
    )


def test_incrementing_a_boolean_behind_a_passing_guard_is_a_mutation_error(store):
    store.put("t", "row", {"$1": False})
    with pytest.raises(MutationError):
        store.atomic_update(
            "t",
            "row",
            where=[{"field": "$1", "operator": "not_equals", "value": []}],
            mutations=[{"field": "$1", "operation": "increment", "value": 0}],
        )
    assert store.get("t", "row") == {"$1": False}
