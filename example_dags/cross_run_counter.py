"""A counter shared by every run, however many run at once: no increment is ever lost.

A get-then-set counter loses counts: two runs read 7, both write 8. Here the row is
seeded once with an upsert, then each run increments it with an atomic update. The
increment happens inside the row, in one statement, so concurrent runs each get
their own value and the total is exact.

(An upsert with an ``increment`` mutation would do both in one step; the two steps
below follow the source document and read more plainly.)

Try it (trigger it many times at once, then look at the count)::

    airflow dags trigger cross_run_counter
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from airflow.sdk import Param, dag, task

from airflow_atomic_store import AtomicUpdateOperator, AtomicUpsertOperator


@dag(
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["atomic-store", "recipe"],
    params={
        "conn_id": Param("atomic_store_default", type="string"),
        "table": Param("counters", type="string"),
        "counter": Param("runs", type="string", description="the counter's key"),
    },
)
def cross_run_counter() -> None:
    # [START count_runs]
    seed_counter = AtomicUpsertOperator(
        task_id="seed_counter",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.counter }}",
        insert_value={"count": 0},  # seed-if-missing: later runs leave the count alone
    )
    increment = AtomicUpdateOperator(
        task_id="increment",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.counter }}",
        mutations=[
            {"field": "count", "operation": "increment", "value": 1},
            {"field": "lastRunBy", "operation": "set", "value": "{{ atomic.execution_id }}"},
        ],
    )

    @task
    def report(counted: dict[str, Any]) -> int:
        print(f"this run made {counted['key']} {counted['value']['count']}")
        return counted["value"]["count"]

    seed_counter >> increment
    report(increment.output)
    # [END count_runs]


cross_run_counter_dag = cross_run_counter()
