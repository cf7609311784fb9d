"""A delete-mode batch never deletes rows it cannot process (issue 39): real DAG runs, both backends.

Each row's outcome is stored under ``<task instance key>/<row key>``; a row key the
store accepts (up to 1,024 bytes) used to make that key too long, and the failure
came after the delete-claim had committed: the rows were gone, none processed. The
outcome key is now bounded by construction (a digest when the readable form does
not fit), and every argument (the outcomes table included) is checked before the
claim: a refused one fails the task at once with the store byte-for-byte as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import task

from airflow_atomic_store import AtomicClaimOperator, AtomicStore
from airflow_atomic_store.operators.batch import AtomicBatchOperator
from airflow_atomic_store.spec.options import MAX_KEY_BYTES
from devkit.dagrun import DagRunResult, new_dag
from tests.support.specs import ONE_RETRY, PENDING
from tests.support.store_dump import dump_store

RunDag = Callable[..., DagRunResult]


def lost_after_commit(context: Any, result: Any = None) -> None:
    if context["ti"].try_number == 1:
        raise RuntimeError("the worker was lost after the rows were processed")


def _long_key(number: int) -> str:
    return f"{number}-".ljust(1002, "k")


def test_a_delete_mode_batch_of_rows_with_1002_byte_keys_processes_every_row_once(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str, tmp_path: Path
) -> None:
    keys = [_long_key(number) for number in range(5)]
    with AtomicStore(store_url) as store:
        for key in keys:
            store.put("jobs", key, {"status": "pending"})
    calls = tmp_path / "calls.txt"
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:

        @task.atomic_batch(
            conn_id=store_conn,
            table="jobs",
            where=PENDING,
            mode="delete",
            post_execute=lost_after_commit,
        )
        def process(row: dict) -> None:
            with calls.open("a") as log:
                log.write(row["key"] + "\n")

        process()

    run = run_dag(dag)
    # The retry replayed the deleted batch and found every outcome under its bounded key.
    assert (run.state_of("process"), run.try_number_of("process")) == ("success", 2)
    assert run.xcom("process") == {"claimed": 5, "done": 5, "failed": 0, "skipped": 0}
    assert sorted(calls.read_text().splitlines()) == keys
    with AtomicStore(store_url) as store:
        assert store.query("jobs") == []
        outcomes = store.query("jobs_outcomes")
    assert sorted(row["value"]["row"] for row in outcomes) == keys
    assert {row["value"]["status"] for row in outcomes} == {"done"}
    assert all(len(row["key"].encode()) <= MAX_KEY_BYTES for row in outcomes)
    assert all("sha256:" in row["key"] for row in outcomes)


def _queue(store_url: str, table: str = "jobs") -> None:
    with AtomicStore(store_url) as store:
        for number in range(4):
            store.put(table, f"job-{number}", {"status": "pending"})
        store.put("jobs_outcomes", "earlier", {"status": "done"})


#: Batch arguments refused before the claim, and the field the failure names.
REFUSED_BATCHES: dict[str, tuple[dict[str, Any], str]] = {
    "outcomes-table-too-long": ({"outcomes_table": "o" * 600}, "outcomes_table"),
    "outcomes-table-empty": ({"outcomes_table": ""}, "outcomes_table"),
    "outcomes-table-is-the-queue": ({"outcomes_table": "jobs"}, "outcomes_table"),
    "mode-misspelt": ({"mode": "remove"}, "mode"),
    "limit-0": ({"limit": 0}, "limit"),
    "where-unknown-operator": (
        {"where": [{"field": "status", "operator": "is", "value": "pending"}]},
        "where[0].operator",
    ),
    "idempotency-key-too-long": ({"idempotency_key": "k" * 1025}, "idempotency_key"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_BATCHES))
def test_a_refused_delete_mode_batch_fails_at_once_with_nothing_deleted(
    run_dag: RunDag,
    store_conn: str,
    store_url: str,
    dag_id: str,
    case: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    arguments, field = REFUSED_BATCHES[case]
    _queue(store_url)
    before = dump_store(store_url)
    calls = tmp_path / "calls.txt"
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:

        @task.atomic_batch(
            conn_id=store_conn, table="jobs", **{"where": PENDING, "mode": "delete", **arguments}
        )
        def process(row: dict) -> None:
            calls.write_text("called")

        process()

    run = run_dag(dag)
    # Not retried: retrying cannot fix a bad argument, and nothing was claimed.
    assert (run.state_of("process"), run.try_number_of("process")) == ("failed", 1)
    assert not calls.exists()
    assert dump_store(store_url) == before
    assert f"process: invalid spec: {field}: " in capsys.readouterr().out


def test_a_delete_mode_batch_whose_default_outcomes_table_would_be_too_long_deletes_nothing(
    run_dag: RunDag,
    store_conn: str,
    store_url: str,
    dag_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = "t" * 505  # a valid table name; "<table>_outcomes" is 514 bytes
    _queue(store_url, table)
    before = dump_store(store_url)
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:

        @task.atomic_batch(conn_id=store_conn, table=table, where=PENDING, mode="delete")
        def process(row: dict) -> None:
            raise AssertionError("no row may be claimed")

        process()

    run = run_dag(dag)
    assert (run.state_of("process"), run.try_number_of("process")) == ("failed", 1)
    assert dump_store(store_url) == before
    assert "process: invalid spec: outcomes_table: the default " in capsys.readouterr().out


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"return_fields": [""]}, id="return-fields"),
        pytest.param({"table": "{{ params.missing }}"}, id="table-rendered-to-nothing"),
        pytest.param({"order_by": "value.n"}, id="order-by"),
    ],
)
def test_a_refused_delete_mode_claim_operator_fails_at_once_with_nothing_deleted(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str, arguments: dict[str, Any]
) -> None:
    _queue(store_url)
    before = dump_store(store_url)
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:
        AtomicClaimOperator(
            task_id="take",
            conn_id=store_conn,
            **{"table": "jobs", "where": PENDING, "mode": "delete", **arguments},
        )
    run = run_dag(dag)
    assert (run.state_of("take"), run.try_number_of("take")) == ("failed", 1)
    assert dump_store(store_url) == before


def test_a_delete_mode_batch_whose_function_cannot_take_a_row_fails_at_once_with_nothing_deleted(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    """Its signature does not depend on the row: checked once, before the claim, it used
    to fail every row of the deleted batch instead (each outcome ``failed``)."""
    _queue(store_url)
    before = dump_store(store_url)

    def needs_a_customer(row: dict, customer: str) -> None:  # nothing gives "customer"
        raise AssertionError("never called")

    with new_dag(dag_id, default_args=ONE_RETRY) as dag:

        @task.atomic_batch(conn_id=store_conn, table="jobs", where=PENDING, mode="delete")
        def process(params: dict) -> None:  # the row would take the name of a context value
            raise AssertionError("never called")

        process()
        AtomicBatchOperator(
            task_id="operator",
            conn_id=store_conn,
            table="jobs",
            where=PENDING,
            mode="delete",
            process_row=needs_a_customer,
        )

    run = run_dag(dag)
    assert (run.state_of("process"), run.try_number_of("process")) == ("failed", 1)
    assert (run.state_of("operator"), run.try_number_of("operator")) == ("failed", 1)
    assert dump_store(store_url) == before


def test_a_failed_row_of_a_delete_mode_batch_keeps_its_value_in_its_outcome(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    """The queue no longer holds it: the dead-letter entry is all there is to re-queue."""
    with AtomicStore(store_url) as store:
        store.put("jobs", "ok", {"status": "pending", "payload": 1})
        store.put("jobs", "bad", {"status": "pending", "payload": 2})
    with new_dag(dag_id) as dag:

        @task.atomic_batch(conn_id=store_conn, table="jobs", where=PENDING, mode="delete")
        def process(row: dict) -> None:
            if row["key"] == "bad":
                raise ValueError("refused")

        process()

    run = run_dag(dag)
    assert run.xcom("process") == {"claimed": 2, "done": 1, "failed": 1, "skipped": 0}
    with AtomicStore(store_url) as store:
        outcomes = {row["value"]["row"]: row["value"] for row in store.query("jobs_outcomes")}
    assert outcomes["bad"]["value"] == {"status": "pending", "payload": 2}
    assert outcomes["bad"]["error"] == "ValueError: refused"
    assert "value" not in outcomes["ok"]
