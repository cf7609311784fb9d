"""Claims go back when their task fails, and recovery asks Airflow which claimers are gone
(example_dags/_queue_processing.py; both backends)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.timestamps import shifted
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag, stored_rows

RunDag = Callable[..., DagRunResult]


def test_a_failed_processing_task_hands_its_row_back_at_once_then_dead_letters_it(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    with AtomicStore(store_url) as store:
        store.put("pending_ops", "op-0", {"status": "pending", "payload": {"crash": True}})
        store.put("pending_ops", "op-1", {"status": "pending", "payload": {"item": 1}})
    dispatcher, dispatch = example_dag("queue_dispatcher"), {**conf, "max_attempts": 2}

    first = run_dag(dispatcher, conf=dispatch)
    after_first = stored_rows(store_url, "pending_ops")
    second = run_dag(dispatcher, conf=dispatch)  # the very next claim gets it again
    third = run_dag(dispatcher, conf=dispatch)

    assert (first.state, first.state_of("process", 0), first.state_of("process", 1)) == (
        "failed",
        "failed",
        "success",
    )
    assert first.state_of("drain_hand_back") == "success"  # a teardown: runs after a failure
    assert first.xcom("drain_hand_back") == {"pending": ["op-0"], "failed": []}
    assert after_first["op-0"]["status"] == "pending"
    assert after_first["op-0"]["attempts"] == 1
    assert after_first["op-0"]["error"] == f"{first.execution_id}: its task failed"
    assert after_first["op-1"]["status"] == "done"  # a finished row is not handed back
    assert [row["key"] for row in second.xcom("drain")["claimed"]] == ["op-0"]
    assert second.xcom("drain_hand_back") == {"pending": [], "failed": ["op-0"]}
    final = stored_rows(store_url, "pending_ops")["op-0"]
    assert (final["status"], final["attempts"]) == ("failed", 2)  # the dead-letter list
    assert third.xcom("drain")["count"] == 0
    assert third.xcom("drain_hand_back") == {"pending": [], "failed": []}


def test_recovery_reclaims_fresh_claims_whose_dag_run_is_no_longer_running(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import update

    producer = example_dag("queue_producer")
    finished = run_dag(producer, conf={**conf, "count": 0})
    alive = run_dag(producer, conf={**conf, "count": 0})
    with create_session() as session:  # as if that run were still going
        session.execute(update(DagRun).where(DagRun.run_id == alive.run_id).values(state="running"))
    just_now = shifted(timedelta(seconds=-1))
    claimers = {
        "gone": finished.execution_id,
        "alive": alive.execution_id,
        "deleted": "queue_dispatcher/manual__deleted",
    }
    with AtomicStore(store_url) as store:
        for name, claimer in claimers.items():
            row = {"status": "in_flight", "claimedAt": just_now, "claimedBy": claimer}
            store.put("pending_ops", name, {**row, "payload": {}})
    recovery = example_dag("stale_claim_recovery")
    by_age = {**conf, "stale_after_seconds": 3600}

    age_only = run_dag(recovery, conf={**by_age, "reclaim_dead_runs": False})
    asked = run_dag(recovery, conf=by_age)

    assert age_only.xcom("abandoned_claimers") == []
    assert age_only.xcom("reclaim")["count"] == 0
    assert asked.state == "success"
    assert asked.xcom("abandoned_claimers") == sorted([claimers["gone"], claimers["deleted"]])
    assert sorted(row["key"] for row in asked.xcom("reclaim")["claimed"]) == ["deleted", "gone"]
    rows = stored_rows(store_url, "pending_ops")
    assert rows["gone"]["status"] == rows["deleted"]["status"] == "done"
    assert rows["alive"]["status"] == "in_flight"
    assert rows["alive"]["claimedBy"] == alive.execution_id


def test_with_hand_back_off_a_failed_tasks_row_stays_claimed_for_recovery(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    with AtomicStore(store_url) as store:
        store.put("pending_ops", "op-0", {"status": "pending", "payload": {"crash": True}})

    run = run_dag(example_dag("queue_dispatcher"), conf={**conf, "hand_back": False})

    assert run.state == "failed"
    assert run.xcom("drain_hand_back") == {"pending": [], "failed": []}
    row = stored_rows(store_url, "pending_ops")["op-0"]
    assert (row["status"], row["claimedBy"]) == ("in_flight", run.execution_id)
