"""Templated keys and values in real DAG runs (both backends)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
from airflow.sdk import task

from airflow_atomic_store import AtomicClaimOperator, AtomicStore, AtomicUpdateOperator
from airflow_atomic_store import AtomicUpsertOperator as Upsert
from airflow_atomic_store.timestamps import format_timestamp, parse_timestamp
from devkit.dagrun import DagRunResult, new_dag

RunDag = Callable[..., DagRunResult]
ORDER = "{{ ti.xcom_pull(task_ids='produce')['order'] }}"


@pytest.mark.parametrize("native", [False, True], ids=["string-dag", "native-dag"])
def test_templates_render_context_xcom_and_atomic_values_with_native_types(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str, native: bool
) -> None:
    with new_dag(dag_id, render_template_as_native_obj=native) as dag:

        @task
        def produce() -> dict:
            return {"order": "ord-7", "qty": 3}

        record = Upsert(
            task_id="record",
            conn_id=store_conn,
            table="orders",
            key=ORDER,
            insert_value={
                "at": "{{ atomic.now }}",
                "by": "{{ atomic.execution_id }}",
                "customer": "{{ dag_run.conf['customer'] }}",
                "zip": "{{ dag_run.conf['zip'] }}",
                "tags": "{{ dag_run.conf['tags'] }}",
                "qty": "{{ ti.xcom_pull(task_ids='produce')['qty'] }}",
                "label": "qty={{ ti.xcom_pull(task_ids='produce')['qty'] }}",
                "due": "{{ atomic.from_now(days=1) }}",
                "dueEpoch": "{{ atomic.epoch_seconds_from_now(days=1) }}",
            },
        )
        bump = AtomicUpdateOperator(
            task_id="bump",
            conn_id=store_conn,
            table="orders",
            key=ORDER,
            where=[
                {
                    "field": "qty",
                    "operator": "equals",
                    "value": "{{ ti.xcom_pull(task_ids='record')['value']['qty'] }}",
                },
                {"field": "by", "operator": "equals", "value": "{{ atomic.execution_id }}"},
            ],
            mutations=[
                {"field": "qty", "operation": "increment", "value": "{{ dag_run.conf['step'] }}"}
            ],
        )
        produce() >> record >> bump

    started = datetime.now(timezone.utc)
    run = run_dag(dag, conf={"customer": "acme", "zip": "02134", "tags": ["a", "b"], "step": 2})
    finished = datetime.now(timezone.utc)

    assert run.states() == {"produce": "success", "record": "success", "bump": "success"}
    assert run.xcom("bump")["updated"] is True
    with AtomicStore(store_url) as store:
        value = store.get("orders", "ord-7")
    assert value is not None
    assert started <= parse_timestamp(value["at"]) <= finished
    assert value["by"] == run.execution_id
    assert value["customer"] == "acme"
    assert value["zip"] == "02134"  # a string that looks like a number stays a string
    assert value["tags"] == ["a", "b"]
    assert value["qty"] == 5 and isinstance(value["qty"], int)  # 3 (native) + 2 (native)
    assert value["label"] == "qty=3"
    assert parse_timestamp(value["due"]) - parse_timestamp(value["at"]) == timedelta(days=1)
    assert value["dueEpoch"] == pytest.approx(parse_timestamp(value["due"]).timestamp(), abs=1e-6)


def test_stale_claim_recovery_reclaims_only_rows_claimed_before_a_relative_time(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    now = datetime.now(timezone.utc)
    with AtomicStore(store_url) as store:
        for key, age in (("stale", timedelta(hours=1)), ("fresh", timedelta(minutes=1))):
            claimed_at = format_timestamp(now - age)
            store.put("pending_ops", key, {"status": "in_flight", "claimedAt": claimed_at})

    with new_dag(dag_id) as dag:
        AtomicClaimOperator(
            task_id="recover",
            conn_id=store_conn,
            table="pending_ops",
            where=[
                {"field": "status", "operator": "equals", "value": "in_flight"},
                {"field": "claimedAt", "operator": "lt", "value": "{{ atomic.ago(minutes=30) }}"},
            ],
            mutations=[
                {"field": "claimedAt", "operation": "set", "value": "{{ atomic.now }}"},
                {"field": "claimedBy", "operation": "set", "value": "{{ atomic.execution_id }}"},
            ],
        )

    run = run_dag(dag)

    assert run.state_of("recover") == "success"
    claimed = run.xcom("recover")["claimed"]
    assert [row["key"] for row in claimed] == ["stale"]
    assert claimed[0]["value"]["claimedBy"] == run.execution_id
    assert parse_timestamp(claimed[0]["value"]["claimedAt"]) >= now


def test_numbers_from_the_conf_name_tables_keys_and_idempotency_keys_as_text(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    """A numeric event id or shard renders as Airflow renders it ("42"), not as an int."""
    with new_dag(dag_id) as dag:
        record = Upsert(
            task_id="record",
            conn_id=store_conn,
            table="{{ dag_run.conf['shard'] }}",
            key="{{ dag_run.conf['version'] }}",
            idempotency_key="{{ dag_run.conf['event_id'] }}",
            insert_value={"event": "{{ dag_run.conf['event_id'] }}"},
        )
        drain = AtomicClaimOperator(
            task_id="drain",
            conn_id=store_conn,
            table="{{ dag_run.conf['shard'] }}",
            idempotency_key="claim-{{ dag_run.conf['event_id'] }}",
            limit="{{ dag_run.conf['shard'] }}",  # type: ignore[arg-type]  # stays a number
        )
        record >> drain

    run = run_dag(dag, conf={"event_id": 42, "shard": 7, "version": 1.5})

    assert run.states() == {"record": "success", "drain": "success"}
    assert run.xcom("record")["key"] == "1.5"
    assert [row["key"] for row in run.xcom("drain")["claimed"]] == ["1.5"]
    with AtomicStore(store_url) as store:
        value = store.get("7", "1.5")
    assert value is not None and value["event"] == 42  # a JSON value keeps its number
