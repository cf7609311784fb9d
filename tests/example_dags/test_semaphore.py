"""example_dags/semaphore.py end to end (both backends): two DAGs share a 2-slot semaphore.

Holders record when they held a slot in ``semaphore_log``; runs that wait do so in
the deferrable claim's trigger (tests/example_dags/deferrals.py records it).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.timestamps import shifted
from devkit import late_writer
from devkit.airflow_workers import AirflowWorkers
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag, stored_rows
from tests.example_dags.deferrals import recorded_deferrals
from tests.example_dags.jobs import run_example_recording_waits

RunDag = Callable[..., DagRunResult]
SLOTS = ["slot-0", "slot-1"]


@pytest.fixture
def quick(conf: dict[str, Any]) -> dict[str, Any]:
    return {**conf, "work_seconds": 0.05}


def held_elsewhere(since: timedelta) -> dict[str, Any]:
    return {
        "status": "held",
        "claimedBy": "other_dag/run-1",
        "claimedAt": shifted(since),
        "fence": 4,
    }


def deepest_overlap(log: dict[str, dict[str, Any]]) -> int:
    """How many holders held a slot at once, at most (from their start and end)."""
    edges = sorted(
        [(entry["start"], 1) for entry in log.values()]
        + [(entry["end"], -1) for entry in log.values()]
    )  # at a tie the end (-1) sorts first: touching intervals do not overlap
    depth = deepest = 0
    for _, step in edges:
        depth += step
        deepest = max(deepest, depth)
    return deepest


def test_a_run_takes_a_free_slot_works_and_releases_it(
    run_dag: RunDag, quick: dict[str, Any], store_url: str
) -> None:
    run = run_dag(example_dag("semaphore_load"), conf=quick)

    assert run.state == "success"
    assert run.xcom("seed_slots") == 2
    [slot] = run.xcom("acquire")["claimed"]
    assert run.xcom("work") == slot["key"] == "slot-0"
    assert run.xcom("release") is True
    rows = stored_rows(store_url, "warehouse_slots")
    assert sorted(rows) == SLOTS
    assert rows["slot-0"]["status"] == "free"
    assert rows["slot-0"]["claimedBy"] == run.execution_id
    assert rows["slot-0"]["fence"] == 1  # the first acquisition of this slot
    assert rows["slot-1"] == {"status": "free"}
    log = stored_rows(store_url, "semaphore_log")[run.execution_id]
    assert (log["slot"], log["fence"]) == ("slot-0", 1)
    assert log["start"] < log["end"] <= rows["slot-0"]["releasedAt"]


def test_a_holder_whose_work_fails_releases_its_slot_through_the_teardown(
    run_dag: RunDag, quick: dict[str, Any], store_url: str
) -> None:
    run = run_dag(example_dag("semaphore_report"), conf={**quick, "simulate_failure": True})

    assert run.state == "failed"
    assert (run.state_of("work"), run.state_of("release")) == ("failed", "success")
    assert run.xcom("release") is True
    assert stored_rows(store_url, "warehouse_slots")["slot-0"]["status"] == "free"


def test_the_slot_of_a_holder_that_died_without_releasing_is_taken_after_its_ttl(
    run_dag: RunDag, quick: dict[str, Any], store_url: str
) -> None:
    with AtomicStore(store_url) as store:
        store.put("warehouse_slots", "slot-0", held_elsewhere(timedelta(hours=-3)))  # dead
        store.put("warehouse_slots", "slot-1", held_elsewhere(timedelta(seconds=-5)))  # alive

    run = run_dag(example_dag("semaphore_load"), conf=quick)

    assert run.state == "success"
    assert [row["key"] for row in run.xcom("acquire")["claimed"]] == ["slot-0"]
    rows = stored_rows(store_url, "warehouse_slots")
    assert rows["slot-0"]["fence"] == 5  # the take-over got the next fencing token
    assert rows["slot-1"] == held_elsewhere(timedelta(0)) | {
        "claimedAt": rows["slot-1"]["claimedAt"]
    }


def test_a_run_finding_every_slot_held_waits_deferred_and_takes_the_slot_another_process_frees(
    run_dag: RunDag, quick: dict[str, Any], store_url: str, dag_id: str
) -> None:
    with AtomicStore(store_url) as store:
        for slot in SLOTS:
            store.put("warehouse_slots", slot, held_elsewhere(timedelta(seconds=-1)))
    # Another process releases slot-1 once the acquire has tried and found none free.
    writer = late_writer.start(
        store_url,
        "warehouse_slots",
        "slot-1",
        delay=1.0,
        value={"status": "free", "fence": 9},
        after_receipt="semaphore_load/%/acquire/-1",
    )
    try:
        with recorded_deferrals() as waits:
            run = run_dag(example_dag("semaphore_load"), conf=quick)
    finally:
        writer.wait(timeout=400)

    assert writer.returncode == 0
    assert run.state == "success"
    assert [row["key"] for row in run.xcom("acquire")["claimed"]] == ["slot-1"]
    assert [(wait.task_id, wait.trigger) for wait in waits] == [("acquire", "ClaimWaitTrigger")]
    assert waits[0].running == []  # nothing of the run held a worker slot meanwhile
    assert stored_rows(store_url, "warehouse_slots")["slot-1"]["fence"] == 10


def test_six_runs_of_two_dags_at_once_never_hold_more_than_two_slots_and_all_finish(
    airflow_workers: AirflowWorkers,
    conf: dict[str, Any],
    worker_env: dict[str, str],
    store_url: str,
) -> None:
    work = {**conf, "work_seconds": 2.0}
    jobs = [
        (run_example_recording_waits, (dag_id, {**work, "simulate_failure": n == 4}))
        for n, dag_id in enumerate(["semaphore_load", "semaphore_report"] * 3)
    ]

    results = airflow_workers.run_together(jobs, env=worker_env, timeout=300)

    runs = [worker_runs[0] for worker_runs, _ in results]
    waits = [wait for _, worker_waits in results for wait in worker_waits]
    assert [run.state for run in runs] == ["success"] * 4 + ["failed", "success"]
    assert all(run.state_of("release") == "success" for run in runs)
    assert all(run.xcom("release") is True for run in runs)  # the failed one's too
    log = stored_rows(store_url, "semaphore_log")
    assert sorted(log) == sorted(run.execution_id for run in runs)  # every run held a slot
    assert deepest_overlap(log) <= 2
    # Each slot's holders got strictly increasing fences, in the order they held it.
    for slot in SLOTS:
        fences = [
            entry["fence"]
            for entry in sorted(log.values(), key=lambda e: e["start"])
            if entry["slot"] == slot
        ]
        assert fences == sorted(set(fences))
    # Six runs of 2 s on two slots: some waited, in the trigger, with nothing running.
    assert waits
    assert {(wait.task_id, wait.trigger) for wait in waits} == {("acquire", "ClaimWaitTrigger")}
    assert all(wait.running == [] for wait in waits)
    assert {row["status"] for row in stored_rows(store_url, "warehouse_slots").values()} == {"free"}
