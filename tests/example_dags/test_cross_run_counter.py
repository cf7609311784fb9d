"""example_dags/cross_run_counter.py end to end (both backends; concurrent runs in
test_when_runs_overlap.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_atomic_store import AtomicStore
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag

RunDag = Callable[..., DagRunResult]


def test_each_run_adds_exactly_one_to_the_shared_count(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    dag = example_dag("cross_run_counter")

    runs = [run_dag(dag, conf=conf) for _ in range(2)]

    assert [run.state for run in runs] == ["success"] * 2
    assert [run.xcom("seed_counter")["inserted"] for run in runs] == [True, False]
    assert [run.xcom("report") for run in runs] == [1, 2]
    with AtomicStore(store_url) as store:
        assert store.get("counters", "runs") == {"count": 2, "lastRunBy": runs[-1].execution_id}
