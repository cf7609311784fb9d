"""The end-to-end harness's assertions, on hand-made data (the deployment itself is ``make e2e``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from e2e.checks import (
    CheckFailed,
    every_claim_accounted_for,
    every_item_done_with_one_effect,
    lease_intervals_never_overlap,
    most_at_once,
    parse_time,
)
from e2e.tasks import task_process


def ts(second: int) -> str:
    return f"2025-01-01T00:00:{second:02d}.000000Z"


def test_lease_intervals_that_touch_do_not_overlap() -> None:
    intervals = [("b", ts(5), ts(9)), ("a", ts(1), ts(5))]
    assert lease_intervals_never_overlap(intervals) == 2


def test_lease_intervals_that_overlap_are_reported_with_both_holders() -> None:
    with pytest.raises(CheckFailed, match=r"lease held twice at once: a until .* b from"):
        lease_intervals_never_overlap([("a", ts(1), ts(6)), ("b", ts(5), ts(9))])


def test_an_incomplete_or_empty_lease_log_fails() -> None:
    with pytest.raises(CheckFailed, match="incomplete"):
        lease_intervals_never_overlap([("a", ts(1), None)])
    with pytest.raises(CheckFailed, match="empty"):
        lease_intervals_never_overlap([])


def items(**statuses: str) -> dict[str, dict[str, Any]]:
    return {key: {"status": status} for key, status in statuses.items()}


def test_every_item_done_with_exactly_one_effect_passes() -> None:
    effects = {"a": {"performedBy": "d/1"}, "b": {"performedBy": "d/2"}}
    every_item_done_with_one_effect(items(a="done", b="done"), effects, expected=2)


@pytest.mark.parametrize(
    ("queue", "effects", "message"),
    [
        (items(a="done", b="in_flight"), {"a": {"performedBy": "x"}}, "every item done"),
        (items(a="done", b="done"), {"a": {"performedBy": "x"}}, "1 item.* without one"),
        (items(a="done"), {"a": {"performedBy": "x"}, "z": {"performedBy": "x"}}, "for no item"),
        (items(a="done"), {"a": {}}, "no run performed"),
    ],
)
def test_items_not_done_or_effects_not_one_per_item_fail(
    queue: dict[str, Any], effects: dict[str, Any], message: str
) -> None:
    with pytest.raises(CheckFailed, match=message):
        every_item_done_with_one_effect(queue, effects, expected=len(queue))


def test_a_recovered_item_is_claimed_once_more_per_recovery() -> None:
    queue = {"a": {"status": "done"}, "b": {"status": "done", "recoveries": 1}}
    claims = {"d/1": ["a", "b"], "s/1": ["b"]}
    assert every_claim_accounted_for(queue, claims, Counter({"d/1": 2, "s/1": 1})) == 3


def test_a_row_handed_to_two_dispatchers_fails() -> None:
    queue = {"a": {"status": "done"}}
    with pytest.raises(CheckFailed, match="claimed a different number of times"):
        every_claim_accounted_for(
            queue, {"d/1": ["a"], "d/2": ["a"]}, Counter({"d/1": 1, "d/2": 1})
        )


def test_a_claimed_row_without_its_mapped_task_fails() -> None:
    with pytest.raises(CheckFailed, match="do not match their claims"):
        every_claim_accounted_for({"a": {"status": "done"}}, {"d/1": ["a"]}, Counter())


class FakeProcess:
    def __init__(self, title: str) -> None:
        self.title = title

    def cmdline(self) -> list[str]:
        return self.title.split(" ")


def test_the_task_process_is_found_by_its_title_and_not_its_supervisor() -> None:
    supervisor = FakeProcess("airflow worker -- LocalExecutor: 0190-ab")
    runner = FakeProcess("airflow worker -- 0190-ab")
    other = FakeProcess("airflow worker -- 0190-cd")
    found = task_process("0190-ab", [supervisor, other, runner])  # type: ignore[list-item]
    assert found is runner
    assert task_process("0190-ef", [supervisor, runner]) is None  # type: ignore[list-item]


def test_runs_at_once_counts_overlaps_and_not_runs_that_touch() -> None:
    spans = [(ts(1), ts(3)), ("2025-01-01T00:00:02.5Z", ts(4)), (ts(3), ts(5)), (ts(6), ts(7))]
    assert most_at_once(spans) == 2
    assert most_at_once([]) == 0


def test_timestamps_of_the_rest_api_parse_with_or_without_a_fraction() -> None:
    assert parse_time("2025-01-01T00:00:10Z") < parse_time("2025-01-01T00:00:10.5Z")
    assert parse_time("2025-01-01T00:00:10.123456+00:00").microsecond == 123456
