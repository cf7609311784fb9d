"""example_dags/batch_dispatcher.py end to end (both backends)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_atomic_store import AtomicStore
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag

RunDag = Callable[..., DagRunResult]


def test_one_task_drains_a_batch_each_item_once_and_a_refused_item_is_failed(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    with AtomicStore(store_url) as store:
        for number in range(30):
            payload = {"item": number, **({"fail": "bad address"} if number == 7 else {})}
            store.put("pending_ops", f"op-{number:04d}", {"status": "pending", "payload": payload})
    conf = {**conf, "batch_size": 25, "work_seconds": 0}
    dag = example_dag("batch_dispatcher")
    first, second, third = (run_dag(dag, conf=conf) for _ in range(3))
    assert [run.state for run in (first, second, third)] == ["success"] * 3
    assert first.xcom("send_each") == {"claimed": 25, "done": 24, "failed": 1, "skipped": 0}
    assert second.xcom("send_each") == {"claimed": 5, "done": 5, "failed": 0, "skipped": 0}
    assert third.xcom("send_each")["claimed"] == 0
    with AtomicStore(store_url) as store:
        rows = {row["key"]: row["value"] for row in store.query("pending_ops", limit=100)}
        effects = {
            row["key"]: row["value"] for row in store.query("pending_ops_effects", limit=100)
        }
    assert rows["op-0007"]["status"] == "failed"
    assert "bad address" in rows["op-0007"]["error"]
    assert all(value["status"] == "done" for key, value in rows.items() if key != "op-0007")
    assert all("finishedAt" in value for value in rows.values())
    assert effects["op-0007"]["outcome"] == "failed"
    assert sorted(effects) == sorted(rows)  # each item's effect recorded once
