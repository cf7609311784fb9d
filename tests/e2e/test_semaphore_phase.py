"""The e2e semaphore phase's handover arithmetic (e2e/semaphore_phase.py), without a deployment."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.semaphore_phase import Run, release_to_next_holder

LOAD, REPORT = "semaphore_load", "semaphore_report"


class RecordedApi:
    """What the REST API answered for each run: its acquire's XCom and its release's end."""

    def __init__(self, holds: dict[Run, tuple[str, int, str, str]]) -> None:
        self.holds = holds  # (dag_id, run_id): (slot, fence, claimedAt, release end_date)

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        slot, fence, claimed_at, _ = self.holds[dag_id, run_id]
        return {"claimed": [{"key": slot, "value": {"fence": fence, "claimedAt": claimed_at}}]}

    def task_instances(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        return [{"end_date": self.holds[dag_id, run_id][3]}]


def test_the_handover_delay_runs_from_a_release_to_the_next_holder_of_that_slot_that_waited() -> (
    None
):
    """Both DAGs number their runs alike: a run is its DAG and its id (``001`` of the
    load DAG waited, ``001`` of the report DAG did not)."""
    api = RecordedApi(
        {
            (LOAD, "000"): ("slot-0", 1, "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:10Z"),
            (REPORT, "000"): ("slot-1", 1, "2026-01-01T00:00:00.500000Z", "2026-01-01T00:00:20Z"),
            (LOAD, "001"): ("slot-0", 2, "2026-01-01T00:00:10.250000Z", "2026-01-01T00:00:30Z"),
            (REPORT, "001"): ("slot-1", 2, "2026-01-01T00:00:21.000000Z", "2026-01-01T00:00:40Z"),
            (LOAD, "002"): ("slot-0", 3, "2026-01-01T00:00:45.000000Z", "2026-01-01T00:00:50Z"),
        }
    )
    runs = list(api.holds)

    # LOAD 001 waited for a release; REPORT 001 took its slot without waiting; LOAD 002
    # came after slot-0 had long been free.
    assert release_to_next_holder(api, runs, waited={(LOAD, "001")}) == pytest.approx([0.25])
    both = release_to_next_holder(api, runs, waited={(LOAD, "001"), (REPORT, "001")})
    assert sorted(both) == pytest.approx([0.25, 1.0])
