"""A task retried after the store committed replays its result instead of applying again.

Each test's first try fails right after its primitive committed (``post_execute``
raising on try 1, as a worker lost after the commit would), and Airflow retries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_atomic_store import (
    AtomicClaimOperator,
    AtomicStore,
    AtomicUpdateOperator,
    AtomicUpsertOperator,
)
from devkit.dagrun import DagRunResult, new_dag
from tests.support.specs import INCREMENT, ONE_RETRY, PENDING

RunDag = Callable[..., DagRunResult]


def lost_after_commit(context: Any, result: Any = None) -> None:
    if context["ti"].try_number == 1:
        raise RuntimeError("the worker was lost after the store committed")


def test_a_retried_counter_increment_counts_once(run_dag: RunDag, store_conn, store_url, dag_id):
    with AtomicStore(store_url) as store:
        store.atomic_upsert("counters", "runs", insert_value={"n": 0})
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:
        AtomicUpdateOperator(
            task_id="count",
            conn_id=store_conn,
            table="counters",
            key="runs",
            mutations=INCREMENT,
            post_execute=lost_after_commit,
        )
    run = run_dag(dag)
    assert (run.state_of("count"), run.try_number_of("count")) == ("success", 2)
    assert run.xcom("count") == {
        "updated": True,
        "value": {"n": 1},
        "key": "runs",
        "replayed": True,
    }
    with AtomicStore(store_url) as store:
        assert store.get("counters", "runs") == {"n": 1}


def test_a_retried_guarded_take_takes_one_token(run_dag: RunDag, store_conn, store_url, dag_id):
    with AtomicStore(store_url) as store:
        store.atomic_upsert("buckets", "api", insert_value={"tokens": 3})
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:
        AtomicUpdateOperator(
            task_id="take",
            conn_id=store_conn,
            table="buckets",
            key="api",
            where=[{"field": "tokens", "operator": "gt", "value": 0}],
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
            post_execute=lost_after_commit,
        )
    run = run_dag(dag)
    assert run.state_of("take") == "success"
    with AtomicStore(store_url) as store:
        assert store.get("buckets", "api") == {"tokens": 2}


def test_a_retried_claim_gets_its_first_batch_back(run_dag: RunDag, store_conn, store_url, dag_id):
    with AtomicStore(store_url) as store:
        for number in range(6):
            store.put("jobs", f"j-{number}", {"status": "pending"})
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:
        AtomicClaimOperator(
            task_id="drain",
            conn_id=store_conn,
            table="jobs",
            where=PENDING,
            limit=2,
            post_execute=lost_after_commit,
        )
    run = run_dag(dag)
    assert run.try_number_of("drain") == 2
    result = run.xcom("drain")
    assert [row["key"] for row in result["claimed"]] == ["j-0", "j-1"] and result["replayed"]
    with AtomicStore(store_url) as store:
        in_flight = store.query(
            "jobs", where=[{"field": "status", "operator": "equals", "value": "in_flight"}]
        )
    assert [row["key"] for row in in_flight] == ["j-0", "j-1"]
    assert {row["value"]["claimedBy"] for row in in_flight} == {run.execution_id}


def test_a_retried_first_writer_upsert_still_says_it_inserted(
    run_dag: RunDag, store_conn, store_url, dag_id
):
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:
        AtomicUpsertOperator(
            task_id="seen",
            conn_id=store_conn,
            table="events",
            key="e-1",
            insert_value={"by": "{{ run_id }}"},
            post_execute=lost_after_commit,
        )
    run = run_dag(dag)
    assert run.xcom("seen")["inserted"] is True and run.xcom("seen")["replayed"] is True


def test_idempotent_false_applies_on_every_try_and_a_templated_key_is_used(
    run_dag: RunDag, store_conn, store_url, dag_id, capsys: pytest.CaptureFixture[str]
):
    with AtomicStore(store_url) as store:
        store.atomic_upsert("counters", "plain", insert_value={"n": 0})
        store.atomic_upsert("counters", "keyed", insert_value={"n": 0})
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:
        AtomicUpdateOperator(
            task_id="every_try",
            conn_id=store_conn,
            table="counters",
            key="plain",
            mutations=INCREMENT,
            idempotent=False,
            post_execute=lost_after_commit,
        )
        AtomicUpdateOperator(
            task_id="own_key",
            conn_id=store_conn,
            table="counters",
            key="keyed",
            mutations=INCREMENT,
            idempotency_key="daily-{{ dag_run.conf.get('day', 'd1') }}",
            post_execute=lost_after_commit,
        )
    run = run_dag(dag)
    assert "replayed" not in run.xcom("every_try")
    with AtomicStore(store_url) as store:
        assert store.get("counters", "plain") == {"n": 2}
        assert store.get("counters", "keyed") == {"n": 1}
        # The templated key is what was recorded: a direct call with it replays.
        replay = store.atomic_update(
            "counters", "keyed", mutations=INCREMENT, idempotency_key="daily-d1"
        )
        assert replay["replayed"] is True
    assert (
        "replayed: an earlier try of this task instance already applied" in capsys.readouterr().out
    )


def test_mapped_instances_each_have_their_own_key(run_dag: RunDag, store_conn, store_url, dag_id):
    with AtomicStore(store_url) as store:
        store.atomic_upsert("counters", "mapped", insert_value={"n": 0})
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:
        AtomicUpdateOperator.partial(
            task_id="count",
            conn_id=store_conn,
            table="counters",
            key="mapped",
            post_execute=lost_after_commit,
        ).expand(mutations=[INCREMENT, INCREMENT, INCREMENT])
    run = run_dag(dag)
    assert [run.state_of("count", i) for i in range(3)] == ["success"] * 3
    with AtomicStore(store_url) as store:
        assert store.get("counters", "mapped") == {"n": 3}


def test_a_key_reused_for_another_row_fails_at_once(run_dag: RunDag, store_conn, store_url, dag_id):
    with AtomicStore(store_url) as store:
        store.atomic_upsert("counters", "a", insert_value={"n": 0})
        store.atomic_upsert("counters", "b", insert_value={"n": 0})
        store.atomic_update("counters", "a", mutations=INCREMENT, idempotency_key="shared")
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:
        AtomicUpdateOperator(
            task_id="count_b",
            conn_id=store_conn,
            table="counters",
            key="b",
            mutations=INCREMENT,
            idempotency_key="shared",
        )
    run = run_dag(dag)
    assert (run.state_of("count_b"), run.try_number_of("count_b")) == ("failed", 1)
    with AtomicStore(store_url) as store:
        assert store.get("counters", "b") == {"n": 0}
