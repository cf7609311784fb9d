"""example_dags/queue_housekeeping.py end to end (both backends)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_atomic_store import AtomicStore, timestamps
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag

RunDag = Callable[..., DagRunResult]
LONG_AGO = "2020-01-01T00:00:00.000000Z"


def _queue(store_url: str) -> None:
    with AtomicStore(store_url) as store:
        for number in range(12):
            store.put(
                "pending_ops", f"done-{number:02d}", {"status": "done", "finishedAt": LONG_AGO}
            )
        store.put("pending_ops", "done-today", {"status": "done", "finishedAt": timestamps.now()})
        store.put("pending_ops", "failed-0", {"status": "failed", "finishedAt": LONG_AGO})
        store.put("pending_ops", "pending-0", {"status": "pending"})
        store.put("pending_ops", "in-flight-0", {"status": "in_flight", "claimedAt": LONG_AGO})


def _keys(store_url: str, table: str) -> set[str]:
    with AtomicStore(store_url) as store:
        return {row["key"] for row in store.query(table, limit=1000)}


def test_housekeeping_retires_old_done_rows_and_keeps_the_dead_letters_and_the_work(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    _queue(store_url)
    run = run_dag(example_dag("queue_housekeeping"), conf={**conf, "batch": 5})
    assert run.state == "success"
    assert run.xcom("retire_history")["done"] == {
        "retired": 12,
        "batches": 3,
        "complete": True,
        "stopped": "done",
    }
    assert run.xcom("report") == 12
    assert _keys(store_url, "pending_ops") == {"done-today", "failed-0", "pending-0", "in-flight-0"}


def test_housekeeping_can_archive_and_retire_the_dead_letters_too(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    _queue(store_url)
    conf = {**conf, "archive_table": "pending_ops_archive", "failed_retention_days": 30}
    run = run_dag(example_dag("queue_housekeeping"), conf=conf)
    assert run.state == "success"
    assert run.xcom("report") == 13
    assert _keys(store_url, "pending_ops") == {"done-today", "pending-0", "in-flight-0"}
    archived = _keys(store_url, "pending_ops_archive")
    assert archived == {*(f"done-{n:02d}" for n in range(12)), "failed-0"}
