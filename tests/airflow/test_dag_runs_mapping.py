"""Dynamic task mapping over claimed rows: the queue-dispatcher recipe (both backends)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from airflow.sdk import task

from airflow_atomic_store import AtomicClaimOperator, AtomicStore, AtomicUpdateOperator
from devkit.dagrun import DagRunResult, new_dag
from tests.support.specs import PENDING

RunDag = Callable[..., DagRunResult]
MINE = [{"field": "claimedBy", "operator": "equals", "value": "{{ atomic.execution_id }}"}]


def dispatcher(dag_id: str, conn_id: str, *, limit: int) -> object:
    with new_dag(dag_id) as dag:
        drain = AtomicClaimOperator(
            task_id="drain", conn_id=conn_id, table="pending_ops", where=PENDING, limit=limit
        )

        @task
        def process(row: dict) -> str:
            assert row["value"]["status"] == "in_flight"
            return f"sent {row['value']['payload']}"

        sent = process.expand(row=drain.claimed)
        mark_done = AtomicUpdateOperator.partial(
            task_id="mark_done",
            conn_id=conn_id,
            table="pending_ops",
            where=MINE,
            mutations=[
                {"field": "status", "operation": "set", "value": "done"},
                {"field": "doneAt", "operation": "set", "value": "{{ atomic.now }}"},
            ],
        ).expand(key=drain.claimed_keys)
        sent >> mark_done
    return dag


def test_each_claimed_row_gets_a_mapped_task_that_finishes_it_behind_a_claimed_by_guard(
    run_dag: RunDag,
    store_conn: str,
    store_url: str,
    dag_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with AtomicStore(store_url) as store:
        for n in range(5):
            store.put("pending_ops", f"op-{n}", {"status": "pending", "payload": n})
    dag = dispatcher(dag_id, store_conn, limit=3)

    first = run_dag(dag)
    second = run_dag(dag)
    logs = capsys.readouterr().out

    for run, keys in ((first, ["op-0", "op-1", "op-2"]), (second, ["op-3", "op-4"])):
        assert run.state == "success"
        assert run.xcom("drain")["count"] == len(keys)
        assert (
            run.mapped_indexes("process")
            == run.mapped_indexes("mark_done")
            == [0, 1, 2][: len(keys)]
        )
        assert [run.xcom("process", map_index=i) for i in range(len(keys))] == [
            f"sent {key[-1]}" for key in keys
        ]
        for i, key in enumerate(keys):
            result = run.xcom("mark_done", map_index=i)
            assert (result["key"], result["updated"]) == (key, True)
            assert result["value"]["claimedBy"] == run.execution_id
    with AtomicStore(store_url) as store:
        rows = {row["key"]: row["value"] for row in store.query("pending_ops")}
    assert {key: value["status"] for key, value in rows.items()} == dict.fromkeys(rows, "done")
    assert {rows[f"op-{n}"]["claimedBy"] for n in range(3)} == {first.execution_id}
    assert {rows[f"op-{n}"]["claimedBy"] for n in range(3, 5)} == {second.execution_id}
    assert "claimed 3 of limit 3 from pending_ops" in logs
    assert "claimed 2 of limit 3 from pending_ops" in logs


def test_the_guard_refuses_rows_that_another_run_claimed(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with new_dag(dag_id) as dag:
        AtomicUpdateOperator.partial(
            task_id="mark_done",
            conn_id=store_conn,
            table="pending_ops",
            where=MINE,
            mutations=[{"field": "status", "operation": "set", "value": "done"}],
        ).expand(key=["theirs"])
    with AtomicStore(store_url) as store:
        store.put("pending_ops", "theirs", {"status": "in_flight", "claimedBy": "other/run"})

    run = run_dag(dag)

    assert run.xcom("mark_done", map_index=0) == {
        "updated": False,
        "value": None,
        "key": "theirs",
        "replayed": False,
    }
    with AtomicStore(store_url) as store:
        assert store.get("pending_ops", "theirs") == {
            "status": "in_flight",
            "claimedBy": "other/run",
        }


def test_an_empty_queue_maps_to_no_tasks(run_dag: RunDag, store_conn: str, dag_id: str) -> None:
    run = run_dag(dispatcher(dag_id, store_conn, limit=10))

    assert run.state == "success"
    assert run.xcom("drain") == {"claimed": [], "count": 0, "replayed": False}
    assert run.xcom("drain_claimed") == []
    assert run.mapped_indexes("process") == run.mapped_indexes("mark_done") == []
    assert run.state_of("process") == run.state_of("mark_done") == "skipped"


def test_claimed_keys_that_look_like_templates_are_used_verbatim(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    # Keys come from producers: rendering them as Jinja would target the wrong row.
    keys = ["{{ run_id }}", "{{ 6 * 7 }}", "{% raw %}x{% endraw %}"]
    with AtomicStore(store_url) as store:
        for n, key in enumerate(keys):
            store.put("pending_ops", key, {"status": "pending", "payload": n})

    run = run_dag(dispatcher(dag_id, store_conn, limit=10))

    assert run.state == "success"
    assert [run.xcom("mark_done", map_index=i)["key"] for i in range(3)] == keys
    assert all(run.xcom("mark_done", map_index=i)["updated"] for i in range(3))
    with AtomicStore(store_url) as store:
        assert {row["key"]: row["value"]["status"] for row in store.query("pending_ops")} == (
            dict.fromkeys(keys, "done")
        )
