"""How failures meet Airflow's retries in real DAG runs (both backends)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from airflow_atomic_store import (
    AtomicClaimOperator,
    AtomicStore,
    AtomicUpdateOperator,
    AtomicUpsertOperator,
)
from tests.airflow.dagrun import DagRunResult, new_dag

RunDag = Callable[..., DagRunResult]
RETRYING = {"retries": 3, "retry_delay": timedelta(0)}


def test_invalid_specs_and_impossible_mutations_fail_at_once_without_retries(
    run_dag: RunDag,
    store_conn: str,
    store_url: str,
    dag_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with AtomicStore(store_url) as store:
        store.put("rate_limits", "api", {"tokens": "plenty"})
    with new_dag(dag_id, default_args=RETRYING) as dag:
        AtomicUpdateOperator(
            task_id="unknown_operator",
            conn_id=store_conn,
            table="rate_limits",
            key="api",
            where=[{"field": "tokens", "operator": "greater", "value": 0}],
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
        )
        AtomicClaimOperator(
            task_id="limit_too_large",
            conn_id=store_conn,
            table="pending_ops",
            limit="{{ 5000 }}",  # type: ignore[arg-type]
        )
        AtomicUpsertOperator(
            task_id="bad_path",
            conn_id=store_conn,
            table="leases",
            key="lease",
            insert_value={},
            mutations=[{"field": "holder..name", "operation": "set", "value": "x"}],
        )
        AtomicUpdateOperator(
            task_id="increment_a_string",
            conn_id=store_conn,
            table="rate_limits",
            key="api",
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
        )

    run = run_dag(dag)
    logs = capsys.readouterr().out

    assert run.state == "failed"
    for task_id in ("unknown_operator", "limit_too_large", "bad_path", "increment_a_string"):
        assert run.state_of(task_id) == "failed", task_id
        assert run.try_number_of(task_id) == 1, task_id
    assert "unknown_operator: invalid spec: where[0].operator" in logs
    assert "limit_too_large: invalid spec: limit" in logs
    assert "bad_path: invalid spec: mutations[0].field" in logs
    assert "increment_a_string: mutation cannot apply: tokens" in logs
    with AtomicStore(store_url) as store:
        assert store.get("rate_limits", "api") == {"tokens": "plenty"}  # nothing was written


def test_a_store_outage_fails_normally_so_retries_apply(
    run_dag: RunDag,
    backend: str,
    tmp_path: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    dag_id: str,
) -> None:
    if backend == "postgres":
        unreachable = "postgresql://postgres@127.0.0.1:1/atomic_store"  # nothing listens on port 1
    else:
        not_a_database = tmp_path / "store.db"  # type: ignore[operator]
        not_a_database.write_text("this file is not a SQLite database" * 100)
        unreachable = f"sqlite:///{not_a_database}"
    monkeypatch.setenv("AIRFLOW_CONN_UNREACHABLE_STORE", unreachable)
    with new_dag(dag_id, default_args={"retries": 1, "retry_delay": timedelta(0)}) as dag:
        AtomicUpsertOperator(
            task_id="seed", conn_id="unreachable_store", table="t", key="k", insert_value={}
        )

    run = run_dag(dag)

    assert (run.state_of("seed"), run.try_number_of("seed")) == ("failed", 2)


def test_a_missing_connection_fails_the_task_with_instructions(
    run_dag: RunDag, dag_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with new_dag(dag_id) as dag:
        AtomicClaimOperator(task_id="drain", conn_id="never_defined", table="pending_ops")

    run = run_dag(dag)

    assert run.state_of("drain") == "failed"
    assert "AIRFLOW_CONN_NEVER_DEFINED='sqlite:////abs/path/store.db'" in capsys.readouterr().out
