"""The command line's own parsing: durations, JSON filters, usage errors (no store)."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest

from airflow_atomic_store.cli import build_parser
from airflow_atomic_store.cli.arguments import duration
from airflow_atomic_store.cli.render import duration as shown
from airflow_atomic_store.cli.render import safe, table


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1w", timedelta(weeks=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("0.5s", timedelta(milliseconds=500)),
        ("PT15M", timedelta(minutes=15)),
        ("P1DT2H", timedelta(days=1, hours=2)),
        ("pt90s", timedelta(seconds=90)),
        ("P2W", timedelta(weeks=2)),
        (" 15M ", timedelta(minutes=15)),
    ],
)
def test_durations_take_short_units_and_iso_8601(text: str, expected: timedelta) -> None:
    assert duration(text) == expected


@pytest.mark.parametrize("text", ["", "15", "m", "15 m", "-5m", "P", "PT", "P1DT", "5y", "1.5.2s"])
def test_anything_else_is_not_a_duration(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        duration(text)


@pytest.mark.parametrize("text", ["0s", "PT0S", "0m0s"])
def test_a_duration_must_be_longer_than_zero(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="longer than zero"):
        duration(text)


def test_bad_json_in_where_is_a_usage_error_naming_the_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["rows", "jobs", "--where", "[{field: 1}]"])
    assert exited.value.code == 2
    assert "argument --where: not valid JSON" in capsys.readouterr().err


def test_stale_needs_older_than(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["stale", "jobs"])
    assert exited.value.code == 2
    assert "--older-than" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(milliseconds=250), "0.25s"),
        (timedelta(seconds=45), "45s"),
        (timedelta(minutes=15, seconds=3), "15m 3s"),
        (timedelta(hours=2, minutes=5, seconds=9), "2h 5m"),
        (timedelta(days=3, hours=4), "3d 4h"),
        (timedelta(minutes=15), "15m"),
        (timedelta(days=1, minutes=5), "1d"),
    ],
)
def test_durations_are_shown_in_their_two_largest_units(delta: timedelta, text: str) -> None:
    assert shown(delta) == text


def test_cells_escape_what_a_terminal_would_obey() -> None:
    assert safe("\x1b[31mred\u202e\n") == "\\x1b[31mred\\u202e\\n"
    assert table(["A", "N"], [("x", 10), ("long", 2)]) == ["A      N", "x     10", "long   2"]
