"""Disagreements that property tests found once, kept as regular tests on both backends."""

from __future__ import annotations

import json

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


@pytest.mark.parametrize(
    "condition",
    [
        {"field": "note", "operator": "equals", "value": [1]},
        {"field": "note", "operator": "not_equals", "value": [1]},
        {"field": "note", "operator": "in", "value": [[1], "x"]},
        {"field": "note", "operator": "not_in", "value": [{"a": 1}]},
    ],
)
@pytest.mark.parametrize("note", ["[draft", "{name}", "[1]"])
def test_a_string_shaped_like_the_start_of_a_container_compares_as_a_string(store, condition, note):
    # SQLite handed the unwrapped string to the deep-equality function before the
    # json_type guard, and the function raised on text that is not JSON.
    check_update_agrees(
        store, {"note": note}, [condition], [{"field": "n", "operation": "set", "value": 1}]
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


# Found by tests/reliability/test_validator_fuzz.py: PostgreSQL stored a float written in
# exponent form (1e+16) as a whole numeric, so it read back as an integer; an increment
# by such a float took the integer path and failed its 64-bit range check.

LARGE_FLOATS = {"a": 1e16, "b": -1e20, "c": 1.7976931348623157e308, "d": 5e-324, "e": 1.5e-7}


def test_floats_of_any_magnitude_read_back_as_the_same_floats(store):
    store.put("t", "row", {**LARGE_FLOATS, "nested": [LARGE_FLOATS]})
    value = store.get("t", "row")
    assert repr(value) == repr({**LARGE_FLOATS, "nested": [LARGE_FLOATS]})
    store.put("t", "copy", value)  # a value read back can always be written again
    assert repr(store.get("t", "copy")) == repr(value)


@pytest.mark.parametrize(
    ("document", "delta"),
    [({}, 1e20), ({}, 1e16), ({"n": 5}, 1e16), ({"n": 1e16}, 1), ({"n": 2**63 - 1}, 1.0)],
    ids=["missing-plus-1e20", "missing-plus-1e16", "int-plus-1e16", "1e16-plus-int", "max-int"],
)
def test_incrementing_by_or_from_a_large_float_adds_as_floats(store, document, delta):
    mutations = [{"field": "n", "operation": "increment", "value": delta}]
    expected = apply(parse_mutations(mutations), document)
    store.put("t", "row", document)
    result = store.atomic_update("t", "row", mutations=mutations)
    assert repr(result["value"]) == repr(expected)
    assert repr(store.get("t", "row")) == repr(expected)
    upserted = store.atomic_upsert("t", "row", insert_value={}, mutations=mutations)
    assert repr(upserted["value"]) == repr(apply(parse_mutations(mutations), expected))


# SQLite runs a list of top-level sets as one json_set, which re-serialises the whole
# row: the other fields' numbers and strings must come back as apply() leaves them.

AROUND_A_SET = {
    **LARGE_FLOATS,
    "sum": 0.1 + 0.2,
    "max_int": 2**63 - 1,
    "min_int": -(2**63),
    "text": 'é 😀 \u2028 q"t back\\slash \n\t \u0001 </script>',
    "nested": [{"é": [1e16, 0.1 + 0.2]}, {}, []],
}


def exact(value):
    """Numbers as their repr (1 and 1.0 differ), keys in any order (jsonb reorders them)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def test_top_level_sets_keep_every_other_field_exact(store):
    mutations = [
        {"field": "status", "operation": "set", "value": "done"},
        {"field": "result", "operation": "set", "value": {"x": [1e16, "ü\n", None, True]}},
        {"field": "status", "operation": "set", "value": "done twice"},
    ]
    expected = exact(apply(parse_mutations(mutations), AROUND_A_SET))
    store.put("t", "row", AROUND_A_SET)
    assert exact(store.atomic_update("t", "row", mutations=mutations)["value"]) == expected
    assert exact(store.get("t", "row")) == expected
    store.put("t", "row", AROUND_A_SET)
    (claimed,) = store.atomic_claim("t", mutations=mutations, limit=1)["claimed"]
    assert exact(claimed["value"]) == expected
    assert exact(store.get("t", "row")) == expected
