"""example_dags/process_event_once.py end to end (both backends)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from airflow_atomic_store import AtomicStore
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag

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


def _lost_after_commit(context: Any, result: Any = None) -> None:
    if context["ti"].try_number == 1:
        raise RuntimeError("the worker was lost after the upsert committed")


def test_a_delivery_retried_after_its_upsert_committed_is_handled_exactly_once(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    """The retry replays ``inserted: true``: its own first try is not a duplicate."""
    dag = copy.deepcopy(example_dag("process_event_once"))
    upsert = dag.get_task("first_delivery")
    upsert.retries, upsert.retry_delay = 1, timedelta(0)
    upsert.post_execute = _lost_after_commit

    run = run_dag(dag, conf={**conf, "event_id": "evt-7", "payload": {"amount": 1}})

    assert run.try_number_of("first_delivery") == 2
    assert run.xcom("first_delivery")["replayed"] is True
    assert (run.state_of("handle_event"), run.state_of("skip_duplicate")) == ("success", "skipped")
    assert run.xcom("handle_event") == "handled evt-7"
    with AtomicStore(store_url) as store:
        assert store.get("processed_events", "evt-7")["claimedBy"] == run.execution_id
