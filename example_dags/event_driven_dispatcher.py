"""Event-driven queue drain: a dispatcher run starts when work arrives, not on a clock.

``event_producer`` adds ``{"status": "pending", "payload": …}`` rows to ``event_ops``.
``event_driven_dispatcher`` is scheduled on an asset whose watcher is a
``ClaimableRowsTrigger``: the triggerer counts the pending rows (on PostgreSQL it
wakes on the store's own writes, within milliseconds of their commit) and starts a
dispatcher run when some appear. The run claims a batch and processes each claimed
row exactly as the scheduled ``queue_dispatcher`` does (the same code,
``_queue_processing.py``). An idle queue starts no runs at all.

The trigger never claims: it only says "there is work". Exactly-once stays with the
claim, so a run that arrives late, or a second run for the same work, claims what is
left (possibly nothing, and then it short-circuits). The triggerer must run
(``airflow triggerer``).

A run that dies after its claim leaves its rows ``in_flight``, which neither the
watcher (it counts ``pending`` rows) nor any dispatcher run claims again:
``event_ops_stale_claim_recovery`` re-claims them on its own schedule, built by the
same factory as ``stale_claim_recovery`` (which serves ``pending_ops`` only). Every
queue table needs its own scheduled recovery with matching ``table`` and
``effects_table``.

Try it::

    airflow triggerer &
    airflow dags unpause event_driven_dispatcher
    airflow dags unpause event_ops_stale_claim_recovery
    airflow dags trigger event_producer --conf '{"count": 25}'
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from airflow.sdk import Asset, AssetWatcher, Param, dag, task

from airflow_atomic_store import AtomicClaimOperator, AtomicStoreHook
from airflow_atomic_store.templating import execution_id, task_instance_key
from airflow_atomic_store.triggers import ClaimableRowsTrigger

try:  # imported as airflow_atomic_store.example_dags.<module>, as provider info lists it
    from ._queue_processing import (
        QUEUE_PARAMS,
        process_claimed_rows,
        queue_params,
        stale_claim_recovery,
    )
except ImportError:  # parsed from a DAGs folder, which Airflow puts on sys.path
    from _queue_processing import (
        QUEUE_PARAMS,
        process_claimed_rows,
        queue_params,
        stale_claim_recovery,
    )

START = datetime(2025, 1, 1, tzinfo=timezone.utc)
TABLE, EFFECTS_TABLE = "event_ops", "event_ops_effects"
PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]

# [START watcher]
event_ops_work = Asset(
    "atomic_store_event_ops",
    watchers=[
        AssetWatcher(
            name="event_ops_pending",
            trigger=ClaimableRowsTrigger(
                conn_id="atomic_store_default",
                table=TABLE,
                where=PENDING,  # the same filter the dispatcher claims with
                poll_interval=2.0,  # SQLite's latency; PostgreSQL also wakes on writes
            ),
        )
    ],
)
# [END watcher]

EVENT_PARAMS: dict[str, Any] = queue_params(TABLE, EFFECTS_TABLE)


@dag(
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["atomic-store", "recipe"],
    params={
        "conn_id": QUEUE_PARAMS["conn_id"],
        "table": EVENT_PARAMS["table"],
        "count": Param(
            5, type="integer", minimum=0, maximum=10_000, description="how many items to enqueue"
        ),
        "key_prefix": Param("evt", type="string", description="item keys are <prefix>-0000…"),
    },
)
def event_producer() -> None:
    @task
    def enqueue(**context: Any) -> list[str]:
        """Add ``count`` pending items in one call; a retried or repeated run adds none twice."""
        params = context["params"]
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
            result = hook.atomic_upsert_many(
                params["table"], items, idempotency_key=task_instance_key(context)
            )
        return [item["key"] for item in result["items"] if item["inserted"]]

    enqueue()


# [START dispatcher]
@dag(
    schedule=[event_ops_work],  # a run when the watcher's trigger fires
    start_date=START,
    catchup=False,
    max_active_runs=4,  # overlapping runs are safe: claims never hand out a row twice
    tags=["atomic-store", "recipe"],
    params={**EVENT_PARAMS, "batch_size": Param(10, type="integer", minimum=1, maximum=1000)},
)
def event_driven_dispatcher() -> None:
    drain = AtomicClaimOperator(
        task_id="drain",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        where=PENDING,
        limit="{{ params.batch_size }}",
        short_circuit=True,  # a run whose work another run took ends here, cheaply
    )
    process_claimed_rows(drain)  # the scheduled dispatcher's per-row code, unchanged


# [END dispatcher]

event_producer_dag = event_producer()
event_driven_dispatcher_dag = event_driven_dispatcher()

# [START recovery]
# The dispatcher's claimed rows, should a run die: this queue's own scheduled recovery.
event_ops_recovery_dag = stale_claim_recovery(
    "event_ops_stale_claim_recovery", table=TABLE, effects_table=EFFECTS_TABLE
)
# [END recovery]
