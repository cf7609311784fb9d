"""example_dags/queue_dispatcher.py and stale_claim_recovery.py end to end (both backends).

Concurrent dispatcher runs and a dispatcher killed mid-batch: test_when_runs_overlap.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from airflow.sdk import task

from airflow_atomic_store import AtomicClaimOperator, AtomicStore, AtomicStoreHook
from airflow_atomic_store.timestamps import shifted
from devkit.dagrun import DagRunResult, new_dag
from devkit.examples import airflow_metadata, example_dag, example_dags, stored_rows

RunDag = Callable[..., DagRunResult]


def test_the_producer_enqueues_each_item_once_even_when_run_again(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    producer = example_dag("queue_producer")

    first = run_dag(producer, conf={**conf, "count": 3, "key_prefix": "order"})
    again = run_dag(producer, conf={**conf, "count": 4, "key_prefix": "order"})

    assert first.state == again.state == "success"
    assert first.xcom("enqueue") == ["order-0000", "order-0001", "order-0002"]
    assert again.xcom("enqueue") == ["order-0003"]
    queued = stored_rows(store_url, "pending_ops")
    assert {key: value["status"] for key, value in queued.items()} == {
        f"order-000{n}": "pending" for n in range(4)
    }
    assert queued["order-0002"] == {
        "status": "pending",
        "payload": {"item": 2},
        "enqueuedBy": first.execution_id,
    }


def test_the_dispatcher_drains_a_fifo_batch_and_marks_each_row_done_or_failed(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    with AtomicStore(store_url) as store:
        for n in range(4):
            payload = {"fail": "card declined"} if n == 1 else {"item": n}
            store.put("pending_ops", f"op-{n}", {"status": "pending", "payload": payload})
    dispatcher = example_dag("queue_dispatcher")

    batch = run_dag(dispatcher, conf={**conf, "batch_size": 3})
    rest = run_dag(dispatcher, conf={**conf, "batch_size": 3})
    empty = run_dag(dispatcher, conf={**conf, "batch_size": 3})

    assert batch.state == rest.state == empty.state == "success"
    assert [row["key"] for row in batch.xcom("drain")["claimed"]] == ["op-0", "op-1", "op-2"]
    assert batch.mapped_indexes("process") == [0, 1, 2]
    assert batch.xcom("process", map_index=1) == {
        "key": "op-1",
        "status": "failed",
        "error": "RuntimeError: the remote side refused the item: card declined",
        "finished": True,
    }
    # One XCom per processed row, not one per key of its outcome.
    assert {key for (task, _, key) in batch.xcoms if task == "process"} == {"return_value"}
    assert [row["key"] for row in rest.xcom("drain")["claimed"]] == ["op-3"]
    # An empty queue is a no-op success: nothing claimed, no task mapped.
    assert empty.xcom("drain") == {"claimed": [], "count": 0, "replayed": False}
    assert empty.mapped_indexes("process") == []
    queued, effects = (
        stored_rows(store_url, "pending_ops"),
        stored_rows(store_url, "pending_ops_effects"),
    )
    assert {key: value["status"] for key, value in queued.items()} == {
        "op-0": "done",
        "op-1": "failed",
        "op-2": "done",
        "op-3": "done",
    }
    for key, run in (("op-0", batch), ("op-1", batch), ("op-2", batch), ("op-3", rest)):
        assert queued[key]["claimedBy"] == effects[key]["performedBy"] == run.execution_id
    assert queued["op-0"]["effect"] == "performed"
    assert queued["op-1"]["error"].endswith("card declined")
    assert {key: effect["outcome"] for key, effect in effects.items()} == {
        "op-0": "done",
        "op-1": "failed",
        "op-2": "done",
        "op-3": "done",
    }


def test_a_claimed_batch_is_kept_once_in_airflows_metadata_db(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    # Five 20 KB payloads, each with a tag that says where copies of it ended up.
    with AtomicStore(store_url) as store:
        for n in range(5):
            payload = {"item": n, "blob": f"<payload {n}>" + "x" * 20_000}
            store.put("pending_ops", f"big-{n}", {"status": "pending", "payload": payload})

    run = run_dag(example_dag("queue_dispatcher"), conf={**conf, "batch_size": 5})

    assert run.state == "success"
    assert [run.xcom("process", map_index=i)["status"] for i in range(5)] == ["done"] * 5
    kept = airflow_metadata(run.dag_id, run.run_id)
    for n in range(5):  # in the claim's XCom, and nowhere else (no XCom, no rendered field)
        assert [where for where, text in kept.items() if f"<payload {n}>" in text] == [
            ("xcom", "drain", -1, "return_value")
        ]
    one_copy = len(json.dumps(run.xcom("drain")))
    assert one_copy > 100_000
    # Everything else the run keeps (keys, outcomes, rendered arguments) is small.
    assert sum(len(text) for text in kept.values()) < 1.1 * one_copy
    # The payloads reached the side effect all the same: read from the store by key.
    effects = stored_rows(store_url, "pending_ops_effects")
    assert {key: effect["payload"]["item"] for key, effect in effects.items()} == {
        f"big-{n}": n for n in range(5)
    }


def test_a_row_reclaimed_before_its_mapped_task_runs_is_left_to_the_run_that_holds_it(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    example_dags()  # puts example_dags/ on sys.path, as Airflow does for a DAGs folder
    from _queue_processing import process_claimed_rows

    rescuer = "stale_claim_recovery/manual__rescuer"
    with AtomicStore(store_url) as store:
        for n in range(3):
            store.put("pending_ops", f"op-{n}", {"status": "pending", "payload": {"item": n}})
    params = {"conn_id": store_conn, "table": "pending_ops", "work_seconds": 0.0}
    with new_dag(dag_id, params={**params, "effects_table": "pending_ops_effects"}) as dag:
        drain = AtomicClaimOperator(
            task_id="drain",
            conn_id=store_conn,
            table="pending_ops",
            where=[{"field": "status", "operator": "equals", "value": "pending"}],
        )
        processed = process_claimed_rows(drain)

        @task
        def take_over_op_1() -> None:  # what recovery does to a claim it thinks is stale
            with AtomicStore(store_url) as store:
                row = store.get("pending_ops", "op-1") or {}
                store.put("pending_ops", "op-1", {**row, "claimedBy": rescuer})

        dag.get_task("drain_keys") >> take_over_op_1() >> processed

    run = run_dag(dag)

    assert run.state == "success"
    assert run.xcom("process", map_index=1) == {
        "key": "op-1",
        "status": "skipped",
        "claimedBy": rescuer,
        "finished": False,
    }
    queued, effects = (
        stored_rows(store_url, "pending_ops"),
        stored_rows(store_url, "pending_ops_effects"),
    )
    assert sorted(effects) == ["op-0", "op-2"]  # op-1's side effect is the rescuer's to perform
    assert queued["op-1"]["status"] == "in_flight"
    assert queued["op-1"]["claimedBy"] == rescuer
    assert queued["op-0"]["status"] == queued["op-2"]["status"] == "done"


def test_recovery_reclaims_only_stale_in_flight_rows_and_processes_them_like_the_dispatcher(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    dead = "queue_dispatcher/manual__crashed"
    long_ago, just_now = shifted(timedelta(hours=-1)), shifted(timedelta(seconds=-5))
    with AtomicStore(store_url) as store:
        for n in range(2):  # claimed an hour ago by a run that died
            stale = {"status": "in_flight", "claimedAt": long_ago, "claimedBy": dead}
            store.put("pending_ops", f"stale-{n}", {**stale, "payload": {"item": n}})
        # The dead run had already performed stale-0's side effect before dying.
        store.put("pending_ops_effects", "stale-0", {"performedBy": dead, "outcome": "done"})
        live = {"status": "in_flight", "claimedAt": just_now, "claimedBy": "queue_dispatcher/busy"}
        store.put("pending_ops", "busy", {**live, "payload": {}})
        store.put("pending_ops", "waiting", {"status": "pending", "payload": {}})
    recovery = example_dag("stale_claim_recovery")

    by_age = {**conf, "stale_after_seconds": 60, "reclaim_dead_runs": False}  # no such runs
    run = run_dag(recovery, conf=by_age)
    again = run_dag(recovery, conf=by_age)

    assert run.state == again.state == "success"
    assert [row["key"] for row in run.xcom("reclaim")["claimed"]] == ["stale-0", "stale-1"]
    assert again.xcom("reclaim")["count"] == 0
    queued, effects = (
        stored_rows(store_url, "pending_ops"),
        stored_rows(store_url, "pending_ops_effects"),
    )
    for n in range(2):
        row = queued[f"stale-{n}"]
        assert (row["status"], row["claimedBy"], row["recoveries"]) == (
            "done",
            run.execution_id,
            1,
        )
        assert row["claimedAt"] > long_ago
    # stale-0's effect is not performed a second time; stale-1's is performed now.
    assert queued["stale-0"]["effect"] == f"already performed by {dead}"
    assert effects["stale-0"] == {"performedBy": dead, "outcome": "done"}
    assert queued["stale-1"]["effect"] == "performed"
    assert effects["stale-1"]["performedBy"] == run.execution_id
    # A fresh claim and a pending row are not the recovery's business.
    assert queued["busy"] == {**live, "payload": {}}
    assert queued["waiting"]["status"] == "pending"


def _stale_rows_with_an_unfinished_effect(store_url: str, dead: str) -> str:
    """Two stale rows of a dead run; it had started stale-0's side effect, never finished it."""
    long_ago = shifted(timedelta(hours=-1))
    with AtomicStore(store_url) as store:
        for n in range(2):
            stale = {"status": "in_flight", "claimedAt": long_ago, "claimedBy": dead}
            store.put("pending_ops", f"stale-{n}", {**stale, "payload": {"item": n}})
        started = {"performedBy": dead, "performedAt": long_ago, "payload": {"item": 0}}
        store.put("pending_ops_effects", "stale-0", {**started, "attempts": 1})  # no outcome
    return long_ago


