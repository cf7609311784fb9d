"""Queue drain: producers enqueue work, dispatcher runs drain it, each item exactly once.

``queue_producer`` adds ``{"status": "pending", "payload": …}`` rows to ``pending_ops``.
``queue_dispatcher`` runs on a schedule (and may run several times at once): it
claims a batch of pending rows FIFO, processes each claimed row in its own mapped
task and marks it ``done`` (or ``failed``, with the error) with an update guarded on
``claimedBy``. The claim marks the rows ``in_flight`` in the same step that returns
them, so concurrent dispatcher runs get disjoint batches; rows of a run that died
stay ``in_flight`` until ``stale_claim_recovery`` picks them up.

Try it::

    airflow dags trigger queue_producer --conf '{"count": 25}'
    airflow dags trigger queue_dispatcher   # three times: batches of 10, 10 and 5
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import Param, dag, task

from airflow_atomic_store import AtomicClaimOperator, AtomicStoreHook
from airflow_atomic_store.spec.options import BULK_LIMIT
from airflow_atomic_store.templating import execution_id, task_instance_key

try:  # imported as airflow_atomic_store.example_dags.<module>, as provider info lists it
    from ._queue_processing import QUEUE_PARAMS, process_claimed_rows
except ImportError:  # parsed from a DAGs folder, which Airflow puts on sys.path
    from _queue_processing import QUEUE_PARAMS, process_claimed_rows

START = datetime(2025, 1, 1, tzinfo=timezone.utc)


@dag(
    schedule=None,  # producers run when there is work to hand in
    start_date=START,
    catchup=False,
    tags=["atomic-store", "recipe"],
    params={
        "conn_id": QUEUE_PARAMS["conn_id"],
        "table": QUEUE_PARAMS["table"],
        "count": Param(5, type="integer", minimum=0, description="how many items to enqueue"),
        "key_prefix": Param("op", type="string", description="item keys are <prefix>-0000…"),
    },
)
def queue_producer() -> None:
    # [START enqueue]
    @task
    def enqueue(**context: Any) -> list[str]:
        """Add ``count`` pending items; a retried or repeated run adds none twice."""
        params, added = context["params"], []
        items = [
            {
                "key": f"{params['key_prefix']}-{n:04d}",
                "insert_value": {
                    "status": "pending",
                    "payload": {"item": n},
                    "enqueuedBy": execution_id(context),
                },
            }
            for n in range(params["count"])
        ]
        with AtomicStoreHook(params["conn_id"]) as hook:
            for start in range(0, len(items), BULK_LIMIT):  # one statement per 10,000 items
                result = hook.atomic_upsert_many(  # seed-if-missing: never resets one in flight
                    params["table"],
                    items[start : start + BULK_LIMIT],
                    # a retry of this task replays what its first try inserted
                    idempotency_key=task_instance_key(context, f"items-{start}"),
                )
                added += [item["key"] for item in result["items"] if item["inserted"]]
        print(f"enqueued {len(added)} new item(s) of {params['count']}")
        return added

    enqueue()
    # [END enqueue]


@dag(
    schedule=timedelta(minutes=5),
    start_date=START,
    catchup=False,
    max_active_runs=4,  # overlapping runs are safe: claims never hand out a row twice
    tags=["atomic-store", "recipe"],
    params={
        **QUEUE_PARAMS,
        "batch_size": Param(10, type="integer", minimum=1, maximum=1000),
    },
)
def queue_dispatcher() -> None:
    # [START drain]
    drain = AtomicClaimOperator(
        task_id="drain",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        where=[{"field": "status", "operator": "equals", "value": "pending"}],
        order_by="createdAt",  # FIFO
        direction="asc",
        limit="{{ params.batch_size }}",  # a lone {{ … }} renders to its native type: an int
        # default claim mutation: status → in_flight, claimedAt → now, claimedBy → this run
    )
    process_claimed_rows(drain)  # one mapped task per claimed row (see _queue_processing.py)
    # [END drain]


queue_producer_dag = queue_producer()
queue_dispatcher_dag = queue_dispatcher()
