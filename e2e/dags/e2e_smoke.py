"""The harness's own DAG: proves a deployment runs tasks, in parallel, against the store.

``make e2e`` runs the project's example DAGs; ``python -m e2e --smoke`` runs
only this one, to check the harness itself (start, trigger, kill, stop) in a
minute or two.
"""

from __future__ import annotations

import time

from airflow.sdk import DAG, task

from airflow_atomic_store import AtomicUpsertOperator

with DAG(
    dag_id="e2e_smoke",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    params={"nap_seconds": 0, "fan_out": 3},
    tags=["e2e"],
) as dag:
    count = AtomicUpsertOperator(
        task_id="count",
        table="e2e_smoke",
        key="runs",
        insert_value={"count": 1},
        mutations=[{"field": "count", "operation": "increment", "value": 1}],
    )

    @task
    def nap(params: dict | None = None) -> list[int]:
        assert params is not None
        time.sleep(float(params["nap_seconds"]))
        return list(range(int(params["fan_out"])))

    @task
    def touch(index: int) -> int:
        return index

    napped = nap()
    count >> napped
    touch.expand(index=napped)
