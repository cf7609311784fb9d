"""Semaphore: at most N holders at once, across any DAGs, waiting in the triggerer.

A semaphore of N is N slot rows in one table (``slot-0`` … ``slot-<N-1>``). A run
that needs it claims one slot: a deferrable claim of one row that is ``free`` (or
whose holder died, below). When every slot is held the claim defers: the run waits
in the triggerer, its task ``deferred``, holding no worker slot, and wakes when a
slot is released (on PostgreSQL at once, through the store's notifications; on
SQLite at the next poll). Then it works, and a teardown task releases its slot,
whether the work succeeded or failed.

Why slot rows rather than one counter decremented under a guard: a claimed slot
records its holder (``claimedBy``, the run's execution id) and when it was taken
(``claimedAt``), so the release is a guarded update that only ever frees the
releasing run's own slot, the UI page and a query show who holds what, and a holder
that died without its teardown (a killed worker, a deleted run) is recognised by
its slot's age: the claim also takes a slot whose ``claimedAt`` is older than
``ttl_seconds``, a stale-claim pass built into the acquire. A counter knows only
how many, not who: a lost release would lower it for good.

Every acquisition also increments the slot's ``fence`` in the claiming statement:
with one slot this is a mutex whose waiters wait in the triggerer, and whose fence
guards writes exactly as the lease recipe's does (leader_lease.py).

Two DAGs share one semaphore here, ``semaphore_load`` and ``semaphore_report``
(say, two workloads that may run at most two queries at once on a warehouse):
the same ``table`` and ``slots``. Each run records when it held its slot in
``semaphore_log``, so overlapping holders would show.

Try it (the triggerer must run)::

    for i in 1 2 3; do airflow dags trigger semaphore_load; airflow dags trigger semaphore_report; done
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from airflow.sdk import DAG, Param, dag, task

from airflow_atomic_store import AtomicClaimOperator, AtomicStoreHook, timestamps
from airflow_atomic_store.templating import execution_id

# [START slot_free_or_stale]
#: A slot is free, or its holder claimed it longer than ``ttl_seconds`` ago and is
#: presumed dead. (The guard reads the clock: a deferred acquire renders it again
#: every minute, so a dead holder's slot is taken within a minute of its expiry.)
FREE_OR_STALE = [
    {"field": "status", "operator": "equals", "value": "free"},
    {
        "field": "claimedAt",
        "operator": "lt",
        "value": "{{ atomic.ago(seconds=params.ttl_seconds) }}",
    },
]
# [END slot_free_or_stale]


def semaphore_dag(dag_id: str, description: str) -> DAG:
    """A DAG that does its work holding one slot of the shared semaphore."""

    @dag(
        dag_id=dag_id,
        description=description,
        schedule=None,
        start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
        catchup=False,
        tags=["atomic-store", "recipe"],
        params={
            "conn_id": Param("atomic_store_default", type="string"),
            "table": Param("warehouse_slots", type="string", description="the semaphore's slots"),
            "slots": Param(2, type="integer", minimum=1, description="holders at once"),
            "ttl_seconds": Param(
                3600, type="number", exclusiveMinimum=0, description="a holder older is dead"
            ),
            "work_seconds": Param(1.0, type="number", minimum=0),
            "simulate_failure": Param(False, type="boolean", description="the work fails"),
            "log_table": Param("semaphore_log", type="string", description="who held when"),
        },
    )
    def semaphore() -> None:
        # [START acquire_slot]
        @task
        def seed_slots(**context: Any) -> int:
            """Create the semaphore's slot rows, seed-if-missing: never frees a held slot."""
            params = context["params"]
            with AtomicStoreHook(params["conn_id"]) as hook:
                for n in range(params["slots"]):
                    hook.atomic_upsert(
                        params["table"], f"slot-{n}", insert_value={"status": "free"}
                    )
            return int(params["slots"])

        acquire = AtomicClaimOperator(
            task_id="acquire",
            conn_id="{{ params.conn_id }}",
            table="{{ params.table }}",
            where=FREE_OR_STALE,
            match="any",
            limit=1,
            mutations=[
                {"field": "status", "operation": "set", "value": "held"},
                {"field": "claimedAt", "operation": "set", "value": "{{ atomic.now }}"},
                {"field": "claimedBy", "operation": "set", "value": "{{ atomic.execution_id }}"},
                {"field": "fence", "operation": "increment", "value": 1},
            ],
            deferrable=True,  # every slot held: wait in the triggerer, not in a worker slot
            poll_interval=1.0,  # SQLite's latency; PostgreSQL also wakes on the release
            short_circuit=True,  # a wait that ended empty skips the work (not the teardown)
        )
        # [END acquire_slot]

        # [START work_holding_slot]
        @task
        def work(claim: dict[str, Any], **context: Any) -> str:
            """The work the semaphore limits; it records when it held which slot."""
            params, me = context["params"], execution_id(context)
            slot = claim["claimed"][0]
            with AtomicStoreHook(params["conn_id"]) as hook:
                held = {"slot": slot["key"], "fence": slot["value"]["fence"]}
                hook.put(params["log_table"], me, {**held, "start": timestamps.now()})
                try:
                    time.sleep(params["work_seconds"])  # the limited work (simulated)
                    if params["simulate_failure"]:
                        raise RuntimeError("the work failed (simulated)")
                finally:  # the log shows when this run held the slot, however it ended
                    end = [{"field": "end", "operation": "set", "value": timestamps.now()}]
                    hook.atomic_update(params["log_table"], me, mutations=end)
            return str(slot["key"])

        # [END work_holding_slot]

        # [START release_slot]
        @task
        def release(claim: dict[str, Any], **context: Any) -> bool:
            """Free this run's slot, guarded on ``claimedBy``: never a slot someone else holds."""
            params, me = context["params"], execution_id(context)
            if not claim["claimed"]:  # the wait ended empty: nothing to release
                return False
            with AtomicStoreHook(params["conn_id"]) as hook:
                released = hook.atomic_update(
                    params["table"],
                    claim["claimed"][0]["key"],
                    where=[{"field": "claimedBy", "operator": "equals", "value": me}],
                    mutations=[
                        {"field": "status", "operation": "set", "value": "free"},
                        {"field": "releasedAt", "operation": "set", "value": timestamps.now()},
                    ],
                )
            return bool(released["updated"])

        freed = release(acquire.output).as_teardown(setups=acquire)  # runs even if work failed
        seed_slots() >> acquire >> work(acquire.output) >> freed
        # [END release_slot]

    return semaphore()


semaphore_load_dag = semaphore_dag("semaphore_load", "loads, at most 2 at once with reports")
semaphore_report_dag = semaphore_dag("semaphore_report", "reports, at most 2 at once with loads")
