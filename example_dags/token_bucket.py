"""Token bucket: at most ``capacity`` callers proceed per window, however many run at once.

Each run of ``token_bucket`` is one caller of a rate-limited API. The bucket row is
seeded once (later seeds leave it alone); each caller then takes a token with an
update guarded on ``tokens gt 0``. When the bucket is empty the guard fails, nothing
is written, ``updated`` is false and the caller backs off. A read-then-write would
let two callers take the last token; the guarded update cannot.

``token_bucket_refill`` is the refill the pattern needs and the source document
leaves implicit: a scheduled reset of ``tokens`` to ``capacity`` once per window.

Try it::

    airflow dags trigger token_bucket --conf '{"capacity": 2}'   # three times: the third backs off
    airflow dags trigger token_bucket_refill --conf '{"capacity": 2}'
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from airflow.sdk import Param, dag, task

from airflow_atomic_store import AtomicUpdateOperator, AtomicUpsertOperator

START = datetime(2025, 1, 1, tzinfo=timezone.utc)
PARAMS = {
    "conn_id": Param("atomic_store_default", type="string"),
    "table": Param("rate_limits", type="string"),
    "bucket": Param("external-api", type="string", description="one bucket per rate limit"),
    "capacity": Param(100, type="integer", minimum=1, description="tokens per window"),
}


@dag(
    schedule=None,  # one run per call of the rate-limited API
    start_date=START,
    catchup=False,
    tags=["atomic-store", "recipe"],
    params=PARAMS,
)
def token_bucket() -> None:
    # [START seed_bucket]
    seed_bucket = AtomicUpsertOperator(
        task_id="seed_bucket",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.bucket }}",
        insert_value={"tokens": "{{ params.capacity }}", "capacity": "{{ params.capacity }}"},
        # no mutations: the first run creates the bucket, later runs leave it alone
    )
    # [END seed_bucket]

    # [START take_token]
    take_token = AtomicUpdateOperator(
        task_id="take_token",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.bucket }}",
        where=[{"field": "tokens", "operator": "gt", "value": 0}],
        mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
    )

    @task.branch
    def got_token(taken: dict[str, Any]) -> str:
        return "call_api" if taken["updated"] else "back_off"

    @task
    def call_api(taken: dict[str, Any]) -> str:
        return f"called the API; {taken['value']['tokens']} token(s) left in this window"

    @task
    def back_off(taken: dict[str, Any]) -> str:
        return f"bucket {taken['key']} is empty: backing off until the next refill"

    seed_bucket >> take_token
    got_token(take_token.output) >> [call_api(take_token.output), back_off(take_token.output)]
    # [END take_token]


@dag(
    schedule="@hourly",  # the window: the bucket is full again at the start of each hour
    start_date=START,
    catchup=False,
    tags=["atomic-store", "recipe"],
    params=PARAMS,
)
def token_bucket_refill() -> None:
    # [START refill_bucket]
    AtomicUpsertOperator(
        task_id="refill_bucket",
        conn_id="{{ params.conn_id }}",
        table="{{ params.table }}",
        key="{{ params.bucket }}",
        insert_value={
            "tokens": "{{ params.capacity }}",
            "capacity": "{{ params.capacity }}",
            "refilledAt": "{{ atomic.now }}",
        },
        mutations=[  # the bucket exists: reset it to full, whatever is left
            {"field": "tokens", "operation": "set", "value": "{{ params.capacity }}"},
            {"field": "capacity", "operation": "set", "value": "{{ params.capacity }}"},
            {"field": "refilledAt", "operation": "set", "value": "{{ atomic.now }}"},
        ],
    )
    # [END refill_bucket]


token_bucket_dag = token_bucket()
token_bucket_refill_dag = token_bucket_refill()
