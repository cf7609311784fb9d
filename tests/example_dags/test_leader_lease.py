"""example_dags/leader_lease.py end to end (both backends; contenders in
test_when_runs_overlap.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.timestamps import shifted
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag

RunDag = Callable[..., DagRunResult]
QUICK = {"steps": 2, "step_seconds": 0.05, "ttl_seconds": 30}


@pytest.fixture
def lease_conf(conf: dict[str, Any]) -> dict[str, Any]:
    return {**conf, **QUICK}


def worked(run: DagRunResult) -> bool:
    return run.state_of("work") == "success" and run.state_of("back_off") == "skipped"


def test_a_free_lease_is_acquired_worked_under_and_released(
    run_dag: RunDag, lease_conf: dict[str, Any], store_url: str
) -> None:
    run = run_dag(example_dag("leader_lease"), conf=lease_conf)

    assert run.state == "success"
    assert worked(run)
    assert run.xcom("acquire")["inserted"] is True
    assert run.xcom("take_over")["updated"] is False  # a fresh lease is not expired
    assert run.xcom("work") == 2
    assert run.xcom("release")["updated"] is True
    with AtomicStore(store_url) as store:
        lease = store.get("leases", "dispatcher")
        log = store.get("lease_log", run.execution_id)
    assert lease["holder"] == run.execution_id
    assert lease["expiresAt"] == lease["releasedAt"]  # released: expired as of the release
    assert lease["acquiredAt"] <= log["start"] < log["end"] <= lease["releasedAt"]


def test_a_live_lease_held_elsewhere_makes_runs_back_off_until_it_expires(
    run_dag: RunDag, lease_conf: dict[str, Any], store_url: str
) -> None:
    dag = example_dag("leader_lease")
    other = {
        "holder": "other_dag/run-1",
        "acquiredAt": shifted(timedelta(minutes=-1)),
        "expiresAt": shifted(timedelta(minutes=5)),
        "releasedAt": None,
    }
    with AtomicStore(store_url) as store:
        store.put("leases", "dispatcher", other)

    backed_off = run_dag(dag, conf=lease_conf)
    with AtomicStore(store_url) as store:
        untouched = store.get("leases", "dispatcher")
        store.put("leases", "dispatcher", {**other, "expiresAt": shifted(timedelta(seconds=-1))})
    took_over = run_dag(dag, conf=lease_conf)

    assert backed_off.state == "success"
    assert (backed_off.state_of("back_off"), backed_off.state_of("work")) == ("success", "skipped")
    assert backed_off.xcom("back_off") == (
        f"lease held by other_dag/run-1 until {other['expiresAt']}: backing off"
    )
    assert backed_off.xcom("release")["updated"] is False  # never releases another's lease
    assert untouched == other
    assert took_over.state == "success"
    assert worked(took_over)
    assert took_over.xcom("take_over")["updated"] is True
    with AtomicStore(store_url) as store:
        lease = store.get("leases", "dispatcher")
        logs = [row["key"] for row in store.query("lease_log")]
    assert lease["holder"] == took_over.execution_id
    assert lease["releasedAt"] is not None
    assert logs == [took_over.execution_id]


def test_the_lease_is_released_even_when_the_work_fails(
    run_dag: RunDag, lease_conf: dict[str, Any], store_url: str
) -> None:
    run = run_dag(example_dag("leader_lease"), conf={**lease_conf, "simulate_failure": True})

    assert run.state == "failed"
    assert run.state_of("work") == "failed"
    assert run.state_of("release") == "success"
    assert run.xcom("release")["updated"] is True
    with AtomicStore(store_url) as store:
        lease = store.get("leases", "dispatcher")
        log = store.get("lease_log", run.execution_id)
    assert lease["holder"] == run.execution_id
    assert lease["expiresAt"] == lease["releasedAt"]
    assert log["start"] < log["end"] <= lease["releasedAt"]
