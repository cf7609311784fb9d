"""example_dags/process_event_once.py end to end (both backends)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_atomic_store import AtomicStore
from tests.airflow.dagrun import DagRunResult
from tests.example_dags.examples import example_dag

RunDag = Callable[..., DagRunResult]


def test_the_first_delivery_is_handled_and_a_duplicate_is_skipped(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    dag = example_dag("process_event_once")
    delivery = {**conf, "event_id": "evt-42", "payload": {"amount": 5}}

    first = run_dag(dag, conf=delivery)
    duplicate = run_dag(dag, conf={**delivery, "payload": {"amount": 500}})
    other = run_dag(dag, conf={**conf, "event_id": "evt-43"})

    assert first.state == duplicate.state == other.state == "success"
    assert first.states() == {
        "first_delivery": "success",
        "is_first_delivery": "success",
        "handle_event": "success",
        "skip_duplicate": "skipped",
    }
    assert first.xcom("handle_event") == "handled evt-42"
    assert (duplicate.state_of("handle_event"), duplicate.state_of("skip_duplicate")) == (
        "skipped",
        "success",
    )
    assert duplicate.xcom("skip_duplicate") == (
        f"evt-42 was already handled by {first.execution_id}"
    )
    assert other.state_of("handle_event") == "success"
    with AtomicStore(store_url) as store:
        events = {row["key"]: row["value"] for row in store.query("processed_events")}
    assert sorted(events) == ["evt-42", "evt-43"]
    # The duplicate changed nothing: the first delivery's claim and payload stay.
    assert events["evt-42"]["claimedBy"] == first.execution_id
    assert events["evt-42"]["payload"] == {"amount": 5}
    assert events["evt-43"] == {
        "claimedAt": events["evt-43"]["claimedAt"],
        "claimedBy": other.execution_id,
        "payload": None,
    }


def test_a_run_without_an_event_id_fails_before_touching_the_store(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    run = run_dag(example_dag("process_event_once"), conf=conf)

    assert run.state == "failed"
    assert run.state_of("first_delivery") == "failed"
    with AtomicStore(store_url) as store:
        assert store.query("processed_events") == []
