"""The end-to-end harness's assertions, on hand-made data (the deployment itself is ``make e2e``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from e2e.checks import (
    CheckFailed,
    claim_retry_replayed_its_batch,
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


RUN = "e2e_claim_retry/e2e-retry-001"


def retry_queue(done: list[str], pending: list[str]) -> dict[str, dict[str, Any]]:
    rows = {key: {"status": "done", "claimedBy": RUN, "doneBy": RUN} for key in done}
    rows.update({key: {"status": "pending"} for key in pending})
    return rows


def replay(keys: list[str], replayed: object = True) -> dict[str, Any]:
    claimed = [{"key": key, "value": {"status": "in_flight"}} for key in keys]
    return {"claimed": claimed, "count": len(keys), "replayed": replayed}


def test_a_retry_that_replayed_the_first_tries_batch_passes() -> None:
    rows = retry_queue(["r-0", "r-1"], ["r-2", "r-3"])
    claim_retry_replayed_its_batch(["r-0", "r-1"], replay(["r-0", "r-1"]), rows, RUN)


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (None, "returned no result"),
        (replay(["r-0", "r-1"], replayed=False), "was not replayed"),
        ({"claimed": [], "count": 0}, "was not replayed"),
        (replay(["r-1", "r-0"]), r"the retry got \['r-1', 'r-0'\]"),
        (replay(["r-0"]), "the first try claimed"),
        ({**replay(["r-0", "r-1"]), "count": 3}, "count 3"),
    ],
)
def test_a_retry_that_claimed_afresh_or_returned_another_batch_fails(
    result: Any, message: str
) -> None:
    rows = retry_queue(["r-0", "r-1"], ["r-2"])
    with pytest.raises(CheckFailed, match=message):
        claim_retry_replayed_its_batch(["r-0", "r-1"], result, rows, RUN)


def test_a_run_holding_rows_beyond_its_first_batch_fails() -> None:
    rows = retry_queue(["r-0", "r-1", "r-2"], [])
    with pytest.raises(CheckFailed, match=r"holds \['r-0', 'r-1', 'r-2'\]"):
        claim_retry_replayed_its_batch(["r-0", "r-1"], replay(["r-0", "r-1"]), rows, RUN)


def test_a_batch_left_in_flight_or_taken_by_a_stale_pass_fails() -> None:
    rows = retry_queue(["r-0", "r-1"], [])
    rows["r-1"]["status"] = "in_flight"
    with pytest.raises(CheckFailed, match=r"not processed: .*r-1.*in_flight"):
        claim_retry_replayed_its_batch(["r-0", "r-1"], replay(["r-0", "r-1"]), rows, RUN)
    rows["r-1"].update(status="done", recoveries=1)
    with pytest.raises(CheckFailed, match=r"stale-claim pass re-claimed .*r-1"):
        claim_retry_replayed_its_batch(["r-0", "r-1"], replay(["r-0", "r-1"]), rows, RUN)


def test_rows_outside_the_batch_must_stay_pending_and_a_batch_must_exist() -> None:
    rows = retry_queue(["r-0"], ["r-1"])
    rows["r-1"]["status"] = "in_flight"  # claimed by someone else
    with pytest.raises(CheckFailed, match="outside the batch were touched"):
        claim_retry_replayed_its_batch(["r-0"], replay(["r-0"]), rows, RUN)
    with pytest.raises(CheckFailed, match="claimed nothing"):
        claim_retry_replayed_its_batch([], replay([]), retry_queue([], ["r-0"]), RUN)


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
