"""DAG runs that branch on, or short-circuit on, a primitive's result (both backends)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk import task

from airflow_atomic_store import (
    AtomicClaimOperator,
    AtomicStore,
    AtomicUpdateOperator,
    AtomicUpsertOperator,
)
from devkit.dagrun import DagRunResult, new_dag

RunDag = Callable[..., DagRunResult]


def test_a_branch_follows_the_upsert_result_so_each_event_is_processed_once(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with new_dag(dag_id) as dag:
        first_delivery = AtomicUpsertOperator(
            task_id="first_delivery",
            conn_id=store_conn,
            table="processed_events",
            key="{{ dag_run.conf['event_id'] }}",
            insert_value={
                "claimedAt": "{{ atomic.now }}",
                "payload": "{{ dag_run.conf['payload'] }}",
            },
        )

        @task.branch
        def choose(result: dict) -> str:
            return "process" if result["inserted"] else "skip_duplicate"

        @task
        def process() -> None: ...

        @task
        def skip_duplicate() -> None: ...

        choose(first_delivery.output) >> [process(), skip_duplicate()]

    conf = {"event_id": "evt-42", "payload": {"amount": 5}}
    first = run_dag(dag, conf=conf)
    again = run_dag(dag, conf=conf)

    assert first.state == again.state == "success"
    assert (first.state_of("process"), first.state_of("skip_duplicate")) == ("success", "skipped")
    assert (again.state_of("process"), again.state_of("skip_duplicate")) == ("skipped", "success")
    assert again.xcom("first_delivery")["inserted"] is False
    assert again.xcom("first_delivery")["value"] == first.xcom("first_delivery")["value"]
    with AtomicStore(store_url) as store:
        assert store.get("processed_events", "evt-42")["payload"] == {"amount": 5}


def test_short_circuit_skips_downstream_only_once_the_token_bucket_is_empty(
    run_dag: RunDag,
    store_conn: str,
    store_url: str,
    dag_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with new_dag(dag_id) as dag:
        seed = AtomicUpsertOperator(
            task_id="seed_bucket",
            conn_id=store_conn,
            table="rate_limits",
            key="external-api",
            insert_value={"tokens": 1},
        )
        take_token = AtomicUpdateOperator(
            task_id="take_token",
            conn_id=store_conn,
            table="rate_limits",
            key="external-api",
            where=[{"field": "tokens", "operator": "gt", "value": 0}],
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
            short_circuit=True,
        )

        @task
        def call_api() -> None: ...

        @task
        def record() -> None: ...

        seed >> take_token >> call_api() >> record()

    with_token = run_dag(dag)
    without = run_dag(dag)
    logs = capsys.readouterr().out

    assert with_token.states() == {
        "seed_bucket": "success",
        "take_token": "success",
        "call_api": "success",
        "record": "success",
    }
    assert with_token.xcom("take_token") == {
        "updated": True,
        "value": {"tokens": 0},
        "key": "external-api",
        "replayed": False,  # operators call with the task instance's idempotency key
    }
    assert without.state == "success"
    assert without.states() == {
        "seed_bucket": "success",
        "take_token": "success",
        "call_api": "skipped",
        "record": "skipped",
    }
    assert without.xcom("take_token") == {
        "updated": False,
        "value": None,
        "key": "external-api",
        "replayed": False,
    }
    with AtomicStore(store_url) as store:
        assert store.get("rate_limits", "external-api") == {"tokens": 0}
    assert "inserted key 'external-api' into rate_limits" in logs
    assert "key 'external-api' already in rate_limits: left unchanged" in logs
    assert "updated key 'external-api' in rate_limits" in logs
    assert "did not update key 'external-api' in rate_limits" in logs


def test_short_circuit_applies_to_every_primitive_and_only_on_empty_results(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with AtomicStore(store_url) as store:
        store.put("leases", "dispatcher", {"holder": "someone-else"})
        store.put("pending_ops", "op-1", {"status": "pending"})

    def after(name: str):
        @task(task_id=name)
        def noop() -> None: ...

        return noop()

    common: dict[str, Any] = {"conn_id": store_conn, "short_circuit": True}
    with new_dag(dag_id) as dag:
        AtomicUpsertOperator(
            task_id="lease_held", table="leases", key="dispatcher", insert_value={}, **common
        ) >> after("lease_held_after")
        AtomicUpsertOperator(
            task_id="lease_free", table="leases", key="reaper", insert_value={}, **common
        ) >> after("lease_free_after")
        (
            AtomicClaimOperator(task_id="queue_empty", table="nothing_here", **common)
            >> after("queue_empty_after")
            >> after("queue_empty_after_after")
        )
        AtomicClaimOperator(task_id="queue_has_work", table="pending_ops", **common) >> after(
            "queue_has_work_after"
        )
        AtomicUpdateOperator(
            task_id="row_missing",
            table="leases",
            key="nobody",
            mutations=[{"field": "n", "operation": "increment", "value": 1}],
            **common,
        ) >> after("row_missing_after")

    run = run_dag(dag)

    assert run.state == "success"
    for name in ("lease_held", "lease_free", "queue_empty", "queue_has_work", "row_missing"):
        assert run.state_of(name) == "success", name
    assert run.state_of("lease_held_after") == "skipped"
    assert run.state_of("lease_free_after") == "success"
    assert run.state_of("queue_empty_after") == run.state_of("queue_empty_after_after") == "skipped"
    assert run.state_of("queue_has_work_after") == "success"
    assert run.state_of("row_missing_after") == "skipped"
    # A short-circuiting task still publishes its (empty) result.
    assert run.xcom("lease_held")["inserted"] is False
    assert run.xcom("queue_empty") == {"claimed": [], "count": 0, "replayed": False}
    assert run.xcom("row_missing") == {
        "updated": False,
        "value": None,
        "key": "nobody",
        "replayed": False,
    }
    assert run.xcom("queue_has_work")["count"] == 1
