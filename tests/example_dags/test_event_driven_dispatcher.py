"""example_dags/event_driven_dispatcher.py end to end (both backends).

The watcher's trigger is run as the triggerer runs it (pointed at this test's
store), and its event is followed by a dispatcher run, as the scheduler would start.
A dispatcher run that dies after its claim is recovered by event_ops' own
stale-claim recovery DAG.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.triggers import ClaimableRowsTrigger
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag, stored_rows

RunDag = Callable[..., DagRunResult]


def _watcher_trigger(dag: Any) -> ClaimableRowsTrigger:
    """The trigger of the asset the DAG is scheduled on (the DAG file's ``event_ops_work``)."""
    asset = importlib.import_module("event_driven_dispatcher").event_ops_work
    assert list(dag.timetable.asset_condition.objects) == [asset]
    (watcher,) = asset.watchers
    return watcher.trigger


def _first_event(trigger: ClaimableRowsTrigger, conn_id: str) -> Any:
    _, kwargs = trigger.serialize()
    rebuilt = ClaimableRowsTrigger(**{**kwargs, "conn_id": conn_id, "poll_interval": 0.2})

    async def first() -> Any:
        events = rebuilt.run()
        try:
            return await asyncio.wait_for(anext(events), 60)
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    return asyncio.run(first())


def test_airflow_links_the_watcher_trigger_to_its_asset() -> None:
    """Airflow links a watcher's trigger to its asset by a hash of the trigger's kwargs,
    taken as the DAG encodes them and again as the trigger table gives them back: the
    two must agree, or the trigger is created, never linked, and cleaned up as unused
    (the watcher never runs; the e2e deployment found it so with nested kwargs)."""
    from airflow.models.trigger import Trigger
    from airflow.serialization.serialized_objects import BaseSerialization
    from airflow.triggers.base import BaseEventTrigger

    trigger = _watcher_trigger(example_dag("event_driven_dispatcher"))
    classpath, kwargs = trigger.serialize()
    encoded = {name: BaseSerialization.serialize(value) for name, value in kwargs.items()}
    stored = Trigger(classpath=classpath, kwargs=encoded)
    assert BaseEventTrigger.hash(classpath, stored.kwargs) == BaseEventTrigger.hash(
        classpath, encoded
    )


def test_the_watcher_watches_what_the_dispatcher_claims() -> None:
    dispatcher = example_dag("event_driven_dispatcher")
    trigger = _watcher_trigger(dispatcher)
    _, kwargs = trigger.serialize()
    drain = dispatcher.get_task("drain")
    assert kwargs["table"] == dispatcher.params["table"] == "event_ops"
    assert json.loads(kwargs["where"]) == drain.where
    assert kwargs["conn_id"] == dispatcher.params["conn_id"]
    assert drain.short_circuit is True


def test_work_arriving_fires_the_watcher_and_one_run_processes_each_item_once(
    run_dag: RunDag, conf: dict[str, Any], store_url: str, store_conn: str
) -> None:
    producer = example_dag("event_producer")
    dispatcher = example_dag("event_driven_dispatcher")

    enqueued = run_dag(producer, conf={**conf, "count": 3})
    event = _first_event(_watcher_trigger(dispatcher), store_conn)
    run = run_dag(dispatcher, conf=conf)
    late = run_dag(dispatcher, conf=conf)  # a second run for the same event: nothing left

    assert enqueued.state == run.state == late.state == "success"
    assert event.payload["table"] == "event_ops" and event.payload["count"] == 3
    assert run.xcom("drain")["count"] == 3
    assert late.xcom("drain")["count"] == 0
    assert late.state_of("drain_keys") == "skipped"
    rows = stored_rows(store_url, "event_ops")
    assert {key: row["status"] for key, row in rows.items()} == {
        f"evt-000{n}": "done" for n in range(3)
    }
    effects = stored_rows(store_url, "event_ops_effects")
    assert sorted(effects) == sorted(rows)
    assert {effect["attempts"] for effect in effects.values()} == {1}
    assert {effect["performedBy"] for effect in effects.values()} == {run.execution_id}


def test_the_event_queue_has_its_own_scheduled_recovery_for_its_tables() -> None:
    dispatcher = example_dag("event_driven_dispatcher")
    recovery = example_dag("event_ops_stale_claim_recovery")
    pending_ops_recovery = example_dag("stale_claim_recovery")

    # The scheduler runs a recovery with its defaults: they must name this queue's tables.
    for param in ("table", "effects_table"):
        assert recovery.params[param] == dispatcher.params[param], param
    assert (recovery.params["table"], recovery.params["effects_table"]) == (
        "event_ops",
        "event_ops_effects",
    )
    assert recovery.schedule == pending_ops_recovery.schedule == timedelta(minutes=15)
    assert recovery.max_active_runs == 1
    assert recovery.task_dict.keys() == pending_ops_recovery.task_dict.keys()  # one definition
    assert recovery.fileloc == dispatcher.fileloc  # parsed (and re-parsed) with its queue


def test_rows_claimed_by_a_dead_dispatcher_run_are_reclaimed_and_processed_once_by_recovery(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    dispatcher = example_dag("event_driven_dispatcher")
    enqueued = run_dag(example_dag("event_producer"), conf={**conf, "count": 3})
    # A dispatcher run's drain, as its task claims, then the run dies (its worker killed
    # before the mapped tasks ran); it had performed evt-0000's side effect already.
    dead = "event_driven_dispatcher/asset_triggered__dead"
    with AtomicStore(store_url) as store:
        drain = dispatcher.get_task("drain")
        claim = store.atomic_claim("event_ops", where=drain.where, limit=10, execution_id=dead)
        store.put("event_ops_effects", "evt-0000", {"performedBy": dead, "outcome": "done"})
    assert [row["key"] for row in claim["claimed"]] == enqueued.xcom("enqueue")

    # Neither another dispatcher run nor the pending_ops recovery ever takes them.
    late = run_dag(dispatcher, conf=conf)
    elsewhere = run_dag(
        example_dag("stale_claim_recovery"), conf={**conf, "stale_after_seconds": 0}
    )
    assert late.xcom("drain")["count"] == elsewhere.xcom("reclaim")["count"] == 0
    assert {row["status"] for row in stored_rows(store_url, "event_ops").values()} == {"in_flight"}

    recovery = example_dag("event_ops_stale_claim_recovery")
    # By age alone (the dead run is not one Airflow knows of here: it would count as gone).
    too_fresh = run_dag(
        recovery, conf={**conf, "stale_after_seconds": 3600, "reclaim_dead_runs": False}
    )
    recovered = run_dag(recovery, conf={**conf, "stale_after_seconds": 0})

    assert too_fresh.state == recovered.state == "success"
    assert too_fresh.xcom("reclaim")["count"] == 0
    assert [row["key"] for row in recovered.xcom("reclaim")["claimed"]] == enqueued.xcom("enqueue")
    rows = stored_rows(store_url, "event_ops")
    assert {key: row["status"] for key, row in rows.items()} == {
        f"evt-000{n}": "done" for n in range(3)
    }
    assert {row["claimedBy"] for row in rows.values()} == {recovered.execution_id}
    assert {row["recoveries"] for row in rows.values()} == {1}
    # Its effects table is the dispatcher's: what the dead run performed is not done again.
    effects = stored_rows(store_url, "event_ops_effects")
    assert rows["evt-0000"]["effect"] == f"already performed by {dead}"
    assert effects["evt-0000"] == {"performedBy": dead, "outcome": "done"}
    for key in ("evt-0001", "evt-0002"):
        assert rows[key]["effect"] == "performed"
        assert (effects[key]["performedBy"], effects[key]["attempts"]) == (
            recovered.execution_id,
            1,
        )
    assert stored_rows(store_url, "pending_ops_effects") == {}
