"""The bulk operators in real DAG runs: templated lists, XCom results, one effect per task
instance however often Airflow runs it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.sdk import task

from airflow_atomic_store import (
    AtomicClaimOperator,
    AtomicStore,
    AtomicUpdateManyOperator,
    AtomicUpsertManyOperator,
)
from devkit.dagrun import DagRunResult, new_dag
from tests.support.specs import INCREMENT, ONE_RETRY, PENDING

RunDag = Callable[..., DagRunResult]


def lost_after_commit(context: Any, result: Any = None) -> None:
    if context["ti"].try_number == 1:
        raise RuntimeError("the worker was lost after the store committed")


def test_a_retried_bulk_enqueue_replays_its_result_and_inserts_once(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with AtomicStore(store_url) as store:
        store.put("q", "b", {"status": "in_flight"})
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:
        AtomicUpsertManyOperator(
            task_id="enqueue",
            conn_id=store_conn,
            table="q",
            items=[
                {"key": key, "insert_value": {"status": "pending", "n": 0}, "mutations": INCREMENT}
                for key in ("a", "b", "c")
            ],
            post_execute=lost_after_commit,
        )
    run = run_dag(dag)
    assert (run.state_of("enqueue"), run.try_number_of("enqueue")) == ("success", 2)
    assert run.xcom("enqueue") == {
        "items": [
            {"key": "a", "inserted": True},
            {"key": "b", "inserted": False},
            {"key": "c", "inserted": True},
        ],
        "inserted": 2,
        "replayed": True,
    }
    with AtomicStore(store_url) as store:
        assert store.get("q", "b") == {"status": "in_flight", "n": 1}  # one increment
        assert [row["key"] for row in store.query("q", where=PENDING)] == ["a", "c"]


def test_a_retried_batch_finish_replays_and_applies_once(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with AtomicStore(store_url) as store:
        store.atomic_upsert_many(
            "jobs", [(f"j-{n}", {"status": "pending", "n": 0}) for n in range(5)]
        )
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:
        drain = AtomicClaimOperator(
            task_id="drain", conn_id=store_conn, table="jobs", where=PENDING, limit=3
        )

        @task
        def claimed_keys(claim: dict[str, Any]) -> list[str]:
            return [row["key"] for row in claim["claimed"]]

        finish = AtomicUpdateManyOperator(
            task_id="finish",
            conn_id=store_conn,
            table="jobs",
            keys="{{ ti.xcom_pull(task_ids='claimed_keys') }}",
            where=[
                {"field": "claimedBy", "operator": "equals", "value": "{{ atomic.execution_id }}"}
            ],
            mutations=[
                {"field": "status", "operation": "set", "value": "done"},
                *INCREMENT,
            ],
            archive_table="jobs_done",
            post_execute=lost_after_commit,
        )
        claimed_keys(drain.output) >> finish
    run = run_dag(dag)
    assert (run.state_of("finish"), run.try_number_of("finish")) == ("success", 2)
    result = run.xcom("finish")
    assert (result["updated"], result["replayed"]) == (3, True)
    assert [item["key"] for item in result["items"]] == ["j-0", "j-1", "j-2"]
    with AtomicStore(store_url) as store:
        done = store.query("jobs_done")
        assert [row["key"] for row in done] == ["j-0", "j-1", "j-2"]
        assert {row["value"]["n"] for row in done} == {1}  # applied once
        assert [row["key"] for row in store.query("jobs")] == ["j-3", "j-4"]


def test_a_bulk_enqueue_that_inserts_nothing_can_short_circuit(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with AtomicStore(store_url) as store:
        store.put("q", "a", {"status": "pending"})
    with new_dag(dag_id) as dag:
        enqueue = AtomicUpsertManyOperator(
            task_id="enqueue",
            conn_id=store_conn,
            table="q",
            items=[{"key": "a", "insert_value": {"status": "pending"}}],
            short_circuit=True,
        )

        @task
        def announce() -> None:
            raise AssertionError("skipped: nothing new was enqueued")

        enqueue >> announce()
    run = run_dag(dag)
    assert (run.state_of("enqueue"), run.state_of("announce")) == ("success", "skipped")
    assert run.xcom("enqueue")["inserted"] == 0
