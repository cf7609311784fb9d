from __future__ import annotations

import pytest

from airflow_atomic_store import MutationError
from airflow_atomic_store.spec import apply, parse_mutations


def run(value, *mutations):
    return apply(parse_mutations(list(mutations)), value)


def set_(field, value):
    return {"field": field, "operation": "set", "value": value}


def inc(field, value):
    return {"field": field, "operation": "increment", "value": value}


def test_set_overwrites_with_any_json_value():
    assert run({"a": 1}, set_("a", {"b": [1, None]})) == {"a": {"b": [1, None]}}


def test_set_creates_missing_parent_objects():
    assert run({}, set_("a.b.c", 1)) == {"a": {"b": {"c": 1}}}
    assert run({"a": {"x": 0}}, set_("a.b", 2)) == {"a": {"x": 0, "b": 2}}


def test_set_into_an_existing_array_element():
    assert run({"items": [{"id": 1}, {"id": 2}]}, set_("items[1].id", 9)) == {
        "items": [{"id": 1}, {"id": 9}]
    }


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ({"a": "text"}, "a.b", "string, not an object"),
        ({"a": None}, "a.b", "null, not an object"),
        ({"a": [1]}, "a.b", "array, not an object"),
        ({"a": {}}, "a[0]", "object, not an array"),
        ({}, "a[0]", "not an array"),
        ({"a": [1]}, "a[1]", "out of range"),
    ],
)
def test_set_through_a_non_object_is_a_mutation_error(value, field, message):
    with pytest.raises(MutationError, match=message) as info:
        run(value, set_(field, 1))
    assert info.value.field == field


def test_increment_missing_or_null_starts_from_zero():
    assert run({}, inc("n", 3)) == {"n": 3}
    assert run({"n": None}, inc("n", -2)) == {"n": -2}
    assert run({}, inc("a.b", 1)) == {"a": {"b": 1}}


def test_increment_keeps_integers_integral():
    result = run({"n": 10}, inc("n", -1))
    assert result == {"n": 9}
    assert type(result["n"]) is int


def test_increment_with_a_float_gives_a_float():
    assert run({"n": 1}, inc("n", 0.5)) == {"n": 1.5}


@pytest.mark.parametrize("stored", ["5", True, [1], {"x": 1}])
def test_incrementing_a_non_number_is_a_mutation_error(stored):
    with pytest.raises(MutationError, match="cannot increment"):
        run({"n": stored}, inc("n", 1))


def test_increment_beyond_64_bits_is_a_mutation_error():
    with pytest.raises(MutationError, match="64-bit"):
        run({"n": 2**63 - 1}, inc("n", 1))


def test_mutations_apply_left_to_right():
    assert run({}, set_("n", 1), inc("n", 1), set_("m", 0), inc("n", 10)) == {"n": 12, "m": 0}


def test_a_failing_later_mutation_leaves_the_input_untouched():
    value = {"n": 1, "s": "x"}
    with pytest.raises(MutationError):
        run(value, inc("n", 1), inc("s", 1))
    assert value == {"n": 1, "s": "x"}


def test_apply_never_mutates_its_input():
    value = {"a": {"b": 1}}
    run(value, set_("a.b", 2), set_("a.c", [1]))
    assert value == {"a": {"b": 1}}
