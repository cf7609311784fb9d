"""example_dags/leader_lease.py end to end (both backends; contenders in
test_when_runs_overlap.py)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.timestamps import shifted
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag, stored_rows
from devkit.processes import run_in_processes
from tests.example_dags import fencing_race

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


def test_every_acquisition_gets_a_higher_fence_and_writes_the_protected_row_under_it(
    run_dag: RunDag, lease_conf: dict[str, Any], store_url: str
) -> None:
    dag = example_dag("leader_lease")
    first = run_dag(dag, conf=lease_conf)  # the first insert: fence 1
    after_release = run_dag(dag, conf=lease_conf)  # takes the released lease over: fence 2
    with AtomicStore(store_url) as store:  # a holder that died: its lease expired unreleased
        lease = store.get("leases", "dispatcher")
        store.put("leases", "dispatcher", {**lease, "expiresAt": shifted(timedelta(seconds=-1))})
    after_expiry = run_dag(dag, conf=lease_conf)

    assert [run.state for run in (first, after_release, after_expiry)] == ["success"] * 3
    assert first.xcom("acquire")["value"]["fence"] == 1
    assert after_release.xcom("take_over")["value"]["fence"] == 2
    assert after_expiry.xcom("take_over")["value"]["fence"] == 3
    log = stored_rows(store_url, "lease_log")
    assert [log[run.execution_id]["fence"] for run in (first, after_release, after_expiry)] == [
        1,
        2,
        3,
    ]
    protected = stored_rows(store_url, "lease_protected")["dispatcher"]
    assert protected == {"fence": 3, "data": {"step": 1, "writer": after_expiry.execution_id}}


def test_a_stale_holder_that_wakes_after_a_newer_holder_wrote_is_refused(
    run_dag: RunDag, lease_conf: dict[str, Any], store_url: str
) -> None:
    """The timeline of docs/recipes/leader-lease.md: A holds fence 1, stalls past its
    TTL; B takes over (fence 2) and writes; A wakes, still believing it holds the
    lease, and writes: refused, B's write stands."""
    from airflow_atomic_store import AtomicStoreHook
    from airflow_atomic_store.compat import AirflowFailException

    dag = example_dag("leader_lease")
    stale = run_dag(dag, conf=lease_conf)
    with AtomicStore(store_url) as store:
        lease = store.get("leases", "dispatcher")
        store.put("leases", "dispatcher", {**lease, "expiresAt": shifted(timedelta(seconds=-1))})
    newer = run_dag(dag, conf=lease_conf)
    assert newer.xcom("take_over")["value"]["fence"] == 2

    fenced_write = importlib.import_module("leader_lease").fenced_write  # the DAG's own
    params = {"protected_table": "lease_protected", "lease": "dispatcher"}
    with AtomicStoreHook(lease_conf["conn_id"]) as hook, pytest.raises(AirflowFailException):
        fenced_write(hook, params, 1, {"writer": stale.execution_id})

    protected = stored_rows(store_url, "lease_protected")["dispatcher"]
    assert protected["fence"] == 2
    assert protected["data"]["writer"] == newer.execution_id


def test_fences_never_repeat_under_eight_processes_racing_to_take_the_lease_over(
    store_url: str,
) -> None:
    with AtomicStore(store_url) as store:
        store.put("leases", "dispatcher", {"expiresAt": shifted(timedelta(hours=-1)), "fence": 1})
        store.put("lease_protected", "dispatcher", {"fence": 0})

    won = run_in_processes(fencing_race.take_over_and_write, [(store_url, 25)] * 8)

    fences = sorted(fence for process in won for fence, _ in process)
    assert len(fences) >= 8
    # Each take-over got the next fence: none handed out twice, none skipped.
    assert fences == list(range(2, 2 + len(fences)))
    for process in won:  # in each process's own order, its fences strictly increase
        assert [fence for fence, _ in process] == sorted({fence for fence, _ in process})
    accepted = [fence for process in won for fence, ok in process if ok]
    refused = [fence for process in won for fence, ok in process if not ok]
    # A write was refused only because a higher fence had already written.
    assert all(any(other > fence for other in accepted) for fence in refused)
    protected = stored_rows(store_url, "lease_protected")["dispatcher"]
    assert protected["fence"] == max(accepted) == fences[-1]
