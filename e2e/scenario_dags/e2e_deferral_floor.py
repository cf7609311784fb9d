"""The e2e's deferral floor DAG: one ``DateTimeSensorAsync`` that waits for ``conf["at"]``.

Airflow's ``DateTimeTrigger`` fires exactly at its moment, so the time from ``at`` to
the end of the resumed task is Airflow's own trigger-to-task delay (the triggerer's
event, the scheduler queueing the task again, the executor starting it): the floor
under any deferrable wait. ``e2e/semaphore_phase.py`` reports the semaphore's
release-to-next-holder delay beside it. Not an example DAG: it exists to be timed.
"""

from __future__ import annotations

from datetime import datetime, timezone

from airflow.providers.standard.sensors.date_time import DateTimeSensorAsync
from airflow.sdk import dag

DAG_ID = "e2e_deferral_floor"


@dag(
    dag_id=DAG_ID,
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["e2e"],
)
def e2e_deferral_floor() -> None:
    DateTimeSensorAsync(task_id="wait", target_time="{{ dag_run.conf['at'] }}")


e2e_deferral_floor()
