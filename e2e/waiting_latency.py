"""``python -m e2e.waiting_latency``: how fast a waiter gets a released slot, in ``dag.test()``.

docs/waiting.md compares two delays measured in the same process, on both backends:

* **release to next holder**: a ``semaphore_load`` run (one slot) finds the slot held
  and defers; another OS process frees the slot at a recorded moment (after the run's
  first claim has found nothing); the delay runs to the ``claimedAt`` its resumed
  acquire wrote. It holds the trigger noticing the write (PostgreSQL: a
  notification; SQLite: the next poll, every second) plus Airflow resuming the task.
* **Airflow's own trigger-to-task floor**: a DAG of one ``DateTimeSensorAsync`` whose
  target is two seconds ahead (Airflow's ``DateTimeTrigger`` sleeps exactly until it);
  the delay runs from the target to the end of the resumed task. It holds Airflow
  resuming the task and nothing of ours.

``dag.test()`` runs the trigger inline and resumes the task in its own process: these
are the provider's and Airflow's parts of the delay without a scheduler loop or a
triggerer process between them. Under the real deployment (``make e2e``'s semaphore
phase) both delays grow by the scheduler's and executor's share, alike.
Prints a JSON summary (medians and all samples, in seconds).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
ROUNDS = 5


def release_to_next_holder(url: str, conn_id: str, dag: Any) -> float:
    from airflow_atomic_store import AtomicStore, timestamps
    from devkit import late_writer
    from devkit.dagrun import run_dag_test

    with AtomicStore(url) as store:
        store.put(
            "slots", "slot-0", {"status": "held", "claimedBy": "x", "claimedAt": timestamps.now()}
        )
    # Frees the slot half a second after the run's first acquire found it held (its
    # receipt), and prints the moment it did.
    releaser = late_writer.start(
        url,
        "slots",
        "slot-0",
        0.5,
        {"status": "free"},
        after_receipt="semaphore_load/%/acquire/-1",
        stdout=subprocess.PIPE,
    )
    run = run_dag_test(
        dag, conf={"conn_id": conn_id, "table": "slots", "slots": 1, "work_seconds": 0}
    )
    released_at = float(releaser.communicate(timeout=120)[0].decode().strip())
    if run.state != "success":
        raise RuntimeError(f"the semaphore run ended {run.state}")
    claimed_at = run.xcom("acquire")["claimed"][0]["value"]["claimedAt"]
    return timestamps.parse_timestamp(claimed_at).timestamp() - released_at


def trigger_to_task(dag_factory: Any) -> float:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from devkit.dagrun import run_dag_test

    target = time.time() + 2.0
    dag = dag_factory(target)
    run = run_dag_test(dag)
    with create_session() as session:
        ti = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == run.run_id
            )
        ).one()
        if ti.end_date is None or run.state != "success":
            raise RuntimeError(f"the floor's sensor ended {run.state}")
        return ti.end_date.timestamp() - target


def sensor_dag(target: float) -> Any:
    from datetime import datetime, timezone

    from airflow.providers.standard.sensors.date_time import DateTimeSensorAsync

    from devkit.dagrun import new_dag

    with new_dag("waiting_latency_floor") as dag:
        DateTimeSensorAsync(
            task_id="wait", target_time=datetime.fromtimestamp(target, timezone.utc).isoformat()
        )
    return dag


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="waiting-latency-"))
    sys.path.insert(0, str(PROJECT))
    from devkit.airflow_home import dag_test_environment
    from devkit.postgres_server import PostgresServer

    (work / "home" / "dags").mkdir(parents=True)
    os.environ.update(dag_test_environment(work / "home", AIRFLOW__LOGGING__LOGGING_LEVEL="ERROR"))
    from airflow.utils import db

    db.resetdb()
    from devkit.examples import example_dag

    dag = example_dag("semaphore_load")
    summary: dict[str, Any] = {}
    with PostgresServer() as server:
        urls = {
            "sqlite": f"sqlite:///{work / 'store.db'}",
            "postgres": server.create_database("waiting"),
        }
        for backend, url in urls.items():
            conn_id = f"waiting_{backend}"
            os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = url
            handover = [release_to_next_holder(url, conn_id, dag) for _ in range(ROUNDS)]
            floor = [trigger_to_task(sensor_dag) for _ in range(ROUNDS)]
            summary[backend] = {
                "release_to_next_holder_p50": round(statistics.median(handover), 3),
                "trigger_to_task_floor_p50": round(statistics.median(floor), 3),
                "release_to_next_holder": [round(x, 3) for x in handover],
                "trigger_to_task_floor": [round(x, 3) for x in floor],
            }
    summary["load_average"] = os.getloadavg()
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
