from __future__ import annotations

import pytest

from airflow_atomic_store import SpecError
from airflow_atomic_store.spec import MISSING, parse_path, resolve
from airflow_atomic_store.spec.paths import MAX_SEGMENTS


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        ("status", ("status",)),
        ("a.b.c", ("a", "b", "c")),
        ("items[0]", ("items", 0)),
        ("items[12].name", ("items", 12, "name")),
        ("grid[1][2]", ("grid", 1, 2)),
        ("0", ("0",)),
        ("a.0", ("a", "0")),
        ("with space.and'quote\"", ("with space", "and'quote\"")),
        ("ünïcødé.😀", ("ünïcødé", "😀")),
        ("$1.%s.?", ("$1", "%s", "?")),
    ],
)
def test_valid_paths_parse_into_key_and_index_segments(text, segments):
    assert parse_path(text, field="f").segments == segments


@pytest.mark.parametrize(
    "text",
    [
        "",
        ".a",
        "a.",
        "a..b",
        "a[",
        "a[]",
        "a[-1]",
        "a[01]",
        "a[x]",
        "[0]",
        "a]",
        "a\x00b",
        "a\nb",
        "a.\x7f",
        "a[99999999999]",
    ],
)
def test_invalid_paths_raise_spec_error_naming_the_field(text):
    with pytest.raises(SpecError) as info:
        parse_path(text, field="where[0].field")
    assert info.value.field == "where[0].field"


def test_non_string_path_is_rejected():
    with pytest.raises(SpecError, match="must be a string"):
        parse_path(3, field="f")


def test_paths_deeper_than_the_limit_are_rejected():
    parse_path(".".join(["a"] * MAX_SEGMENTS), field="f")
    with pytest.raises(SpecError, match="deeper"):
        parse_path(".".join(["a"] * (MAX_SEGMENTS + 1)), field="f")


VALUE = {"a": {"b": [10, {"c": None}]}, "0": "zero", "list": [1, 2]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a.b[0]", 10),
        ("a.b[1].c", None),
        ("0", "zero"),
        ("a.b[2]", MISSING),
        ("a.x", MISSING),
        ("a.b.0", MISSING),  # a key segment never enters an array
        ("list[0]", 1),
        ("a[0]", MISSING),  # an index never enters an object
        ("a.b[1].c.d", MISSING),  # nothing below null
        ("0.x", MISSING),  # nothing below a string
    ],
)
def test_resolve_walks_objects_by_key_and_arrays_by_index(text, expected):
    assert resolve(VALUE, parse_path(text, field="f")) == expected


def test_null_is_present_not_missing():
    result = resolve(VALUE, parse_path("a.b[1].c", field="f"))
    assert result is None
    assert result is not MISSING
