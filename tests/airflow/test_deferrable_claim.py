"""A deferrable claim in real ``dag.test()`` runs (both backends).

``dag.test()`` runs a deferred task's trigger inline and resumes the task with its
first event, as the triggerer would; the row the claim gets is written by a separate
OS process while the task waits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from airflow.sdk import task

from airflow_atomic_store import AtomicClaimOperator, AtomicStore, SpecError
from devkit import late_writer
from devkit.dagrun import DagRunResult, new_dag
from tests.support.specs import PENDING

RunDag = Callable[..., DagRunResult]


def _claim(store_conn: str, **kwargs: object) -> AtomicClaimOperator:
    return AtomicClaimOperator(
        task_id="claim",
        conn_id=store_conn,
        table="jobs",
        where=PENDING,
        deferrable=True,
        poll_interval=0.2,
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_deferrable_claim_waits_on_an_empty_queue_and_claims_the_row_that_arrives(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with new_dag(dag_id) as dag:
        _claim(store_conn, wait_timeout=timedelta(minutes=2))

    # Written only after the claim's first (keyed) attempt found the queue empty.
    writer = late_writer.start(
        store_url, "jobs", "late-1", delay=1.0, after_receipt=f"{dag_id}/%/claim/-1"
    )
    try:
        result = run_dag(dag)
    finally:
        writer.wait(timeout=400)
    assert writer.returncode == 0
    assert result.state == "success"
    claimed = result.xcom("claim")
    assert [row["key"] for row in claimed["claimed"]] == ["late-1"]
    assert claimed["claimed"][0]["value"]["claimedBy"] == result.execution_id
    # The first (live) claim found nothing and was recorded empty under the task's key;
    # the claim after the wait ran as round 1: a retry replays both, claiming nothing more.
    key = f"{result.dag_id}/{result.run_id}/claim/-1"
    with AtomicStore(store_url) as store:
        first = store.atomic_claim("jobs", where=PENDING, idempotency_key=key)
        after_wait = store.atomic_claim("jobs", where=PENDING, idempotency_key=f"{key}/wait-1")
        assert store.get("jobs", "late-1")["status"] == "in_flight"
    assert (first["count"], first["replayed"]) == (0, True)
    assert after_wait["replayed"] is True
    assert [row["key"] for row in after_wait["claimed"]] == ["late-1"]


def test_a_deferrable_claim_with_rows_there_claims_at_once(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with AtomicStore(store_url) as store:
        store.put("jobs", "ready", {"status": "pending"})
    with new_dag(dag_id) as dag:
        _claim(store_conn, wait_timeout=5)
    result = run_dag(dag)
    assert result.state == "success"
    assert [row["key"] for row in result.xcom("claim")["claimed"]] == ["ready"]
    assert "replayed" in result.xcom("claim")  # claimed under the task's own key


def test_a_deferrable_claim_that_waits_in_vain_returns_empty_and_short_circuits(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with AtomicStore(store_url) as store:
        store.put("jobs", "done-1", {"status": "done"})  # never matches the claim
    with new_dag(dag_id) as dag:
        claim = _claim(store_conn, wait_timeout=1.5, short_circuit=True)

        @task
        def process() -> None: ...

        claim >> process()

    result = run_dag(dag)
    assert result.state == "success"
    assert result.xcom("claim")["count"] == 0
    assert result.state_of("claim") == "success"
    assert result.state_of("process") == "skipped"
    with AtomicStore(store_url) as store:
        assert store.get("jobs", "done-1") == {"status": "done"}


def _conn_with_extras(
    monkeypatch: pytest.MonkeyPatch, conn_id: str, store_url: str, **extras: object
) -> str:
    """A connection to ``store_url`` whose extras keep their types (``__extra__`` JSON)."""
    from airflow.models.connection import Connection

    connection = Connection(conn_id=conn_id, uri=store_url)
    connection.set_extra(json.dumps(extras))
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", connection.get_uri())
    return conn_id


def test_a_keyed_wait_ends_within_a_third_of_the_receipt_retention(
    run_dag: RunDag, store_url: str, dag_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry replays the rounds from round 0: its receipt must outlive the wait.

    The store keeps receipts 3 s here: the wait ends after 1 s, not at its 40 s timeout.
    """
    conn_id = _conn_with_extras(monkeypatch, "short_receipts", store_url, receipt_retention=3)
    with AtomicStore(store_url) as store:
        store.put("jobs", "done-1", {"status": "done"})  # never matches the claim
    with new_dag(dag_id) as dag:
        _claim(conn_id, wait_timeout=40)
    started = time.monotonic()
    result = run_dag(dag)
    assert result.state == "success"
    assert result.xcom("claim")["count"] == 0
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"wait_timeout": -1}, "wait_timeout"),
        ({"wait_timeout": "soon"}, "wait_timeout"),
        ({"deferrable": "yes"}, "deferrable"),
        ({"poll_interval": 0}, "poll_interval"),
    ],
)
def test_bad_deferral_arguments_fail_at_dag_parse_naming_the_field(
    kwargs: dict, field: str
) -> None:
    with pytest.raises(SpecError) as raised:
        AtomicClaimOperator(task_id="claim", table="jobs", **kwargs)
    assert raised.value.field == field


def test_a_wait_whose_where_read_the_clock_renders_it_again_and_claims_the_row_it_now_matches(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stale-claim pass, deferred: ``claimedAt lt {{ atomic.now }}`` matches a row
    only once the clock passes its ``claimedAt``, with no write to wake the trigger.
    Its first rendering never matches; each rerender (every 1 s here) moves the cutoff."""
    from airflow_atomic_store import timestamps
    from airflow_atomic_store.operators import waiting

    monkeypatch.setattr(waiting, "RERENDER_SECONDS", 1.0)
    stale_at = timestamps.shifted(timedelta(seconds=3))
    with AtomicStore(store_url) as store:
        store.put("jobs", "lost", {"status": "in_flight", "claimedAt": stale_at})
    where = [
        {"field": "status", "operator": "equals", "value": "in_flight"},
        {"field": "claimedAt", "operator": "lt", "value": "{{ atomic.now }}"},
    ]
    with new_dag(dag_id) as dag:
        AtomicClaimOperator(
            task_id="claim",
            conn_id=store_conn,
            table="jobs",
            where=where,
            deferrable=True,
            poll_interval=0.2,
            wait_timeout=40,
        )
    started = time.monotonic()
    result = run_dag(dag)
    assert result.state == "success"
    assert [row["key"] for row in result.xcom("claim")["claimed"]] == ["lost"]
    assert time.monotonic() - started < 30  # not at the 40 s timeout's final claim
