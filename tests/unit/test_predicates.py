from __future__ import annotations

import pytest

from airflow_atomic_store.spec import OPERATORS, evaluate, json_equal, parse_where

VALUE = {
    "n": 5,
    "f": 2.5,
    "one": 1,
    "flag": True,
    "zero": 0,
    "nothing": None,
    "s": "hello world",
    "ts": "2026-01-02T03:04:05.000000Z",
    "tags": ["a", "b", 1, {"k": 1}],
    "obj": {"x": 1, "y": [1, 2]},
    "nested": {"deep": {"er": "yes"}},
    "items": [{"id": "first"}, {"id": "second"}],
}


def holds(field, operator, value=None):
    condition = {"field": field, "operator": operator}
    if value is not None or operator not in ("exists", "not_exists"):
        condition["value"] = value
    return evaluate(parse_where([condition]), "all", VALUE)


@pytest.mark.parametrize(
    ("field", "operator", "value", "expected"),
    [
        ("n", "equals", 5, True),
        ("n", "equals", 5.0, True),  # numbers compare as numbers
        ("one", "equals", True, False),  # a boolean is never a number
        ("flag", "equals", 1, False),
        ("flag", "equals", True, True),
        ("zero", "equals", False, False),
        ("nothing", "equals", None, True),
        ("missing", "equals", None, False),  # missing is not null
        ("s", "equals", "hello world", True),
        ("n", "equals", "5", False),  # type mismatch is false, never an error
        ("obj", "equals", {"y": [1, 2.0], "x": 1.0}, True),  # deep, order-free keys
        ("obj", "equals", {"x": 1}, False),
        ("tags", "equals", ["a", "b", 1, {"k": 1}], True),
        ("tags", "equals", ["b", "a", 1, {"k": 1}], False),
        ("nested.deep.er", "equals", "yes", True),
        ("items[1].id", "equals", "second", True),
        ("n", "gt", 4, True),
        ("n", "gt", 5, False),
        ("n", "gte", 5, True),
        ("f", "lt", 3, True),
        ("f", "lte", 2.5, True),
        ("s", "gt", "hello", True),  # strings compare as strings
        ("ts", "lt", "2026-01-02T03:04:05.000001Z", True),
        ("ts", "gt", "2026-01-02T03:04:05.000001Z", False),
        ("s", "gt", 1, False),  # type mismatch
        ("n", "gt", "1", False),
        ("flag", "gt", 0, False),  # booleans only by equality
        ("nothing", "lt", 1, False),
        ("missing", "gt", 0, False),
        ("n", "in", [1, 5], True),
        ("n", "in", [5.0], True),
        ("n", "in", ["5"], False),
        ("flag", "in", [1], False),
        ("obj", "in", [{"x": 1, "y": [1, 2]}], True),
        ("missing", "in", [None], False),
        ("n", "in", [], False),
        ("s", "contains", "lo wo", True),  # substring for strings
        ("s", "contains", "", True),
        ("s", "contains", "xyz", False),
        ("tags", "contains", "a", True),  # membership for arrays
        ("tags", "contains", 1.0, True),
        ("tags", "contains", True, False),
        ("tags", "contains", {"k": 1}, True),
        ("tags", "contains", "ab", False),
        ("n", "contains", 5, False),
        ("obj", "contains", "x", False),  # objects have no contains
        ("s", "starts_with", "hello", True),
        ("s", "starts_with", "world", False),
        ("s", "starts_with", "", True),
        ("s", "ends_with", "world", True),
        ("s", "ends_with", "", True),
        ("s", "ends_with", "a much longer suffix than s", False),
        ("tags", "starts_with", "a", False),
        ("nothing", "exists", None, True),  # present even when null
        ("missing", "exists", None, False),
        ("nested.deep", "exists", None, True),
        ("items[5]", "exists", None, False),
    ],
)
def test_positive_operators_follow_the_design_semantics(field, operator, value, expected):
    assert holds(field, operator, value) is expected


NEGATIONS = {
    "not_equals": "equals",
    "not_in": "in",
    "not_contains": "contains",
    "not_exists": "exists",
}


@pytest.mark.parametrize("negative", sorted(NEGATIONS))
@pytest.mark.parametrize("field", ["n", "s", "tags", "nothing", "missing", "obj", "items[0]"])
@pytest.mark.parametrize("value", [5, "a", None, ["a", 5], {"k": 1}])
def test_each_not_operator_is_the_exact_negation_of_its_positive_form(negative, field, value):
    positive = NEGATIONS[negative]
    if positive == "in" and not isinstance(value, list):
        value = [value]
    assert holds(field, negative, value) is (not holds(field, positive, value))


@pytest.mark.parametrize("negative", ["not_equals", "not_in", "not_contains", "not_exists"])
def test_a_missing_field_satisfies_every_not_operator(negative):
    value = [1] if negative == "not_in" else 1
    assert holds("missing", negative, value) is True


def test_every_documented_operator_is_registered():
    assert set(OPERATORS) == {
        "equals",
        "not_equals",
        "gt",
        "gte",
        "lt",
        "lte",
        "in",
        "not_in",
        "contains",
        "not_contains",
        "starts_with",
        "ends_with",
        "exists",
        "not_exists",
    }


@pytest.mark.parametrize(
    ("alias", "value", "canonical"),
    [
        ("eq", 5, "equals"),
        ("ne", 5, "not_equals"),
        ("notIn", [5], "not_in"),
        ("startsWith", "x", "starts_with"),
    ],
)
def test_short_and_camel_case_aliases_resolve_to_the_canonical_operator(alias, value, canonical):
    (condition,) = parse_where([{"field": "n", "operator": alias, "value": value}])
    assert condition.operator.name == canonical


def test_match_all_needs_every_condition_and_any_needs_one():
    where = parse_where(
        [
            {"field": "n", "operator": "equals", "value": 5},
            {"field": "s", "operator": "equals", "value": "nope"},
        ]
    )
    assert evaluate(where, "all", VALUE) is False
    assert evaluate(where, "any", VALUE) is True
    assert evaluate(where, "ANY", VALUE) is True


def test_an_empty_where_matches_every_row():
    assert evaluate(parse_where(None), "all", VALUE) is True
    assert evaluate(parse_where([]), "any", {}) is True


@pytest.mark.parametrize(
    ("left", "right", "equal"),
    [
        (1, 1.0, True),
        (True, 1, False),
        (False, 0, False),
        (None, None, True),
        ([1, [2]], [1.0, [2.0]], True),
        ({"a": None}, {}, False),
        ("1", 1, False),
        ([], {}, False),
    ],
)
def test_json_equality_is_deep_and_keeps_booleans_apart_from_numbers(left, right, equal):
    assert json_equal(left, right) is equal
    assert json_equal(right, left) is equal
