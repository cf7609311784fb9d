"""Leader election with a lease: one holder at a time, with expiry, renewal and release.

Several runs (of this DAG or of others sharing the lease) may start together; only
the one holding the lease works, the others back off. The lease row says who holds
it and until when:

* **acquire**: a seed-if-missing upsert. The very first caller creates the lease and
  holds it; everyone else finds the row and leaves it alone.
* **take over**: an update guarded on ``expiresAt lte now``: a lease that was
  released, or whose holder died and stopped renewing it, goes to exactly one caller.
* **renew**: while working, the holder pushes ``expiresAt`` forward with an update
  guarded on ``holder equals`` itself, and stops at once if that guard fails.
* **release**: a teardown task (it runs even when the work fails) that expires the
  lease, guarded on ``holder`` so it never releases somebody else's lease.
* **fencing token**: every acquisition (the first insert, a take-over of an expired
  or released lease) sets or increments ``fence`` in the same statement and returns
  it. The holder's writes to the row the lease protects (``protected_table``) are
  guarded on that fence: a write carrying a fence lower than the last one written is
  refused. A holder that stalled past its TTL (a long pause, a partition) and woke up
  after another run took over cannot overwrite that run's work.

The holder records when it worked in ``lease_log`` (one row per run, ``start`` and
``end`` as canonical timestamps), so overlapping holders would show.

Try it (trigger two at once: one works, the other backs off)::

    airflow dags trigger leader_lease --conf '{"steps": 5}'
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import Param, dag, task

from airflow_atomic_store import (
    AtomicStoreHook,
    AtomicUpdateOperator,
    AtomicUpsertOperator,
    timestamps,
)
from airflow_atomic_store.compat import AirflowFailException
from airflow_atomic_store.templating import execution_id

#: Every take-over increments the lease's fencing token in the statement that takes it.
NEXT_FENCE = {"field": "fence", "operation": "increment", "value": 1}
HOLDER_IS_THIS_RUN = [
    {"field": "holder", "operator": "equals", "value": "{{ atomic.execution_id }}"}
]


@dag(
    schedule=timedelta(minutes=10),
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["atomic-store", "recipe"],
    params={
        "conn_id": Param("atomic_store_default", type="string"),
        "table": Param("leases", type="string"),
        "lease": Param("dispatcher", type="string", description="what the lease guards"),
        "ttl_seconds": Param(60, type="number", exclusiveMinimum=0, description="lease lifetime"),
        "steps": Param(
            3, type="integer", minimum=0, description="units of work, renew before each"
        ),
        "step_seconds": Param(1.0, type="number", minimum=0),
        "log_table": Param("lease_log", type="string", description="who worked when"),
        "simulate_failure": Param(False, type="boolean", description="fail after the first step"),
        "protected_table": Param(
            "lease_protected", type="string", description="the rows only the holder may write"
        ),
    },
)
def leader_lease() -> None:
    # [START acquire_lease]
    lease = {
        "holder": "{{ atomic.execution_id }}",
        "acquiredAt": "{{ atomic.now }}",
        "expiresAt": "{{ atomic.from_now(seconds=params.ttl_seconds) }}",
        "releasedAt": None,
    }
    acquire = AtomicUpsertOperator(
        task_id="acquire",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.lease }}",
        insert_value={**lease, "fence": 1},  # no mutations: an existing lease is left alone
    )
    take_over = AtomicUpdateOperator(
        task_id="take_over",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.lease }}",
        where=[{"field": "expiresAt", "operator": "lte", "value": "{{ atomic.now }}"}],
        mutations=[
            *({"field": name, "operation": "set", "value": value} for name, value in lease.items()),
            NEXT_FENCE,  # in the same statement: each holder gets a fence no one had before
        ],
    )

    @task.branch
    def holds_lease(acquired: dict[str, Any], taken_over: dict[str, Any]) -> str:
        return "work" if acquired["inserted"] or taken_over["updated"] else "back_off"

    @task
    def back_off(acquired: dict[str, Any]) -> str:
        current = acquired["value"]
        return f"lease held by {current['holder']} until {current['expiresAt']}: backing off"

    # [END acquire_lease]

    # [START work_under_lease]
    @task
    def work(acquired: dict[str, Any], taken_over: dict[str, Any], **context: Any) -> int:
        """Do the work in steps, renewing the lease before each; stop at once if it was lost.

        Each step writes the protected row under this holder's fence (``fenced_write``).
        """
        params, me = context["params"], execution_id(context)
        fence = (acquired if acquired["inserted"] else taken_over)["value"]["fence"]
        with AtomicStoreHook(params["conn_id"]) as hook:
            renew(hook, params, me)
            log = {"lease": params["lease"], "fence": fence, "start": timestamps.now()}
            hook.put(params["log_table"], me, log)
            try:
                for step in range(params["steps"]):
                    if step:
                        renew(hook, params, me)
                    time.sleep(params["step_seconds"])  # one unit of work
                    if params["simulate_failure"]:
                        raise RuntimeError("the work failed (simulated)")
                    fenced_write(hook, params, fence, {"step": step, "writer": me})
            finally:  # the log shows when this run worked, however the work ended
                hook.atomic_update(
                    params["log_table"],
                    me,
                    mutations=[{"field": "end", "operation": "set", "value": timestamps.now()}],
                )
        return params["steps"]

    # [END work_under_lease]

    # [START release_lease]
    release = AtomicUpdateOperator(
        task_id="release",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.lease }}",
        where=HOLDER_IS_THIS_RUN,  # never release a lease somebody else holds now
        mutations=[
            {"field": "expiresAt", "operation": "set", "value": "{{ atomic.now }}"},
            {"field": "releasedAt", "operation": "set", "value": "{{ atomic.now }}"},
        ],
    ).as_teardown(setups=acquire)  # runs after the work whether it succeeded or failed
    # [END release_lease]

    acquire >> take_over
    working = work(acquire.output, take_over.output)
    holds_lease(acquire.output, take_over.output) >> [working, back_off(acquire.output)]
    working >> release


# [START renew_lease]
def renew(hook: AtomicStoreHook, params: dict[str, Any], me: str) -> None:
    """Push the lease's expiry forward, only if this run still holds it; else stop."""
    renewed = hook.atomic_update(
        params["table"],
        params["lease"],
        where=[{"field": "holder", "operator": "equals", "value": me}],
        mutations=[
            {
                "field": "expiresAt",
                "operation": "set",
                "value": timestamps.shifted(timedelta(seconds=params["ttl_seconds"])),
            }
        ],
    )
    if not renewed["updated"]:
        raise AirflowFailException(f"lost lease {params['lease']!r} to another holder: stopping")


# [END renew_lease]


# [START fenced_write]
def fenced_write(
    hook: AtomicStoreHook, params: dict[str, Any], fence: int, data: dict[str, Any]
) -> dict[str, Any]:
    """Write ``data`` to the protected row, unless a holder with a newer fence has written.

    The row keeps the highest fence that wrote it; a write guarded on ``fence lte``
    ours is refused (``updated: false``) once a newer holder wrote, even if this
    holder still believes it holds the lease. Then it stops.
    """
    table, key = params["protected_table"], params["lease"]
    hook.atomic_upsert(table, key, insert_value={"fence": 0})  # seed-if-missing
    written = hook.atomic_update(
        table,
        key,
        where=[{"field": "fence", "operator": "lte", "value": fence}],
        mutations=[
            {"field": "fence", "operation": "set", "value": fence},
            {"field": "data", "operation": "set", "value": data},
        ],
    )
    if not written["updated"]:
        raise AirflowFailException(
            f"fence {fence} is stale: a newer holder of {key!r} has written; stopping"
        )
    return written


# [END fenced_write]


leader_lease_dag = leader_lease()
