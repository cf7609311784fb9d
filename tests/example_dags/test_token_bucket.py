"""example_dags/token_bucket.py end to end: bucket, back-off and refill (both backends)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_atomic_store import AtomicStore
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag

RunDag = Callable[..., DagRunResult]


def test_callers_take_tokens_until_the_bucket_is_empty_then_back_off_until_the_refill(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    bucket, refill = example_dag("token_bucket"), example_dag("token_bucket_refill")
    small = {**conf, "bucket": "partner-api", "capacity": 2}

    callers = [run_dag(bucket, conf=small) for _ in range(2)]
    # Seeding is once only: a caller asking for a bigger bucket finds it empty all the same.
    callers.append(run_dag(bucket, conf={**small, "capacity": 50}))
    refilled = run_dag(refill, conf=small)
    after_refill = run_dag(bucket, conf=small)

    assert all(run.state == "success" for run in [*callers, refilled, after_refill])
    assert [run.xcom("seed_bucket")["inserted"] for run in callers] == [True, False, False]
    assert callers[2].xcom("seed_bucket")["value"] == {"tokens": 0, "capacity": 2}
    assert [run.state_of("call_api") for run in callers] == ["success", "success", "skipped"]
    assert [run.state_of("back_off") for run in callers] == ["skipped", "skipped", "success"]
    assert [run.xcom("take_token")["updated"] for run in callers] == [True, True, False]
    assert callers[1].xcom("call_api") == "called the API; 0 token(s) left in this window"
    assert callers[2].xcom("take_token") == {
        "updated": False,
        "value": None,
        "key": "partner-api",
        "replayed": False,
    }
    assert callers[2].xcom("back_off") == (
        "bucket partner-api is empty: backing off until the next refill"
    )
    assert refilled.xcom("refill_bucket")["inserted"] is False
    assert refilled.xcom("refill_bucket")["value"]["tokens"] == 2
    assert after_refill.state_of("call_api") == "success"
    with AtomicStore(store_url) as store:
        stored = store.get("rate_limits", "partner-api")
    assert stored == {
        "tokens": 1,
        "capacity": 2,
        "refilledAt": refilled.xcom("refill_bucket")["value"]["refilledAt"],
    }
