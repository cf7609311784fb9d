"""Parsed specs are remembered by a type-exact frozen form of the raw spec (``spec/memo.py``)."""

from __future__ import annotations

import copy
import re

import pytest

from airflow_atomic_store import SpecError, timestamps
from airflow_atomic_store.spec import parse_mutations, parse_where
from airflow_atomic_store.spec.memo import frozen


def _where(value: object) -> list[dict[str, object]]:
    return [{"field": "n", "operator": "equals", "value": value}]


def test_an_equal_spec_is_parsed_once_and_gets_the_same_parsed_object():
    spec = [*_where("pending"), {"field": "tags", "operator": "in", "value": ["a", "b"]}]
    assert parse_where(spec) is parse_where(copy.deepcopy(spec))
    marks = [{"field": "status", "operation": "set", "value": {"done": True}}]
    assert parse_mutations(marks) is parse_mutations(copy.deepcopy(marks))


@pytest.mark.parametrize(
    ("left", "right"), [(1, True), (1, 1.0), (0, False), (0.0, -0.0), ("1", 1), (None, "null")]
)
def test_values_equal_in_python_but_of_different_json_types_are_different_specs(left, right):
    first, second = parse_where(_where(left))[0].value, parse_where(_where(right))[0].value
    assert (type(first), repr(first)) == (type(left), repr(left))
    assert (type(second), repr(second)) == (type(right), repr(right))


def test_changing_the_callers_spec_afterwards_changes_neither_the_remembered_nor_the_next_parse():
    spec = [{"field": "status", "operator": "in", "value": ["pending"]}]
    first = parse_where(spec)
    spec[0]["value"].append("retry")  # type: ignore[attr-defined]
    assert parse_where(spec)[0].value == ["pending", "retry"]
    assert first[0].value == ["pending"]
    assert parse_where([{"field": "status", "operator": "in", "value": ["pending"]}]) is first


def test_a_failed_parse_is_not_remembered_and_fails_again_naming_the_field():
    bad = [{"field": "n", "operator": "gt", "value": [1]}]
    for _ in range(2):
        with pytest.raises(SpecError) as caught:
            parse_where(bad)
        assert caught.value.field == "where[0].value"
    with pytest.raises(SpecError) as caught:
        parse_where(bad, field="guard")
    assert caught.value.field == "guard[0].value"


def test_subclasses_generators_and_non_string_keys_are_parsed_every_time_not_frozen():
    class Text(str):
        pass

    assert frozen(_where(Text("pending"))) is None
    assert frozen({1: "x"}) is None
    assert frozen(x for x in ()) is None
    assert parse_where(_where(Text("pending")))[0].value == "pending"
    spec = (item for item in _where("pending"))
    assert parse_where(spec)[0].value == "pending"


def test_now_is_the_canonical_form_of_the_current_time():
    text = timestamps.now()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", text)
    assert timestamps.format_timestamp(timestamps.parse_timestamp(text)) == text
    before = timestamps.utc_now()
    assert abs((timestamps.parse_timestamp(timestamps.now()) - before).total_seconds()) < 5
