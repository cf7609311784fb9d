"""The e2e semaphore phase's handover arithmetic (e2e/semaphore_phase.py), without a deployment."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.semaphore_phase import release_to_next_holder


class RecordedApi:
    """What the REST API answered for each run: its acquire's XCom and its release's end."""

    def __init__(self, holds: dict[str, tuple[str, int, str, str]]) -> None:
        self.holds = holds  # run_id: (slot, fence, claimedAt, release end_date)

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        slot, fence, claimed_at, _ = self.holds[run_id]
        return {"claimed": [{"key": slot, "value": {"fence": fence, "claimedAt": claimed_at}}]}

    def task_instances(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        return [{"end_date": self.holds[run_id][3]}]


def test_the_handover_delay_runs_from_a_release_to_the_next_holder_of_that_slot_that_waited() -> (
    None
):
    api = RecordedApi(
        {
            "a": ("slot-0", 1, "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:10.000000+00:00"),
            "b": ("slot-1", 1, "2026-01-01T00:00:00.500000Z", "2026-01-01T00:00:20.000000+00:00"),
            "c": ("slot-0", 2, "2026-01-01T00:00:10.250000Z", "2026-01-01T00:00:30.000000+00:00"),
            "d": ("slot-1", 2, "2026-01-01T00:00:21.000000Z", "2026-01-01T00:00:40.000000+00:00"),
            "e": ("slot-0", 3, "2026-01-01T00:00:45.000000Z", "2026-01-01T00:00:50.000000+00:00"),
        }
    )
    runs = [("semaphore_load", run_id) for run_id in "abcde"]

    # c and d waited for a release; e came after slot-0 had long been free (not a waiter).
    delays = release_to_next_holder(api, runs, waited={"c", "d"})

    assert sorted(delays) == pytest.approx([0.25, 1.0])
