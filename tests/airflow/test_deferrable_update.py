"""A deferrable guarded update in real ``dag.test()`` runs (both backends).

``dag.test()`` runs a deferred task's trigger inline and resumes the task with its
first event, as the triggerer would; the write that makes the guard true comes from
a separate OS process while the task waits. Each attempt is its own round, so the
receipts of round 0 (refused) and round 1 (applied) show the task deferred between.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk import task

from airflow_atomic_store import AtomicStore, AtomicUpdateOperator, SpecError, timestamps
from devkit import late_writer
from devkit.dagrun import DagRunResult, new_dag
from tests.example_dags.deferrals import recorded_deferrals
from tests.support.specs import HAS_TOKENS, ONE_RETRY, TAKE_TOKEN

RunDag = Callable[..., DagRunResult]


def _take(store_conn: str, **kwargs: Any) -> AtomicUpdateOperator:
    return AtomicUpdateOperator(
        task_id="take",
        conn_id=store_conn,
        table="buckets",
        key="api",
        where=HAS_TOKENS,
        mutations=TAKE_TOKEN,
        deferrable=True,
        poll_interval=0.2,
        **kwargs,
    )


def _rounds(store_url: str, result: DagRunResult, task_id: str = "take") -> list[dict]:
    """Each round's recorded result, replayed under the task instance's keys."""
    key = f"{result.dag_id}/{result.run_id}/{task_id}/-1"
    with AtomicStore(store_url) as store:
        return [
            store.atomic_update(
                "buckets", "api", where=HAS_TOKENS, mutations=TAKE_TOKEN, idempotency_key=round_key
            )
            for round_key in (key, f"{key}/wait-1")
        ]


def _run_while_another_process_refills(
    run_dag: RunDag, dag: Any, store_url: str, dag_id: str, tokens: int = 1
) -> DagRunResult:
    """Run ``dag``; once its first attempt was refused, another process refills the bucket."""
    writer = late_writer.start(
        store_url,
        "buckets",
        "api",
        delay=1.0,
        value={"tokens": tokens},
        after_receipt=f"{dag_id}/%/take/-1",
    )
    try:
        result = run_dag(dag)
    finally:
        writer.wait(timeout=400)
    assert writer.returncode == 0
    return result


@pytest.mark.parametrize("seeded", [True, False], ids=["guard-false", "row-missing"])
def test_a_deferrable_update_waits_and_applies_once_another_process_makes_the_guard_true(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str, seeded: bool
) -> None:
    if seeded:
        with AtomicStore(store_url) as store:
            store.put("buckets", "api", {"tokens": 0})
    with new_dag(dag_id) as dag:
        _take(store_conn, wait_timeout=timedelta(minutes=2))
    with recorded_deferrals() as waits:
        result = _run_while_another_process_refills(run_dag, dag, store_url, dag_id)
    assert result.state == "success"
    assert result.xcom("take")["updated"] is True
    assert result.xcom("take")["value"] == {"tokens": 0}
    # It waited deferred, in the trigger, with no task instance of its run running.
    assert [(wait.task_id, wait.trigger) for wait in waits] == [("take", "RowWaitTrigger")]
    assert waits[0].running == []
    refused, applied = _rounds(store_url, result)
    assert (refused["updated"], refused["replayed"]) == (False, True)
    assert (applied["updated"], applied["replayed"]) == (True, True)
    with AtomicStore(store_url) as store:
        assert store.get("buckets", "api") == {"tokens": 0}


def test_a_deferrable_update_that_waits_in_vain_returns_not_updated_and_short_circuits(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with AtomicStore(store_url) as store:
        store.put("buckets", "api", {"tokens": 0})
    with new_dag(dag_id) as dag:
        take = _take(store_conn, wait_timeout=1.5, short_circuit=True)

        @task
        def call_api() -> None: ...

        take >> call_api()

    result = run_dag(dag)
    assert result.state == "success"
    assert result.xcom("take") == {"updated": False, "value": None, "key": "api", "replayed": False}
    assert result.state_of("call_api") == "skipped"


def test_a_guard_that_reads_the_clock_wakes_at_expiry_without_any_write(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease taken over once it expires: ``expiresAt lte {{ atomic.now }}`` comes true
    by the clock alone; each rerender (every 1 s here) moves ``now``."""
    from airflow_atomic_store.operators import waiting

    monkeypatch.setattr(waiting, "RERENDER_SECONDS", 1.0)
    expires = timestamps.shifted(timedelta(seconds=3))
    with AtomicStore(store_url) as store:
        store.put("leases", "dispatcher", {"holder": "someone", "expiresAt": expires})
    with new_dag(dag_id) as dag:
        AtomicUpdateOperator(
            task_id="take_over",
            conn_id=store_conn,
            table="leases",
            key="dispatcher",
            where=[{"field": "expiresAt", "operator": "lte", "value": "{{ atomic.now }}"}],
            mutations=[
                {"field": "holder", "operation": "set", "value": "{{ atomic.execution_id }}"}
            ],
            deferrable=True,
            wait_timeout=60,
            poll_interval=0.2,
        )
    started = time.monotonic()
    result = run_dag(dag)
    assert result.state == "success"
    assert result.xcom("take_over")["updated"] is True
    assert result.xcom("take_over")["value"]["holder"] == result.execution_id
    assert time.monotonic() - started < 50


