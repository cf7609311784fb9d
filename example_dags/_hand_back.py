"""Claims go back when their task fails; who claimed rows and is gone (asked of Airflow).

Used by ``_queue_processing.py``: every queue DAG ends with ``hand_back``, a teardown
of its claim, and the stale-claim recovery asks ``run_is_active`` about each claimer.
A helper module like ``_queue_processing`` (``.airflowignore`` keeps the DAG processor
from parsing it as a DAG file).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, task

from airflow_atomic_store import AtomicStoreHook, timestamps
from airflow_atomic_store.templating import execution_id

HAND_BACK_PARAMS: dict[str, Param] = {
    "hand_back": Param(
        True,
        type="boolean",
        description="when a processing task fails, give its row back at once (the run's "
        "teardown) rather than leave it to the stale-claim recovery",
    ),
    "max_attempts": Param(
        3,
        type="integer",
        minimum=1,
        description="a row whose processing task failed this many times goes to failed "
        "(the dead-letter list) instead of back to pending",
    ),
}
"""The queue DAGs' params for handing rows back (part of ``QUEUE_PARAMS``)."""


# [START hand_back]
IN_FLIGHT = [{"field": "status", "operator": "equals", "value": "in_flight"}]


@task(multiple_outputs=False)
def hand_back(**context: Any) -> dict[str, list[str]]:
    """Give back at once the rows this run claimed and did not finish (its task failed).

    Guarded on ``claimedBy`` and ``in_flight``: a row another run re-claimed since, or
    that this run finished, is left alone. Each hand-back counts an attempt; after
    ``max_attempts`` the row goes to ``failed``, the dead-letter list, rather than
    back to ``pending`` (a row that fails every time must not loop for ever). The rows
    go back in at most two calls, one per outcome (``atomic_update_many``: each row's
    guard judged on its own), however many there are.
    """
    params, me = context["params"], execution_id(context)
    ours = [*IN_FLIGHT, {"field": "claimedBy", "operator": "equals", "value": me}]
    handed: dict[str, list[str]] = {"pending": [], "failed": []}
    if not params.get("hand_back", True):  # left to the stale-claim recovery
        return handed
    with AtomicStoreHook(params["conn_id"]) as hook:
        going: dict[str, list[str]] = {"pending": [], "failed": []}
        for row in hook.query(params["table"], where=ours, limit=1000):
            attempts = int(row["value"].get("attempts") or 0) + 1
            going["failed" if attempts >= params["max_attempts"] else "pending"].append(row["key"])
        for status, keys in going.items():
            if not keys:
                continue
            back = hook.atomic_update_many(
                params["table"],
                keys,
                where=ours,
                mutations=[
                    {"field": "status", "operation": "set", "value": status},
                    {"field": "attempts", "operation": "increment", "value": 1},
                    {"field": "handedBackAt", "operation": "set", "value": timestamps.now()},
                    {"field": "error", "operation": "set", "value": f"{me}: its task failed"},
                ],
            )
            handed[status] = [item["key"] for item in back["items"] if item["updated"]]
    return handed


def run_is_active(context: Any, claimer: str) -> bool:
    """Whether the DAG run ``claimer`` (an execution id) is queued or running, asked of Airflow.

    Tasks cannot use Airflow's ORM in Airflow 3: the Task SDK asks the API server
    (``get_dr_count``). A run that was deleted counts as not active. A Task SDK
    without it is answered "active": recovery then goes by age alone.
    """
    count_runs = getattr(context["ti"], "get_dr_count", None)
    if count_runs is None:
        return True
    dag_id, _, run_id = claimer.partition("/")
    return bool(count_runs(dag_id=dag_id, run_ids=[run_id], states=["queued", "running"]))


# [END hand_back]
