"""Queue housekeeping: retire finished items after a retention period, keep the dead letters.

The queue recipes mark rows in place (``pending`` → ``in_flight`` → ``done`` or
``failed``) and stamp ``finishedAt`` when they finish one. Without housekeeping the
queue's table keeps every item it ever processed: 10,000 a day is 3.6 million rows
after a year, in the table, its indexes, autovacuum's work and every backup.

This DAG runs daily and retires ``done`` rows whose ``finishedAt`` is older than
``retention_days`` with ``retire``: bounded batches of delete-claims under a time
budget, which skip rows other claims hold and never touch a ``pending`` or
``in_flight`` row, so it runs beside the dispatchers. ``failed`` rows are the
dead-letter list: they stay unless ``failed_retention_days`` is set. With
``archive_table`` every retired row is first copied there (in the same
statement), as pgmq's ``archive`` does. The report task says what went.

Why a DAG of its own, not part of ``stale_claim_recovery``: recovery must run
every few minutes (a stuck item waits for it), housekeeping once a day at a quiet
hour (it deletes in bulk and leaves work for autovacuum); one schedule cannot
serve both, and a slow housekeeping run must never delay a recovery.

Try it::

    airflow dags trigger queue_housekeeping --conf '{"retention_days": 0}'
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import Param, dag, task

from airflow_atomic_store import AtomicStoreHook

#: The longest retention ``retire`` takes: a century, in days.
MAX_DAYS = 36_500


@dag(
    schedule="@daily",
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    tags=["atomic-store", "recipe"],
    params={
        "conn_id": Param("atomic_store_default", type="string"),
        "table": Param("pending_ops", type="string", description="the queue's table"),
        # The bounds are retire's own: a run retires "done" rows and then "failed" ones,
        # and a value refused only at the second call would fail the task after the
        # first had deleted. Airflow checks params before any task runs.
        "retention_days": Param(
            7, type="number", minimum=0, maximum=MAX_DAYS, description="keep done rows"
        ),
        "failed_retention_days": Param(
            None,
            type=["null", "number"],
            minimum=0,
            maximum=MAX_DAYS,
            description="retire failed rows too, after this many days (null: keep them)",
        ),
        "archive_table": Param(
            None,
            type=["null", "string"],
            minLength=1,
            description="copy retired rows here first",
        ),
        "batch": Param(500, type="integer", minimum=1, maximum=10_000),
        "time_budget_seconds": Param(300, type="number", minimum=0, maximum=86_400),
    },
)
def queue_housekeeping() -> None:
    # [START retire_history]
    @task(multiple_outputs=True)
    def retire_history(**context: Any) -> dict[str, Any]:
        """Retire old ``done`` rows (and old ``failed`` ones, if asked) in bounded batches."""
        params = context["params"]
        passes = {"done": params["retention_days"], "failed": params["failed_retention_days"]}
        retired: dict[str, Any] = {}
        with AtomicStoreHook(params["conn_id"]) as hook:
            for status, days in passes.items():
                if days is None:
                    continue  # the dead-letter list stays
                retired[status] = hook.retire(
                    params["table"],
                    statuses=[status],
                    older_than=timedelta(days=days),
                    limit=params["batch"],
                    time_budget=params["time_budget_seconds"],
                    archive_table=params["archive_table"],
                )
        return retired

    @task
    def report(retired: dict[str, Any]) -> int:
        for status, outcome in retired.items():
            more = {
                "done": "",
                "time_budget": " (time budget spent: the next run goes on)",
                "held": " (the rest is held by other transactions: the next run goes on)",
            }[outcome["stopped"]]
            print(
                f"retired {outcome['retired']} {status} row(s) in {outcome['batches']} batch(es){more}"
            )
        return sum(outcome["retired"] for outcome in retired.values())

    report(retire_history())
    # [END retire_history]


queue_housekeeping_dag = queue_housekeeping()
