"""example_dags/rate_limit_per_key.py end to end (both backends; concurrent callers in
test_when_runs_overlap.py)."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

from airflow_atomic_store import AtomicStore
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag

RunDag = Callable[..., DagRunResult]
INTERVAL = 0.3


def test_back_to_back_callers_get_slots_one_interval_apart_and_call_no_earlier(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    dag = example_dag("rate_limit_per_key")
    partner = {**conf, "key": "partner", "interval_seconds": 1.0}

    first, second = run_dag(dag, conf=partner), run_dag(dag, conf=partner)

    assert first.state == second.state == "success"
    assert first.xcom("seed_slot")["inserted"] is True
    calls = [first.xcom("call_at_slot"), second.xcom("call_at_slot")]
    # However fast the second run came, its slot is at least an interval after the
    # first's (it waited for it, or the stored slot was stale by then and reset).
    assert calls[1]["slot"] >= calls[0]["slot"] + 1.0
    assert all(call["calledAt"] >= call["slot"] for call in calls)
    with AtomicStore(store_url) as store:
        assert store.get("call_slots", "partner") == {"nextSlotAt": calls[1]["slot"] + 1.0}
        recorded = [store.get("rate_limited_calls", run.execution_id) for run in (first, second)]
    assert recorded == calls


def test_a_stale_slot_is_reset_to_now_so_a_quiet_key_does_not_burst(
    run_dag: RunDag, conf: dict[str, Any], store_url: str
) -> None:
    long_ago = time.time() - 3600  # the last call was an hour ago
    with AtomicStore(store_url) as store:
        store.put("call_slots", "partner", {"nextSlotAt": long_ago})

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
        assert store.get("call_slots", "partner") == {"nextSlotAt": call["slot"] + INTERVAL}


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
    from airflow_atomic_store import AtomicStoreHook

    reserve_slot = importlib.import_module("rate_limit_per_key").reserve_slot  # the DAG's own
    params = {"table": "call_slots", "key": "partner", "interval_seconds": INTERVAL}
    with AtomicStoreHook(partner["conn_id"]) as hook:
        other, _ = reserve_slot(hook, params, f"{run.dag_id}/other-run/call_at_slot/-1/try-1")
        retry, _ = reserve_slot(hook, params, f"{task_key}/try-2")
    assert retry >= other + INTERVAL > first_try["slot"]
