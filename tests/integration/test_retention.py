"""``retire``: finished rows go in bounded batches; pending and in-flight rows never do."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore, SpecError, timestamps
from devkit.processes import run_in_processes
from tests.support import claim_modes

LONG_AGO = "2020-01-01T00:00:00.000000Z"


def _fill(store: AtomicStore, table: str, statuses: dict[str, int], finished: str) -> None:
    for status, count in statuses.items():
        for number in range(count):
            value: dict[str, Any] = {"status": status}
            if status not in ("pending", "in_flight"):
                value["finishedAt"] = finished
            store.put(table, f"{status}-{number:04d}", value)


def test_retire_removes_only_finished_rows_older_than_the_threshold(store: AtomicStore) -> None:
    _fill(store, "q", {"done": 25, "failed": 3, "pending": 4, "in_flight": 2}, LONG_AGO)
    store.put("q", "done-recent", {"status": "done", "finishedAt": timestamps.now()})
    store.put("q", "done-unstamped", {"status": "done"})
    result = store.retire("q", older_than=timedelta(days=1), limit=10)
    assert result == {"retired": 25, "batches": 3, "complete": True, "stopped": "done"}
    left = {row["key"] for row in store.query("q", limit=1000)}
    assert left == {
        *(f"failed-{n:04d}" for n in range(3)),
        *(f"pending-{n:04d}" for n in range(4)),
        *(f"in_flight-{n:04d}" for n in range(2)),
        "done-recent",
        "done-unstamped",
    }
    assert store.retire("q", older_than=86_400, statuses=["failed"]) == {
        "retired": 3,
        "batches": 1,
        "complete": True,
        "stopped": "done",
    }


def test_retire_copies_each_batch_into_the_archive_table(store: AtomicStore) -> None:
    _fill(store, "q", {"done": 5}, LONG_AGO)
    store.put("q_archive", "done-0000", {"stale": True})
    result = store.retire("q", older_than=60, limit=2, archive_table="q_archive")
    assert result["retired"] == 5
    assert store.query("q") == []
    archived = {row["key"]: row["value"] for row in store.query("q_archive")}
    assert archived == {
        f"done-{n:04d}": {"status": "done", "finishedAt": LONG_AGO} for n in range(5)
    }


def test_retire_stops_at_its_time_budget_and_says_it_is_not_complete(
    store: AtomicStore,
) -> None:
    _fill(store, "q", {"done": 30}, LONG_AGO)
    first = store.retire("q", older_than=60, limit=1, time_budget=0)
    assert first == {"retired": 1, "batches": 1, "complete": False, "stopped": "time_budget"}
    rest = store.retire("q", older_than=60, limit=1000)
    assert rest == {"retired": 29, "batches": 1, "complete": True, "stopped": "done"}


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"statuses": ["done", "pending"]}, "statuses"),
        ({"statuses": ["in_flight"]}, "statuses"),
        ({"statuses": "done"}, "statuses"),
        ({"statuses": []}, "statuses"),
        ({"older_than": -1}, "older_than"),
        ({"older_than": "7d"}, "older_than"),
        ({"limit": 0}, "limit"),
        ({"limit": 10_001}, "limit"),
        ({"time_budget": float("inf")}, "time_budget"),
        ({"finished_field": "a..b"}, "finished_field"),
        ({"archive_table": "q"}, "archive_table"),
    ],
)
def test_bad_retention_arguments_are_spec_errors_before_any_write(
    store: AtomicStore, arguments: dict[str, Any], field: str
) -> None:
    _fill(store, "q", {"done": 1}, LONG_AGO)
    with pytest.raises(SpecError) as raised:
        store.retire("q", **{"older_than": 60, **arguments})
    assert raised.value.field == field
    assert store.get("q", "done-0000") is not None


def test_retention_runs_beside_claimers_without_blocking_them_or_touching_their_rows(
    store: AtomicStore, store_url: str
) -> None:
    pending = [f"op-{number:05d}" for number in range(1_500)]
    for number, key in enumerate(pending):
        store.put("q", key, {"status": "pending"})
        store.put("q", f"old-{number:05d}", {"status": "done", "finishedAt": LONG_AGO})
    started = time.monotonic()
    outcomes = run_in_processes(
        claim_modes.claim_or_retire,
        [(store_url, "q", role) for role in ("mark", "retire", "mark", "retire")],
        timeout=300,
    )
    claimed = sorted(key for outcome in outcomes[0::2] for key in outcome)  # type: ignore[union-attr]
    assert claimed == pending  # every pending row claimed exactly once, none retired
    assert sum(outcomes[1::2]) == 1_500  # type: ignore[arg-type]
    left = store.query("q", limit=10_000)
    assert len(left) == 1_500
    assert all(row["value"]["status"] == "in_flight" for row in left)
    print(f"claimed and retired 3,000 rows side by side in {time.monotonic() - started:.1f}s")