def test_recovery_re_sends_an_effect_that_a_dead_claimer_started_but_never_finished(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    dead = "queue_dispatcher/manual__died_while_sending"
    long_ago = _stale_rows_with_an_unfinished_effect(store_url, dead)

    run = run_dag(example_dag("stale_claim_recovery"), conf={**conf, "stale_after_seconds": 60})

    assert run.state == "success"
    queued, effects = (
        stored_rows(store_url, "pending_ops"),
        stored_rows(store_url, "pending_ops_effects"),
    )
    # Sent again under the item's idempotency key: never passed as "already performed".
    assert queued["stale-0"]["status"] == "done"
    assert queued["stale-0"]["effect"] == f"re-sent: the attempt by {dead} never finished"
    assert effects["stale-0"] == {
        "performedBy": dead,
        "performedAt": long_ago,
        "payload": {"item": 0},
        "attempts": 2,
        "resentBy": run.execution_id,
        "outcome": "done",
    }
    assert queued["stale-1"]["effect"] == "performed"
    assert effects["stale-1"]["attempts"] == 1


def test_with_resending_off_an_unfinished_effect_is_flagged_for_review_never_passed_as_done(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    dead = "queue_dispatcher/manual__died_while_sending"
    _stale_rows_with_an_unfinished_effect(store_url, dead)
    recovery = example_dag("stale_claim_recovery")
    no_resend = {**conf, "stale_after_seconds": 60, "resend_unfinished": False}

    run = run_dag(recovery, conf=no_resend)
    again = run_dag(recovery, conf={**no_resend, "stale_after_seconds": 0})

    assert run.state == again.state == "success"
    queued, effects = (
        stored_rows(store_url, "pending_ops"),
        stored_rows(store_url, "pending_ops_effects"),
    )
    assert queued["stale-0"]["status"] == "needs_review"
    assert queued["stale-0"]["error"] == (
        f"the side effect started by {dead} never finished: check the remote side, "
        "then set status to done (or to pending to send it again)"
    )
    assert "outcome" not in effects["stale-0"] and effects["stale-0"]["attempts"] == 1
    assert queued["stale-1"]["status"] == "done"
    assert again.xcom("reclaim")["count"] == 0  # a flagged row waits for a human


def test_an_unfinished_effect_that_finishes_meanwhile_is_not_sent_again(
    store_conn: str, store_url: str
) -> None:
    example_dags()  # puts example_dags/ on sys.path, as Airflow does for a DAGs folder
    from _queue_processing import unfinished

    slow = "queue_dispatcher/manual__slow_not_dead"
    started = {"performedBy": slow, "payload": {"item": 0}, "attempts": 1}
    with AtomicStore(store_url) as store:  # the slow run records its outcome after all
        store.put("pending_ops_effects", "op-0", {**started, "outcome": "done"})
    params = {"table": "pending_ops", "effects_table": "pending_ops_effects", "work_seconds": 0}

    with AtomicStoreHook(store_conn) as hook:
        outcome = unfinished(hook, "op-0", started, {"item": 0}, params, "recovery/run")

    assert outcome == {"status": "done", "effect": f"already performed by {slow}"}
    assert stored_rows(store_url, "pending_ops_effects")["op-0"] == {**started, "outcome": "done"}
