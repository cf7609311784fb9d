"""The per-row work shared by the queue dispatchers and the stale-claim recovery DAGs.

They all claim rows of a queue and then process every claimed row the same way
("process exactly as in the main drain"), so that processing lives here, once, as
does the recovery DAG itself (``stale_claim_recovery``): each queue table gets one,
built here for its table. The teardown that hands a failed task's rows back, and
the question "is that claimer's run still running?", are in ``_hand_back.py``.
The mapped tasks are handed only the claimed keys and read each row from the store,
so a claimed batch is kept once in Airflow's metadata DB (the claim's XCom), however
large its payloads.
The DAG files import it relatively when they are imported by the path provider info
lists (``airflow_atomic_store.example_dags.queue_dispatcher``), and by name when Airflow
parses them from a DAGs folder (which it puts on ``sys.path``); ``.airflowignore``
keeps the DAG processor from parsing it as a DAG file.

A claim is at-least-once: a run can die after it performed a row's side effect but
before it marked the row done, and the stale-claim recovery then hands that row out
again. So the side effect itself is guarded by a process-once upsert keyed by the
row (table ``pending_ops_effects``): the run that inserts the effect row performs
the effect and records its outcome there. A re-delivered row whose effect has an
outcome skips straight to being marked with it. One whose effect was started but has
no outcome (its claimer died while sending) is never passed as done: nobody knows
whether the remote side got it. The side effect is idempotent (``send`` carries the
item's idempotency key, which the remote side applies at most once), so it is sent
again under the same key; with ``resend_unfinished`` off, the row is flagged
``needs_review`` for a human instead. The effect row records who performed it, how
often and how it went, which is what lets a test (or an operator on call) check
that every item was processed exactly once.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import DAG, Param, XComArg, dag, get_current_context, task

from airflow_atomic_store import AtomicClaimOperator, AtomicStoreHook, timestamps
from airflow_atomic_store.templating import execution_id

try:  # imported as airflow_atomic_store.example_dags._queue_processing (see the DAG files)
    from ._hand_back import HAND_BACK_PARAMS, IN_FLIGHT, hand_back, run_is_active
except ImportError:  # imported by name from a DAGs folder
    from _hand_back import HAND_BACK_PARAMS, IN_FLIGHT, hand_back, run_is_active

QUEUE_PARAMS: dict[str, Any] = {
    "conn_id": Param("atomic_store_default", type="string", description="the store's connection"),
    "table": Param("pending_ops", type="string", description="the queue's table"),
    "effects_table": Param(
        "pending_ops_effects",
        type="string",
        description="one row per item whose side effect was performed (process-once guard)",
    ),
    "work_seconds": Param(
        0.0, type="number", minimum=0, description="how long the simulated side effect takes"
    ),
    "resend_unfinished": Param(
        True,
        type="boolean",
        description="an item whose side effect was started but never finished: send it "
        "again under its idempotency key (true), or flag it needs_review (false)",
    ),
    **HAND_BACK_PARAMS,
}
"""Parameters every queue-draining DAG takes; a run's conf can override each one."""


def queue_params(table: str, effects_table: str, conn_id: str = "atomic_store_default") -> dict:
    """``QUEUE_PARAMS`` with the defaults of one queue: its store and its two tables."""
    return {
        **QUEUE_PARAMS,
        "conn_id": Param(conn_id, type="string", description="the store's connection"),
        "table": Param(table, type="string", description="the queue's table"),
        "effects_table": Param(
            effects_table,
            type="string",
            description="one row per item whose side effect was performed (process-once guard)",
        ),
    }


