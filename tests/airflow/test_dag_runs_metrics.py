"""The operators' metrics, as Airflow's ``Stats`` receives them from real DAG runs (both backends)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from airflow_atomic_store import (
    AtomicClaimOperator,
    AtomicStore,
    AtomicUpdateOperator,
    AtomicUpsertOperator,
)
from devkit.dagrun import DagRunResult, new_dag
from tests.support.airflow_stats import RecordingStatsLogger, Sent, recorded_stats

RunDag = Callable[..., DagRunResult]


@pytest.fixture
def stats() -> Iterator[RecordingStatsLogger]:
    with recorded_stats() as recorder:
        yield recorder


def counted(stats: RecordingStatsLogger, name: str) -> float:
    return sum(s.value for s in stats.sent if s.name == name and s.kind == "incr")


def only(stats: RecordingStatsLogger, name: str) -> Sent:
    (sent,) = [s for s in stats.sent if s.name == name]
    return sent


def test_each_primitive_counts_its_calls_time_and_empty_results_per_table(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str, stats: RecordingStatsLogger
) -> None:
    with AtomicStore(store_url) as store:
        store.put("jobs", "a", {"status": "pending"})
        store.put("jobs", "b", {"status": "pending"})
    with new_dag(dag_id) as dag:
        claim = AtomicClaimOperator(
            task_id="claim",
            conn_id=store_conn,
            table="jobs",
            where=[{"field": "status", "operator": "equals", "value": "pending"}],
            limit=10,
        )
        claim_again = AtomicClaimOperator(
            task_id="claim_again",
            conn_id=store_conn,
            table="jobs",
            where=[{"field": "status", "operator": "equals", "value": "pending"}],
        )
        guarded = AtomicUpdateOperator(
            task_id="guarded",
            conn_id=store_conn,
            table="jobs",
            key="a",
            where=[{"field": "status", "operator": "equals", "value": "pending"}],
            mutations=[{"field": "status", "operation": "set", "value": "done"}],
        )
        seed = AtomicUpsertOperator(
            task_id="seed",
            conn_id=store_conn,
            table="counters.daily",
            key="runs",
            insert_value={"n": 0},
        )
        claim >> claim_again >> guarded >> seed

    result = run_dag(dag)

    assert result.state == "success"
    assert counted(stats, "atomic_store.claim.calls") == 2
    assert counted(stats, "atomic_store.claim.calls.jobs") == 2
    assert counted(stats, "atomic_store.claim.rows") == 2  # both pending rows, in one call
    assert counted(stats, "atomic_store.claim.rows.jobs") == 2
    assert counted(stats, "atomic_store.claim.empty") == 1  # the second claim found nothing
    assert counted(stats, "atomic_store.update.calls") == 1
    assert counted(stats, "atomic_store.update.empty") == 1  # "a" is in_flight: guard failed
    assert counted(stats, "atomic_store.upsert.calls") == 1
    assert counted(stats, "atomic_store.upsert.empty") == 0  # inserted: not empty
    # a dot in a table name would add a StatsD level: it becomes "__"
    assert counted(stats, "atomic_store.upsert.calls.counters__daily") == 1
    durations = [s for s in stats.sent if s.name == "atomic_store.claim.duration"]
    assert len(durations) == 2 and all(s.kind == "timing" and s.value >= 0 for s in durations)
    assert only(stats, "atomic_store.update.calls").tags == {
        "table": "jobs",
        "dag_id": dag_id,
        "task_id": "guarded",
    }
    assert counted(stats, "atomic_store.claim.errors") == 0


def test_a_failed_primitive_counts_its_error_by_kind(
    run_dag: RunDag, store_conn: str, dag_id: str, stats: RecordingStatsLogger
) -> None:
    with new_dag(dag_id) as dag:
        AtomicUpdateOperator(
            task_id="bad_guard",
            conn_id=store_conn,
            table="jobs",
            key="a",
            where=[{"field": "status", "operator": "resembles", "value": "x"}],
            mutations=[{"field": "status", "operation": "set", "value": "done"}],
        )

    result = run_dag(dag)

    assert result.state_of("bad_guard") == "failed"
    errors = only(stats, "atomic_store.update.errors")
    assert errors.tags == {
        "table": "jobs",
        "dag_id": dag_id,
        "task_id": "bad_guard",
        "kind": "spec",
    }
    assert counted(stats, "atomic_store.update.errors.spec.jobs") == 1
    assert counted(stats, "atomic_store.update.calls") == 1
    assert stats.named("atomic_store.update.empty") == []


def lost_after_commit(context: Any, result: Any = None) -> None:
    if context["ti"].try_number == 1:
        raise RuntimeError("the worker was lost after the store committed")


def test_a_retried_task_counts_its_replay(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str, stats: RecordingStatsLogger
) -> None:
    with new_dag(dag_id, default_args={"retries": 1, "retry_delay": timedelta(0)}) as dag:
        AtomicUpsertOperator(
            task_id="bump",
            conn_id=store_conn,
            table="counters",
            key="runs",
            insert_value={"n": 1},
            mutations=[{"field": "n", "operation": "increment", "value": 1}],
            post_execute=lost_after_commit,
        )

    result = run_dag(dag)

    assert (result.state_of("bump"), result.try_number_of("bump")) == ("success", 2)
    assert counted(stats, "atomic_store.upsert.calls") == 2
    assert counted(stats, "atomic_store.upsert.replayed") == 1
    assert counted(stats, "atomic_store.upsert.replayed.counters") == 1
    with AtomicStore(store_url) as store:
        assert store.get("counters", "runs") == {"n": 1}
