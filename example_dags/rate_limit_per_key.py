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

The reservation happens in the task that makes the call, just before it waits: a
slot reserved by an earlier task would be "now" when reserved but only used after
the scheduler started the next task, and that delay would eat into the interval
before the next caller's slot.

Each caller records its call (slot and actual time) in ``rate_limited_calls``.

Try it (trigger several at once)::

    airflow dags trigger rate_limit_per_key --conf '{"key": "api.example.com", "interval_seconds": 2}'
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from airflow.sdk import Param, dag, task

from airflow_atomic_store import AtomicStoreHook, AtomicUpsertOperator, timestamps
from airflow_atomic_store.templating import execution_id, task_instance_key


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
    # [START call_at_slot]
    seed_slot = AtomicUpsertOperator(
        task_id="seed_slot",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.key }}",
        insert_value={"nextSlotAt": "{{ atomic.epoch_seconds }}"},  # seed-if-missing
    )

    @task
    def call_at_slot(**context: Any) -> dict[str, Any]:
        """Reserve the next slot, wait for it, then make the call (simulated) and record it."""
        params = context["params"]
        with AtomicStoreHook(params["conn_id"]) as hook:
            reserved_at = time.time()
            try_key = f"{task_instance_key(context)}/try-{context['ti'].try_number}"
            slot, was_stale = reserve_slot(hook, params, try_key)
            while (wait := slot - time.time()) > 0:
                time.sleep(wait)
            called_at = time.time()  # the external call would start here
            call = {
                "key": params["key"],
                "slot": slot,
                "resetStale": was_stale,
                "calledAt": called_at,
                "calledAtTimestamp": timestamps.now(),
                "waitedSeconds": round(called_at - reserved_at, 3),
            }
            hook.put(params["calls_table"], execution_id(context), call)
        return call

    seed_slot >> call_at_slot()
    # [END call_at_slot]


# [START reserve_slot]
def reserve_slot(
    hook: AtomicStoreHook, params: dict[str, Any], task_key: str
) -> tuple[float, bool]:
    """Take the next free slot of ``params["key"]``; say whether a stale slot was reset.

    Both steps are keyed by the try (``task_key``: the task instance and its try
    number), not by the task instance alone. A retry comes minutes later: the slot
    its first try reserved has passed, and meanwhile another caller may have reset
    the stale slot to now and called. Replaying the old slot would call at once,
    next to that caller. A slot a failed try reserved and did not use is wasted:
    that is safe, a slot used twice is not.
    """
    table, key, interval = params["table"], params["key"], params["interval_seconds"]
    now = time.time()
    # Reset-if-stale: a slot in the past moves up to now. The guard makes this move the
    # value only forward, never over a slot another caller has just reserved.
    reset = hook.atomic_update(
        table,
        key,
        where=[{"field": "nextSlotAt", "operator": "lt", "value": now}],
        mutations=[{"field": "nextSlotAt", "operation": "set", "value": now}],
        idempotency_key=f"{task_key}/reset",
    )
    # Reserve: advance the next free slot by one interval; ours is the value advanced from.
    reserved = hook.atomic_update(
        table,
        key,
        mutations=[{"field": "nextSlotAt", "operation": "increment", "value": interval}],
        idempotency_key=f"{task_key}/reserve",
    )
    if not reserved["updated"]:
        raise RuntimeError(f"no slot row for {key!r} in {table!r}: was it deleted?")
    return reserved["value"]["nextSlotAt"] - interval, reset["updated"]


# [END reserve_slot]


rate_limit_per_key_dag = rate_limit_per_key()
