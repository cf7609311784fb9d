"""Airflow's own floor for the dispatchers' throughput (``python -m e2e.dispatch_bench``).

Two DAGs of the recipes' shapes with no store call in them, so what their runs
take is Airflow's alone (scheduling, task processes, XCom):

- ``bench_floor_mapped``: the mapped recipe's shape (``queue_dispatcher``): a
  "claim" task that returns ``count`` keys, the task that hands the keys on, one
  mapped task per key and the teardown after them;
- ``bench_floor_batch``: the batch recipe's shape (``batch_dispatcher``): one task
  that calls a function once per item.

Not example DAGs: they exist only to be timed.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from airflow.sdk import Param, dag, task

START = datetime(2025, 1, 1, tzinfo=timezone.utc)
PARAMS = {"count": Param(10, type="integer", minimum=0, maximum=5000)}


def _item(key: str) -> str:
    """What a row's work would be, minus the work: the floor counts Airflow only."""
    return key


@dag(
    dag_id="bench_floor_mapped",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["e2e"],
    params=PARAMS,
)
def bench_floor_mapped() -> None:
    @task
    def drain(**context: Any) -> dict[str, Any]:
        count = context["params"]["count"]
        return {"claimed": [{"key": f"item-{n:05d}"} for n in range(count)], "count": count}

    @task
    def drain_keys(**context: Any) -> list[str]:
        claim = context["ti"].xcom_pull(task_ids="drain")
        return [row["key"] for row in claim["claimed"]]

    @task(multiple_outputs=False)
    def process(key: str) -> dict[str, Any]:
        return {"key": _item(key), "status": "done"}

    @task
    def drain_hand_back() -> None:
        """The recipe's teardown, with nothing to hand back."""

    claim = drain()
    keys = drain_keys()
    claim >> keys
    process.expand(key=keys) >> drain_hand_back().as_teardown(setups=claim)


@dag(
    dag_id="bench_floor_batch",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["e2e"],
    params=PARAMS,
)
def bench_floor_batch() -> None:
    @task
    def send_each(**context: Any) -> dict[str, int]:
        done = [_item(f"item-{n:05d}") for n in range(context["params"]["count"])]
        return {"done": len(done), "failed": 0}

    send_each()


bench_floor_mapped()
bench_floor_batch()
