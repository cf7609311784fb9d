"""Rate limit per key: callers reserve evenly spaced slots and wait for theirs in the triggerer.

Rather than a pool of tokens, each key (an API, a customer, a host) has a
"next available at" time, ``nextSlotAt``, in epoch seconds. Every caller
atomically advances it by the interval and takes the slot it advanced from, so
concurrent callers get distinct slots one interval apart, then waits until its
slot before calling out. Calls are spread evenly instead of bursting.

The wait is a deferral: the task hands Airflow's ``DateTimeTrigger`` its slot and
leaves its worker slot; the triggerer wakes it at the slot. No task sleeps.

A task woken by the triggerer starts some time after its slot (the scheduler has to
start it again: from milliseconds to seconds). A caller woken late calls late, and
the next caller, woken on time, would call less than an interval after it. So the
call passes a gate first: an update that sets ``lastCallAt`` to now, guarded on
``lastCallAt lte now - interval``. Refused, the caller defers again until
``lastCallAt + interval``. The slots spread callers out (one wake-up each, in
order); the gate makes the spacing of the calls themselves a guarantee.

Reset-if-stale: after a quiet spell ``nextSlotAt`` lies in the past, and callers
would reserve past slots and burst. So before reserving, a guarded update moves a
stale ``nextSlotAt`` up to now; it only ever moves the value forward, so it cannot
hand out a slot that someone else already holds.

Each caller records its call (slot and actual time) in ``rate_limited_calls``.

Try it (trigger several at once; the triggerer must run)::

    airflow dags trigger rate_limit_per_key --conf '{"key": "api.example.com", "interval_seconds": 2}'
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import BaseOperator, Param, dag

from airflow_atomic_store import AtomicStoreHook, AtomicUpsertOperator, timestamps
from airflow_atomic_store.templating import execution_id, task_instance_key


# [START call_at_slot_operator]
class CallAtSlotOperator(BaseOperator):
    """Reserve the next slot of ``key``, wait for it in the triggerer, pass the gate, call.

    Every wait is a deferral to ``DateTimeTrigger``: the task holds no worker slot
    while it waits. Resumed, it runs ``execute`` again: the reservation is keyed by
    the try (see ``reserve_slot``), so it replays the slot it reserved, and the gate
    is asked anew. Nothing rides in the deferral's kwargs.
    """

    template_fields: Sequence[str] = ("conn_id", "table", "key", "interval_seconds", "calls_table")

    def __init__(
        self,
        *,
        conn_id: str,
        table: str,
        key: str,
        interval_seconds: float | str,
        calls_table: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.conn_id, self.table, self.key = conn_id, table, key
        self.interval_seconds, self.calls_table = interval_seconds, calls_table

    def execute(self, context: Any) -> dict[str, Any]:
        try_key = f"{task_instance_key(context)}/try-{context['ti'].try_number}"
        with AtomicStoreHook(self.conn_id) as hook:
            # Keyed by the try: a task resumed from the triggerer replays its reservation.
            slot, was_stale = reserve_slot(hook, self._limit(), try_key)
            not_before: float | None = slot
            while not_before is not None:
                if time.time() < not_before:  # wait in the triggerer, then run this again
                    moment = datetime.fromtimestamp(not_before, timezone.utc)
                    self.defer(trigger=DateTimeTrigger(moment=moment), method_name="resume")
                not_before = pass_gate(hook, self._limit())  # None: the call may go now
            called_at = time.time()  # the external call would start here
            call = {
                "key": self.key,
                "slot": slot,
                "resetStale": was_stale,
                "calledAt": called_at,
                "calledAtTimestamp": timestamps.now(),
                "lateSeconds": round(called_at - slot, 3),
            }
            hook.put(self.calls_table, execution_id(context), call)
        return call

    def resume(self, context: Any, event: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Back from the triggerer at the time asked for: the same steps, from the start."""
        return self.execute(context)

    def _limit(self) -> dict[str, Any]:
        return {"table": self.table, "key": self.key, "interval_seconds": self.interval_seconds}


# [END call_at_slot_operator]


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
    call_at_slot = CallAtSlotOperator(
        task_id="call_at_slot",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.key }}",
        interval_seconds="{{ params.interval_seconds }}",
        calls_table="{{ params.calls_table }}",
    )
    seed_slot >> call_at_slot
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
    table, key, interval = params["table"], params["key"], float(params["interval_seconds"])
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


def pass_gate(hook: AtomicStoreHook, params: dict[str, Any]) -> float | None:
    """Record a call now if the last one was at least an interval ago; else when to try again.

    One guarded update: of callers woken together, one passes, and every call is at
    least an interval after the one before it, however late the triggerer woke anyone.
    """
    table, key, interval = params["table"], params["key"], float(params["interval_seconds"])
    now = time.time()
    opened = hook.atomic_update(
        table,
        key,
        where=[
            {"field": "lastCallAt", "operator": "lte", "value": now - interval},
            {"field": "lastCallAt", "operator": "not_exists"},  # nobody has called yet
        ],
        match="any",
        mutations=[{"field": "lastCallAt", "operation": "set", "value": now}],
    )
    if opened["updated"]:
        return None
    last = (hook.get(table, key) or {}).get("lastCallAt", now)
    return float(last) + interval


# [END reserve_slot]


rate_limit_per_key_dag = rate_limit_per_key()
