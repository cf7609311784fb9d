"""Jobs that warm Airflow workers (devkit/airflow_workers.py) run for the race tests.

Each job runs example DAGs with ``dag.test()`` in the worker's own process and
returns plain data (``DagRunResult``) for the test to check. A distinct ``run_after``
per worker keeps run ids, and so execution ids, distinct across workers.
"""

from __future__ import annotations

from typing import Any

from devkit.airflow_workers import unique_run_after
from devkit.dagrun import DagRunResult, run_dag_test
from devkit.examples import example_dag
from tests.example_dags.deferrals import Deferral, recorded_deferrals


def run_example(dag_id: str, conf: dict[str, Any], times: int = 1) -> list[DagRunResult]:
    """Run the example DAG ``dag_id`` ``times`` times, one run after another."""
    dag = example_dag(dag_id)
    return [run_dag_test(dag, conf=conf, run_after=unique_run_after()) for _ in range(times)]


def drain_until_empty(conf: dict[str, Any], claim_task: str = "drain") -> list[DagRunResult]:
    """Run the queue dispatcher until one of its runs claims nothing; return every run."""
    dag = example_dag("queue_dispatcher")
    runs: list[DagRunResult] = []
    while True:
        run = run_dag_test(dag, conf=conf, run_after=unique_run_after())
        runs.append(run)
        if run.state != "success" or not run.xcom(claim_task)["count"]:
            return runs


def run_example_recording_waits(
    dag_id: str, conf: dict[str, Any], times: int = 1
) -> tuple[list[DagRunResult], list[Deferral]]:
    """``run_example``, with every deferral of its runs (``deferrals.recorded_deferrals``)."""
    with recorded_deferrals() as waits:
        runs = run_example(dag_id, conf, times)
    return runs, list(waits)
