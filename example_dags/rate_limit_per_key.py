"""Rate limit per key: callers reserve evenly spaced slots and wait for theirs.

Rather than a pool of tokens, each key (an API, a customer, a host) has a
"next available at" time, ``nextSlotAt``, in epoch seconds. Every caller
atomically advances it by the interval and takes the slot it advanced from, so
concurrent callers get distinct slots one interval apart, then waits until its
slot before calling out. Calls are spread evenly instead of bursting.

Reset-if-stale: after a quiet spell ``nextSlotAt`` lies in the past, and callers
would reserve past slots and burst. So before reserving, a guarded update moves a
stale ``nextSlotAt`` up to now; it only ever moves the value forward, so it cannot
hand out a slot that someone else already holds.

Each caller records its call (slot and actual time) in ``rate_limited_calls``.

Try it (trigger several at once)::

    airflow dags trigger rate_limit_per_key --conf '{"key": "api.example.com", "interval_seconds": 2}'
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from airflow.sdk import Param, dag, task

from airflow_atomic_store import (
    AtomicStoreHook,
    AtomicUpdateOperator,
    AtomicUpsertOperator,
    timestamps,
)
from airflow_atomic_store.templating import execution_id


@dag(
    schedule=None,  # one run per call to make
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["atomic-store", "recipe"],
    params={
        "conn_id": Param("atomic_store_default", type="string"),
        "table": Param("call_slots", type="string", description="one row per rate-limited key"),
        "key": Param("external-api", type="string", description="what the limit applies to"),
        "interval_seconds": Param(1.0, type="number", exclusiveMinimum=0),
        "calls_table": Param("rate_limited_calls", type="string", description="one row per call"),
    },
)
def rate_limit_per_key() -> None:
    # [START reserve_slot]
    seed_slot = AtomicUpsertOperator(
        task_id="seed_slot",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.key }}",
        insert_value={"nextSlotAt": "{{ atomic.epoch_seconds }}"},  # seed-if-missing
    )
    reset_if_stale = AtomicUpdateOperator(
        task_id="reset_if_stale",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.key }}",
        where=[{"field": "nextSlotAt", "operator": "lt", "value": "{{ atomic.epoch_seconds }}"}],
        mutations=[
            {"field": "nextSlotAt", "operation": "set", "value": "{{ atomic.epoch_seconds }}"}
        ],
    )
    reserve_slot = AtomicUpdateOperator(
        task_id="reserve_slot",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.key }}",
        mutations=[
            {
                "field": "nextSlotAt",
                "operation": "increment",
                "value": "{{ params.interval_seconds }}",
            }
        ],
    )
    # [END reserve_slot]

    # [START call_at_slot]
    @task
    def call_at_slot(reserved: dict[str, Any], **context: Any) -> dict[str, Any]:
        """Wait for the reserved slot, then make the call (simulated) and record it."""
        params, started = context["params"], time.time()
        slot = reserved["value"]["nextSlotAt"] - params["interval_seconds"]
        while (wait := slot - time.time()) > 0:
            time.sleep(wait)
        called_at = time.time()  # the external call would start here
        call = {
            "key": params["key"],
            "slot": slot,
            "calledAt": called_at,
            "calledAtTimestamp": timestamps.now(),
            "waitedSeconds": round(called_at - started, 3),
        }
        with AtomicStoreHook(params["conn_id"]) as hook:
            hook.put(params["calls_table"], execution_id(context), call)
        return call

    seed_slot >> reset_if_stale >> reserve_slot
    call_at_slot(reserve_slot.output)
    # [END call_at_slot]


rate_limit_per_key_dag = rate_limit_per_key()
