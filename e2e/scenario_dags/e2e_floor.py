"""The e2e's floor DAG: one task that does nothing, so its start time is Airflow's own.

``make e2e`` triggers it through the REST API a few times and times each run from
the request to its task's start: the part of "enqueue → claimed" that no provider
can remove (the scheduler creating and starting the run, the executor starting
the task process). The event-driven dispatcher's latency is reported beside it
(``e2e/event_dispatch.py``).

Not an example DAG: it exists only to be timed.
"""

from __future__ import annotations

from datetime import datetime, timezone

from airflow.sdk import dag, task

DAG_ID = "e2e_floor"


@dag(
    dag_id=DAG_ID,
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["e2e"],
)
def e2e_floor() -> None:
    @task
    def start() -> None:
        """Nothing: the harness reads when this started."""

    start()


e2e_floor()
