"""Process each event once, however often (and however concurrently) it is delivered.

Trigger one run per delivery, with the event in the run's conf::

    airflow dags trigger process_event_once --conf '{"event_id": "evt-42", "payload": {"amount": 5}}'

The event id is the key of a seed-if-missing upsert into ``processed_events``. The
first delivery inserts the row and does the work; every later delivery finds the
row and is skipped as a duplicate. The check and the insert are one atomic step,
so two deliveries arriving at the same moment cannot both pass.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from airflow.sdk import Param, dag, task

from airflow_atomic_store import AtomicUpsertOperator


@dag(
    schedule=None,  # one run per delivery, triggered by the event source
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["atomic-store", "recipe"],
    params={
        "conn_id": Param("atomic_store_default", type="string"),
        "table": Param("processed_events", type="string", description="one row per event"),
    },
)
def process_event_once() -> None:
    # [START process_event_once]
    first_delivery = AtomicUpsertOperator(
        task_id="first_delivery",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ dag_run.conf['event_id'] }}",
        insert_value={
            "claimedAt": "{{ atomic.now }}",
            "claimedBy": "{{ atomic.execution_id }}",
            "payload": "{{ dag_run.conf.get('payload') }}",
        },  # no mutations: seed-if-missing, an existing row is left as it is
    )

    @task.branch
    def is_first_delivery(claim: dict[str, Any]) -> str:
        return "handle_event" if claim["inserted"] else "skip_duplicate"

    @task
    def handle_event(claim: dict[str, Any]) -> str:
        print(f"handling {claim['key']} with payload {claim['value']['payload']}")
        return f"handled {claim['key']}"

    @task
    def skip_duplicate(claim: dict[str, Any]) -> str:
        return f"{claim['key']} was already handled by {claim['value']['claimedBy']}"

    claim = first_delivery.output
    is_first_delivery(claim) >> [handle_event(claim), skip_duplicate(claim)]
    # [END process_event_once]


process_event_once_dag = process_event_once()
