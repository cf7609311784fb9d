"""Stale-claim recovery: finish the rows of dispatcher runs that died mid-batch.

A dispatcher run that crashes after its claim leaves its rows ``in_flight`` for
good: no other dispatcher claims them, because its claim selects ``pending`` rows.
This DAG runs on its own schedule and re-claims every ``in_flight`` row whose
``claimedAt`` is older than a threshold, re-stamping ``claimedAt`` and ``claimedBy``
so the dead run (should it come back) can no longer finish them, then processes
them exactly as the dispatcher does (the same mapped task, from _queue_processing.py).

One filter cannot say "pending OR (in_flight AND stale)", so draining and recovery
are two separate scheduled passes. Pick a threshold well above the longest time a
healthy dispatcher run holds a batch.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from _queue_processing import QUEUE_PARAMS, process_claimed_rows
from airflow.sdk import Param, dag

from airflow_atomic_store import AtomicClaimOperator


@dag(
    schedule=timedelta(minutes=15),
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    tags=["atomic-store", "recipe"],
    params={
        **QUEUE_PARAMS,
        "stale_after_seconds": Param(
            600, type="number", minimum=0, description="re-claim rows claimed longer ago"
        ),
        "batch_size": Param(100, type="integer", minimum=1, maximum=1000),
    },
)
def stale_claim_recovery() -> None:
    # [START reclaim]
    reclaim = AtomicClaimOperator(
        task_id="reclaim",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        where=[
            {"field": "status", "operator": "equals", "value": "in_flight"},
            {
                "field": "claimedAt",
                "operator": "lt",
                "value": "{{ atomic.ago(seconds=params.stale_after_seconds) }}",
            },
        ],
        mutations=[  # the default claim mutation, plus a count of recoveries
            {"field": "status", "operation": "set", "value": "in_flight"},
            {"field": "claimedAt", "operation": "set", "value": "{{ atomic.now }}"},
            {"field": "claimedBy", "operation": "set", "value": "{{ atomic.execution_id }}"},
            {"field": "recoveries", "operation": "increment", "value": 1},
        ],
        limit="{{ params.batch_size }}",
    )
    process_claimed_rows(reclaim)  # exactly as the dispatcher processes its rows
    # [END reclaim]


stale_claim_recovery_dag = stale_claim_recovery()
