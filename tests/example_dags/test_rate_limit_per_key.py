"""example_dags/rate_limit_per_key.py end to end (both backends; concurrent callers in
test_when_runs_overlap.py). Waits are deferrals to ``DateTimeTrigger``: no task sleeps."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

from airflow_atomic_store import AtomicStore, AtomicStoreHook
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag
from tests.example_dags.deferrals import recorded_deferrals

RunDag = Callable[..., DagRunResult]
INTERVAL = 0.3
BACK_TO_BACK = 5.0


def test_back_to_back_callers_are_spaced_an_interval_apart_waiting_deferred_not_running(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    dag = example_dag("rate_limit_per_key")
    # Long enough that the second run reserves within the first's interval even on a
    # loaded machine (at 2 s, make compat's four parallel lines once let the stored
    # slot go stale before the second run came: it called at once, never deferred).
    partner = {**conf, "key": "partner", "interval_seconds": BACK_TO_BACK}

    with recorded_deferrals() as waits:
        first, second = run_dag(dag, conf=partner), run_dag(dag, conf=partner)

    assert first.state == second.state == "success"
    assert first.xcom("seed_slot")["inserted"] is True
    calls = [first.xcom("call_at_slot"), second.xcom("call_at_slot")]
    # However fast the second run came, its slot is at least an interval after the
    # first's (it waited for it, or the stored slot was stale by then and reset), and
    # so is its call.
    assert calls[1]["slot"] >= calls[0]["slot"] + BACK_TO_BACK
    assert calls[1]["calledAt"] >= calls[0]["calledAt"] + BACK_TO_BACK
    assert all(call["calledAt"] >= call["slot"] for call in calls)
    # The second caller came within the interval: it waited in the trigger, deferred,
    # with no task instance of its run running meanwhile.
    mine = [wait for wait in waits if wait.run_id == second.run_id]
    assert mine
    assert {(wait.task_id, wait.trigger) for wait in mine} == {("call_at_slot", "DateTimeTrigger")}
    assert all(wait.running == [] for wait in mine)
    assert sum(wait.seconds for wait in mine) >= calls[1]["slot"] - mine[0].started - 0.1
    with AtomicStore(store_url) as store:
        slot_row = store.get("call_slots", "partner")
        recorded = [store.get("rate_limited_calls", run.execution_id) for run in (first, second)]
    assert slot_row["nextSlotAt"] == calls[1]["slot"] + BACK_TO_BACK
    assert slot_row["lastCallAt"] <= calls[1]["calledAt"]
    assert recorded == calls


def test_the_gate_holds_a_caller_whose_slot_came_while_the_last_call_was_recent(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    """A caller woken late calls late: the next caller's slot can come less than an
    interval after that call. The gate (``lastCallAt``) defers it again until the gap."""
    now = time.time()
    with AtomicStore(store_url) as store:  # a slot free now, but a call a moment ago
        store.put("call_slots", "partner", {"nextSlotAt": now, "lastCallAt": now})

    with recorded_deferrals() as waits:
        run = run_dag(
            example_dag("rate_limit_per_key"),
            conf={**conf, "key": "partner", "interval_seconds": 1.5},
        )

    assert run.state == "success"
    call = run.xcom("call_at_slot")
    assert call["calledAt"] >= now + 1.5
    assert [wait.trigger for wait in waits] == ["DateTimeTrigger"]  # one wait: for the gap


def test_a_stale_slot_is_reset_to_now_so_a_quiet_key_does_not_burst(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    long_ago = time.time() - 3600  # the last call was an hour ago
    with AtomicStore(store_url) as store:
        store.put("call_slots", "partner", {"nextSlotAt": long_ago, "lastCallAt": long_ago})

    before = time.time()
    run = run_dag(
        example_dag("rate_limit_per_key"),
        conf={**conf, "key": "partner", "interval_seconds": INTERVAL},
    )
    after = time.time()

    assert run.state == "success"
    call = run.xcom("call_at_slot")
    assert call["resetStale"] is True
    # The slot is now, not an hour ago: without the reset, this caller and the next
    # 12,000 would all find their slot in the past and call at once.
    assert before <= call["slot"] <= call["calledAt"] <= after
    with AtomicStore(store_url) as store:
        assert store.get("call_slots", "partner")["nextSlotAt"] == call["slot"] + INTERVAL


def test_a_retry_reserves_a_new_slot_rather_than_replay_one_that_has_passed(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    """A retry comes minutes after its first try: replaying that try's slot would call
    at once, next to whoever reset the stale slot meanwhile. The reservation is keyed
    by the try, so try 2 reserves anew (a wasted slot keeps the spacing)."""
    partner = {**conf, "key": "partner", "interval_seconds": INTERVAL}
    run = run_dag(example_dag("rate_limit_per_key"), conf=partner)
    assert run.state == "success"
    first_try = run.xcom("call_at_slot")
    task_key = f"{run.dag_id}/{run.run_id}/call_at_slot/-1"
    advance = [{"field": "nextSlotAt", "operation": "increment", "value": INTERVAL}]
    with AtomicStore(store_url) as store:
        # The DAG reserved under its try's key: calling with that key replays.
        replay = store.atomic_update(
            "call_slots", "partner", mutations=advance, idempotency_key=f"{task_key}/try-1/reserve"
        )
        assert replay["replayed"] is True
        assert replay["value"]["nextSlotAt"] == first_try["slot"] + INTERVAL
        # Minutes later another caller resets the stale slot and calls; then try 2.
        store.put("call_slots", "partner", {"nextSlotAt": time.time() - 600})

    reserve_slot = importlib.import_module("rate_limit_per_key").reserve_slot  # the DAG's own
    params = {"table": "call_slots", "key": "partner", "interval_seconds": INTERVAL}
    with AtomicStoreHook(partner["conn_id"]) as hook:
        other, _ = reserve_slot(hook, params, f"{run.dag_id}/other-run/call_at_slot/-1/try-1")
        retry, _ = reserve_slot(hook, params, f"{task_key}/try-2")
    assert retry >= other + INTERVAL > first_try["slot"]
