"""``AtomicClaimOperator(mode="delete")`` in real DAG runs, retried too (both backends)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_atomic_store import AtomicClaimOperator, AtomicStore
from devkit.dagrun import DagRunResult, new_dag
from tests.support.specs import ONE_RETRY, PENDING, THREE_RETRIES

RunDag = Callable[..., DagRunResult]


def lost_after_commit(context: Any, result: Any = None) -> None:
    if context["ti"].try_number == 1:
        raise RuntimeError("the worker was lost after the store committed")


def test_a_templated_delete_mode_claim_removes_its_batch_and_a_retry_replays_it(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with AtomicStore(store_url) as store:
        for number in range(3):
            store.put("jobs", f"job-{number}", {"status": "pending", "n": number})
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:
        AtomicClaimOperator(
            task_id="take",
            conn_id=store_conn,
            table="jobs",
            where=PENDING,
            limit=2,
            mode="{{ params.mode }}",
            params={"mode": "delete"},
            post_execute=lost_after_commit,
        )
    run = run_dag(dag)
    assert (run.state_of("take"), run.try_number_of("take")) == ("success", 2)
    result = run.xcom("take")
    assert [row["key"] for row in result["claimed"]] == ["job-0", "job-1"]
    assert result["claimed"][0]["value"] == {"status": "pending", "n": 0}
    assert result["replayed"] is True  # the retry replayed the deleted batch
    with AtomicStore(store_url) as store:
        assert [row["key"] for row in store.query("jobs")] == ["job-2"]


def test_a_delete_mode_claim_with_mutations_fails_without_retries(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with AtomicStore(store_url) as store:
        store.put("jobs", "job-0", {"status": "pending"})
    with new_dag(dag_id, default_args=THREE_RETRIES) as dag:
        AtomicClaimOperator(
            task_id="take",
            conn_id=store_conn,
            table="jobs",
            mode="delete",
            mutations=[{"field": "status", "operation": "set", "value": "x"}],
        )
    run = run_dag(dag)
    assert (run.state_of("take"), run.try_number_of("take")) == ("failed", 1)
    with AtomicStore(store_url) as store:
        assert store.get("jobs", "job-0") == {"status": "pending"}
