"""JSON text that names an object's member twice is refused, naming the member, everywhere
people hand the store JSON text: the command line's ``--where``, a trigger's serialized
``where`` (the page's filter: tests/airflow/test_page_refuses_duplicate_members.py).

``json.loads`` keeps the last value of a duplicated member: ``{"field": "status",
"field": "owner"}`` filtered on ``owner`` without a word.
"""

from __future__ import annotations

import json

import pytest

from airflow_atomic_store import SpecError
from airflow_atomic_store.cli import build_parser
from airflow_atomic_store.exceptions import DuplicateMemberError
from airflow_atomic_store.spec.json_text import loads

#: A where whose first condition names "field" twice: last-wins would filter on "owner".
TWICE = '[{"field": "status", "operator": "equals", "field": "owner", "value": "me"}]'


def test_unique_members_load_as_json_loads_them() -> None:
    text = '[{"field": "a", "operator": "in", "value": [1, 2.5, {"b": null}]}]'
    assert loads(text) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "member"),
    [
        (TWICE, "field"),
        ('{"a": {"b": 1, "b": 1}}', "b"),  # the same value twice is refused too
        ('[1, {"é": 1, "\\u00e9": 2}]', "é"),  # one member spelled two ways
    ],
)
def test_a_member_given_twice_is_a_spec_error_naming_it(text: str, member: str) -> None:
    with pytest.raises(DuplicateMemberError) as raised:
        loads(text, "where")
    error = raised.value
    assert isinstance(error, SpecError) and isinstance(error, json.JSONDecodeError)
    assert (error.field, error.member) == ("where", member)
    assert repr(member) in str(error)


def test_the_position_points_at_the_second_mention() -> None:
    with pytest.raises(DuplicateMemberError) as raised:
        loads(TWICE)
    assert TWICE[raised.value.pos :].startswith('"field": "owner"')


def test_bad_json_text_is_still_a_json_decode_error() -> None:
    with pytest.raises(json.JSONDecodeError) as raised:
        loads("[{field: 1}]")
    assert not isinstance(raised.value, SpecError)


def test_the_command_line_refuses_a_where_with_a_member_twice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["rows", "jobs", "--where", TWICE])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "argument --where" in error and "member 'field' appears twice" in error


def test_a_trigger_refuses_a_serialized_where_with_a_member_twice() -> None:
    from airflow_atomic_store.triggers import ClaimableRowsTrigger, ClaimWaitTrigger

    with pytest.raises(SpecError, match="member 'field' appears twice") as raised:
        ClaimableRowsTrigger(conn_id="c", table="jobs", where=TWICE)
    assert raised.value.field == "where"
    with pytest.raises(SpecError, match="member 'field' appears twice"):
        ClaimWaitTrigger(conn_id="c", table="jobs", where=TWICE, deadline="2030-01-01T00:00:00Z")