def stale_claim_recovery(
    dag_id: str, *, table: str, effects_table: str, conn_id: str = "atomic_store_default"
) -> DAG:
    """The scheduled stale-claim recovery DAG ``dag_id`` of one queue.

    A recovery pass reclaims only the table its params name, and the scheduler runs
    it with its defaults, never with a dispatcher's conf: every queue needs a DAG of
    its own, with the ``table``, ``effects_table`` (and ``conn_id``) its dispatcher uses.
    """

    @dag(
        dag_id=dag_id,
        schedule=timedelta(minutes=15),
        start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
        catchup=False,
        max_active_runs=1,
        tags=["atomic-store", "recipe"],
        params={
            **queue_params(table, effects_table, conn_id),
            "stale_after_seconds": Param(
                600, type="number", minimum=0, description="re-claim rows claimed longer ago"
            ),
            "batch_size": Param(100, type="integer", minimum=1, maximum=1000),
            "reclaim_dead_runs": Param(
                True,
                type="boolean",
                description="also re-claim rows whose claiming DAG run is no longer running "
                "(asked of Airflow), however recent their claim",
            ),
        },
    )
    def recovery() -> None:
        # [START reclaim]
        @task
        def abandoned_claimers(**context: Any) -> list[str]:
            """Who claimed ``in_flight`` rows and is gone: run no longer running, or too old."""
            params = context["params"]
            cutoff = timestamps.shifted(timedelta(seconds=-params["stale_after_seconds"]))
            with AtomicStoreHook(params["conn_id"]) as hook:
                rows = hook.query(params["table"], where=IN_FLIGHT, limit=1000)
            claims = {row["value"].get("claimedBy"): row["value"].get("claimedAt") for row in rows}
            return sorted(
                claimer
                for claimer, claimed_at in claims.items()
                if claimer is not None
                and (
                    (claimed_at or "") < cutoff
                    or (params["reclaim_dead_runs"] and not run_is_active(context, claimer))
                )
            )

        reclaim = AtomicClaimOperator(
            task_id="reclaim",
            conn_id="{{ params.conn_id }}",
            table="{{ params.table }}",
            where=[
                *IN_FLIGHT,
                {
                    "field": "claimedBy",
                    "operator": "in",
                    "value": "{{ ti.xcom_pull(task_ids='abandoned_claimers') }}",  # a list
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
        abandoned_claimers() >> reclaim
        process_claimed_rows(reclaim)  # exactly as the dispatcher processes its rows
        # [END reclaim]

    recovery_dag = recovery()
    # Airflow takes a DAG's file from the frame that built it (here, an ignored helper):
    # the DAG belongs to the DAG file that called this, which the DAG processor re-parses.
    recovery_dag.fileloc = sys._getframe(1).f_code.co_filename
    return recovery_dag


# [START process_row]
def process_claimed_rows(claim: AtomicClaimOperator) -> XComArg:
    """Add one mapped ``process`` task per row that ``claim`` won (none when it won none).

    The mapped tasks get only the rows' keys and each reads its row from the store,
    so the claimed batch is kept once in Airflow's metadata DB: in the claim's XCom.
    """
    keys = claimed_keys.override(task_id=f"{claim.task_id}_keys")(claim.task_id)
    claim >> keys
    processed = process.expand(key=keys)
    # A teardown: it runs once the mapped tasks are done, whether they succeeded or failed.
    processed >> hand_back.override(task_id=f"{claim.task_id}_hand_back")().as_teardown(
        setups=claim
    )
    return processed


@task
def claimed_keys(claim_task_id: str, **context: Any) -> list[str]:
    """The keys of the rows the claim won, in claim order: all the mapped tasks need.

    The claim's result is pulled here rather than passed in: Airflow keeps a task's
    rendered arguments in its metadata DB, which would be a second copy of the batch.
    """
    claim = context["ti"].xcom_pull(task_ids=claim_task_id)
    return [row["key"] for row in claim["claimed"]]


@task(map_index_template="{{ row_key }}", multiple_outputs=False)
def process(key: str, **context: Any) -> dict[str, Any]:
    """One claimed row: perform its side effect at most once, then finish it if still ours.

    ``multiple_outputs=False``: Airflow would otherwise infer it from the ``dict``
    return type and push every key of the outcome as an XCom of its own, five
    writes per row where one will do.
    """
    get_current_context()["row_key"] = key  # names the mapped task instance in the UI
    params, me = context["params"], execution_id(context)
    with AtomicStoreHook(params["conn_id"]) as hook:
        row = hook.get(params["table"], key) or {}  # the value comes from the store, not XCom
        holder = row.get("claimedBy")
        if holder != me:  # re-claimed (by recovery) since our claim: that run processes it
            print(f"{key}: claimed by {holder} now, not by this run; left to that run")
            return {"key": key, "status": "skipped", "claimedBy": holder, "finished": False}
        if isinstance(row.get("payload"), dict) and row["payload"].get("crash"):  # simulated
            raise RuntimeError(f"{key}: the processing task crashed (simulated)")
        return process_row(hook, key, row, params, me=me)


def process_row(
    hook: AtomicStoreHook, key: str, row: dict[str, Any], params: dict[str, Any], *, me: str
) -> dict[str, Any]:
    payload = row.get("payload")

    # Process once: the first delivery inserts the effect row and performs the effect.
    effect = hook.atomic_upsert(
        params["effects_table"],
        key,
        insert_value={
            "performedBy": me,
            "performedAt": timestamps.now(),
            "payload": payload,
            "attempts": 1,
        },
    )
    if effect["inserted"]:
        outcome = perform(hook, key, payload, params, effect="performed")
    else:  # re-delivered after a crash: what the first attempt recorded decides
        first = effect["value"]
        recorded = RECORDED.get(first.get("outcome"))
        if recorded is None:  # started, never finished
            outcome = unfinished(hook, key, first, payload, params, me)
        else:
            outcome = recorded(first)

    # Finish the row, guarded on the claim: a run whose claim was taken over changes nothing.
    finished = hook.atomic_update(
        params["table"],
        key,
        where=[{"field": "claimedBy", "operator": "equals", "value": me}],
        mutations=[
            {"field": field, "operation": "set", "value": value}
            for field, value in {**outcome, "finishedAt": timestamps.now()}.items()
        ],
    )
    if not finished["updated"]:
        print(f"{key}: claimed by another run meanwhile; that run finishes it")
    return {"key": key, **outcome, "finished": finished["updated"]}


def perform(
    hook: AtomicStoreHook, key: str, payload: Any, params: dict[str, Any], *, effect: str
) -> dict[str, Any]:
    """Send the side effect under the item's idempotency key and record how it went."""
    try:
        send(
            payload, idempotency_key=f"{params['table']}/{key}", work_seconds=params["work_seconds"]
        )
        outcome = {"status": "done", "effect": effect}
    except Exception as exc:  # the external call failed: record why, do not retry
        outcome = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    hook.atomic_update(
        params["effects_table"],
        key,
        mutations=[{"field": "outcome", "operation": "set", "value": outcome["status"]}],
    )
    return outcome


def unfinished(
    hook: AtomicStoreHook,
    key: str,
    first: dict[str, Any],
    payload: Any,
    params: dict[str, Any],
    me: str,
) -> dict[str, Any]:
    """The effect was started and never finished: send it again, or flag it for a human.

    Its claimer died while sending (or this task is a retry of one that did), so
    whether the remote side got it is unknown: passing the row as done could lose
    the item. ``send`` is idempotent, so sending again under the same key is safe.
    """
    started = first["performedBy"]
    if not params.get("resend_unfinished", True):
        return needs_review(started)
    # Take the effect over, unless its first attempt finished meanwhile (slow, not dead).
    taken = hook.atomic_update(
        params["effects_table"],
        key,
        where=[{"field": "outcome", "operator": "not_exists"}],
        mutations=[
            {"field": "attempts", "operation": "increment", "value": 1},
            {"field": "resentBy", "operation": "set", "value": me},
        ],
    )
    if not taken["updated"]:
        latest = hook.get(params["effects_table"], key) or {}
        recorded = RECORDED.get(latest.get("outcome"))
        return needs_review(started) if recorded is None else recorded(latest)
    effect = f"re-sent: the attempt by {started} never finished"
    return perform(hook, key, payload, params, effect=effect)


def needs_review(started: str) -> dict[str, Any]:
    return {
        "status": "needs_review",
        "error": f"the side effect started by {started} never finished: check the remote "
        "side, then set status to done (or to pending to send it again)",
    }


def already_done(first: dict[str, Any]) -> dict[str, Any]:
    return {"status": "done", "effect": f"already performed by {first['performedBy']}"}


def failed_before(first: dict[str, Any]) -> dict[str, Any]:
    return {"status": "failed", "error": "the side effect failed in an earlier run"}


#: What a re-delivered row becomes, by the outcome its effect row recorded.
RECORDED: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "done": already_done,
    "failed": failed_before,
}


# [END process_row]


def send(payload: Any, *, idempotency_key: str, work_seconds: float) -> None:
    """Stand-in for the real side effect (an HTTP call, a payment…): takes time, may fail.

    A real one passes ``idempotency_key`` on (an ``Idempotency-Key`` header, a
    deduplication id) so that the remote side applies a re-sent item at most once.
    """
    time.sleep(work_seconds)
    if isinstance(payload, dict) and payload.get("fail"):
        raise RuntimeError(f"the remote side refused the item: {payload['fail']}")