def lost_after_commit(context: Any, result: Any = None) -> None:
    if context["ti"].try_number == 1:
        raise RuntimeError("the worker was lost after the store committed")


def test_a_retry_after_the_deferred_update_committed_replays_it_with_one_effect(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with AtomicStore(store_url) as store:
        store.put("buckets", "api", {"tokens": 0})
    with new_dag(dag_id, default_args=ONE_RETRY) as dag:
        _take(store_conn, wait_timeout=timedelta(minutes=2), post_execute=lost_after_commit)
    result = _run_while_another_process_refills(run_dag, dag, store_url, dag_id, tokens=5)
    assert (result.state_of("take"), result.try_number_of("take")) == ("success", 2)
    assert result.xcom("take")["updated"] is True
    assert result.xcom("take")["replayed"] is True  # the retry replayed round 1
    with AtomicStore(store_url) as store:
        assert store.get("buckets", "api") == {"tokens": 4}  # one token taken, not two


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"wait_timeout": -1}, "wait_timeout"),
        ({"deferrable": "yes"}, "deferrable"),
        ({"poll_interval": 0}, "poll_interval"),
    ],
)
def test_bad_deferral_arguments_of_an_update_fail_at_dag_parse_naming_the_field(
    kwargs: dict, field: str
) -> None:
    with pytest.raises(SpecError) as raised:
        AtomicUpdateOperator(task_id="take", table="t", key="k", mutations=TAKE_TOKEN, **kwargs)
    assert raised.value.field == field


def test_a_waits_rounds_do_not_leak_into_the_next_run_of_the_same_dag(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    """Airflow runs a shallow copy of the DAG's operator: a wait's state kept in a
    mutable object on it leaked into the next run, whose first attempt then ran as
    round 1 (and a recipe waiting for round 0's receipt waited for ever)."""
    with AtomicStore(store_url) as store:
        store.put("buckets", "api", {"tokens": 0})
    with new_dag(dag_id) as dag:
        _take(store_conn, wait_timeout=timedelta(minutes=2))
    waited = _run_while_another_process_refills(run_dag, dag, store_url, dag_id)
    with AtomicStore(store_url) as store:
        store.put("buckets", "api", {"tokens": 1})
    again = run_dag(dag)  # the same DAG object, in the same process
    assert waited.xcom("take")["updated"] is True
    assert again.xcom("take")["updated"] is True
    first_round, _ = _rounds(store_url, again)
    assert (first_round["updated"], first_round["replayed"]) == (True, True)  # round 0 applied
