"""``@task.atomic_batch``: one task claims a batch and records each row's outcome (both backends)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow.sdk import task

from airflow_atomic_store import AtomicStore
from devkit.dagrun import DagRunResult, new_dag
from tests.support.specs import ONE_RETRY, PENDING

RunDag = Callable[..., DagRunResult]


def _enqueue(store_url: str, count: int) -> None:
    with AtomicStore(store_url) as store:
        for number in range(count):
            store.put("jobs", f"job-{number}", {"status": "pending", "n": number})


def lost_after_commit(context: Any, result: Any = None) -> None:
    if context["ti"].try_number == 1:
        raise RuntimeError("the worker was lost after the rows were processed")


def test_each_row_gets_its_outcome_and_one_failing_row_fails_neither_the_others_nor_the_task(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str, tmp_path: Path
) -> None:
    _enqueue(store_url, 5)
    calls = tmp_path / "calls.txt"
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:

        @task.atomic_batch(
            conn_id=store_conn,
            table="jobs",
            where=PENDING,
            limit=10,
            post_execute=lost_after_commit,
        )
        def process(row: dict, run_id: str | None = None) -> None:
            with calls.open("a") as log:
                log.write(f"{row['key']} {run_id is not None}\n")
            if row["value"]["n"] == 2:
                raise ValueError("the API refused job 2")

        process()

    run = run_dag(dag)
    assert (run.state_of("process"), run.try_number_of("process")) == ("success", 2)
    assert run.xcom("process") == {"claimed": 5, "done": 4, "failed": 1, "skipped": 0}
    # The retry replayed the batch and skipped every finished row: one call per row.
    assert sorted(calls.read_text().splitlines()) == [f"job-{n} True" for n in range(5)]
    with AtomicStore(store_url) as store:
        values = {row["key"]: row["value"] for row in store.query("jobs")}
    assert [values[f"job-{n}"]["status"] for n in range(5)] == [
        "done",
        "done",
        "failed",
        "done",
        "done",
    ]
    assert values["job-2"]["error"] == "ValueError: the API refused job 2"
    assert all(
        value["finishedAt"] and value["claimedBy"] == run.execution_id for value in values.values()
    )


def test_a_delete_mode_batch_records_outcomes_in_its_outcomes_table(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    _enqueue(store_url, 3)
    with new_dag(dag_id) as dag:

        @task.atomic_batch(conn_id=store_conn, table="jobs", where=PENDING, mode="delete")
        def process(row: dict) -> None:
            if row["key"] == "job-0":
                raise RuntimeError("boom")

        process()

    run = run_dag(dag)
    assert run.xcom("process") == {"claimed": 3, "done": 2, "failed": 1, "skipped": 0}
    with AtomicStore(store_url) as store:
        assert store.query("jobs") == []
        outcomes = {
            row["value"]["row"]: row["value"]["status"] for row in store.query("jobs_outcomes")
        }
    assert outcomes == {"job-0": "failed", "job-1": "done", "job-2": "done"}


def test_an_empty_queue_gives_an_empty_batch(run_dag: RunDag, store_conn: str, dag_id: str) -> None:
    with new_dag(dag_id) as dag:

        @task.atomic_batch(conn_id=store_conn, table="jobs", where=PENDING)
        def process(row: dict) -> None:
            raise AssertionError("no row to process")

        process()

    run = run_dag(dag)
    assert run.state_of("process") == "success"
    assert run.xcom("process") == {"claimed": 0, "done": 0, "failed": 0, "skipped": 0}


def test_the_function_writes_through_the_batchs_open_store_when_it_names_atomic_store(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str, tmp_path: Path
) -> None:
    """One store for the batch: a row's own writes need no store opened per row."""
    _enqueue(store_url, 3)
    stores = tmp_path / "stores.txt"
    with new_dag(dag_id) as dag:

        @task.atomic_batch(conn_id=store_conn, table="jobs", where=PENDING, limit=10)
        def process(row: dict, atomic_store: Any = None) -> None:
            with stores.open("a") as log:
                log.write(f"{type(atomic_store).__name__} {id(atomic_store)}\n")
            atomic_store.atomic_upsert("effects", row["key"], insert_value={"sent": True})

        process()

    run = run_dag(dag)
    assert run.xcom("process") == {"claimed": 3, "done": 3, "failed": 0, "skipped": 0}
    assert len(set(stores.read_text().splitlines())) == 1  # the same open hook for each row
    assert stores.read_text().split()[0] == "AtomicStoreHook"
    with AtomicStore(store_url) as store:
        assert sorted(row["key"] for row in store.query("effects")) == ["job-0", "job-1", "job-2"]


def test_a_batch_finishes_its_rows_in_one_call_and_leaves_a_row_taken_over_meanwhile(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    _enqueue(store_url, 4)
    with new_dag(dag_id) as dag:

        @task.atomic_batch(conn_id=store_conn, table="jobs", where=PENDING, limit=10)
        def process(row: dict, atomic_store: Any = None) -> None:
            if row["key"] == "job-0":  # stale-claim recovery hands job-3 to another run
                atomic_store.atomic_update(
                    "jobs",
                    "job-3",
                    mutations=[{"field": "claimedBy", "operation": "set", "value": "other-run"}],
                )

        process()

    run = run_dag(dag)
    assert run.xcom("process") == {"claimed": 4, "done": 3, "failed": 0, "skipped": 1}
    with AtomicStore(store_url) as store:
        values = {row["key"]: row["value"] for row in store.query("jobs")}
    assert values["job-3"]["status"] == "in_flight"  # the other run finishes it
    assert values["job-3"]["claimedBy"] == "other-run"
    finished = {values[f"job-{n}"]["finishedAt"] for n in range(3)}
    assert len(finished) == 1  # recorded by one atomic_update_many, not one call per row
