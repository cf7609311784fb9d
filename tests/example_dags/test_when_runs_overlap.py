"""The example DAGs raced against each other: DAG runs in separate OS processes at once.

Each worker of ``airflow_workers`` is a warm Airflow process with its own metadata
DB; jobs given to several workers together run their DAG runs at the same moment,
against the test's one store (both backends), as separate Airflow workers would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import combinations, pairwise
from typing import Any

from devkit.airflow_workers import AirflowWorkers
from devkit.dagrun import DagRunResult
from devkit.examples import example_dag, stored_rows
from tests.example_dags.jobs import drain_until_empty, run_example, run_example_recording_waits

RunDag = Callable[..., DagRunResult]


def claimed_keys(run: DagRunResult, claim_task: str) -> list[str]:
    return [row["key"] for row in run.xcom(claim_task)["claimed"]]


def test_dispatchers_running_at_once_process_disjoint_rows_each_exactly_once(
    run_dag: RunDag,
    airflow_workers: AirflowWorkers,
    conf: dict[str, Any],
    worker_env: dict[str, str],
    store_url: str,
) -> None:
    produced = run_dag(example_dag("queue_producer"), conf={**conf, "count": 20})
    dispatch = {**conf, "batch_size": 5}

    drained = airflow_workers.run_together(
        [(drain_until_empty, (dispatch,)), (drain_until_empty, (dispatch,))], env=worker_env
    )

    runs = [run for worker_runs in drained for run in worker_runs]
    assert all(run.state == "success" for run in runs)
    batches = {run.execution_id: claimed_keys(run, "drain") for run in runs}
    assert len(batches) == len(runs)  # every run had its own execution id
    for (_, one), (_, other) in combinations(batches.items(), 2):
        assert not set(one) & set(other)
    everything = sorted(key for keys in batches.values() for key in keys)
    assert everything == sorted(produced.xcom("enqueue"))  # each item claimed exactly once
    queued, effects = (
        stored_rows(store_url, "pending_ops"),
        stored_rows(store_url, "pending_ops_effects"),
    )
    assert {value["status"] for value in queued.values()} == {"done"}
    assert sorted(effects) == everything  # each side effect performed once, by its claimer
    for run_id, keys in batches.items():
        for key in keys:
            assert queued[key]["claimedBy"] == effects[key]["performedBy"] == run_id


def test_a_dispatcher_killed_after_claiming_leaves_rows_that_recovery_finishes_once(
    run_dag: RunDag,
    airflow_workers: AirflowWorkers,
    conf: dict[str, Any],
    worker_env: dict[str, str],
    store_url: str,
) -> None:
    produced = run_dag(example_dag("queue_producer"), conf={**conf, "count": 4})
    [victim] = airflow_workers.take(1)
    # Each side effect takes a minute: the run is killed during the first one.
    victim.submit(run_example, "queue_dispatcher", {**conf, "work_seconds": 60}, env=worker_env)
    effects = wait_for_rows(store_url, "pending_ops_effects", timeout=120)
    airflow_workers.kill(victim)

    stuck = stored_rows(store_url, "pending_ops")
    [dead] = {value["claimedBy"] for value in stuck.values()}
    assert {value["status"] for value in stuck.values()} == {"in_flight"}
    assert [value["performedBy"] for value in effects.values()] == [dead]
    recovery = example_dag("stale_claim_recovery")
    # By age alone: the killed run lived in the worker's own metadata DB, unknown here.
    too_fresh = run_dag(
        recovery, conf={**conf, "stale_after_seconds": 3600, "reclaim_dead_runs": False}
    )
    recovered = run_dag(recovery, conf={**conf, "stale_after_seconds": 0})

    assert too_fresh.state == recovered.state == "success"
    assert too_fresh.xcom("reclaim")["count"] == 0  # a claim younger than the threshold stays
    assert sorted(claimed_keys(recovered, "reclaim")) == sorted(produced.xcom("enqueue"))
    queued = stored_rows(store_url, "pending_ops")
    after = stored_rows(store_url, "pending_ops_effects")
    assert {key: value["status"] for key, value in queued.items()} == dict.fromkeys(stuck, "done")
    assert {value["claimedBy"] for value in queued.values()} == {recovered.execution_id}
    assert {value["recoveries"] for value in queued.values()} == {1}
    # The killed run died while sending: nobody knows whether the remote side got that
    # item, so recovery sends it again under its idempotency key (never "already
    # performed"); every other side effect is performed once.
    [(started, _)] = effects.items()
    assert "outcome" not in effects[started]
    assert (after[started]["performedBy"], after[started]["resentBy"]) == (
        dead,
        recovered.execution_id,
    )
    assert (after[started]["attempts"], after[started]["outcome"]) == (2, "done")
    assert queued[started]["effect"] == f"re-sent: the attempt by {dead} never finished"
    assert sorted(after) == sorted(stuck)
    for key in set(stuck) - {started}:
        assert (after[key]["performedBy"], after[key]["attempts"]) == (recovered.execution_id, 1)
        assert queued[key]["effect"] == "performed"


def test_of_two_lease_contenders_exactly_one_works_and_holders_never_overlap(
    run_dag: RunDag,
    airflow_workers: AirflowWorkers,
    conf: dict[str, Any],
    worker_env: dict[str, str],
    store_url: str,
) -> None:
    # The winner holds the lease for eight seconds or more, long after the loser tries:
    # on a loaded machine the two warm workers can start their runs seconds apart.
    contend = {**conf, "steps": 16, "step_seconds": 0.5, "ttl_seconds": 60}
    job = (run_example, ("leader_lease", contend))

    contenders = [runs[0] for runs in airflow_workers.run_together([job, job], env=worker_env)]
    later = run_dag(example_dag("leader_lease"), conf={**contend, "step_seconds": 0.05})

    assert [run.state for run in contenders] == ["success", "success"]
    [winner] = [run for run in contenders if run.state_of("work") == "success"]
    [loser] = [run for run in contenders if run is not winner]
    assert (loser.state_of("work"), loser.state_of("back_off")) == ("skipped", "success")
    assert loser.xcom("back_off").startswith(f"lease held by {winner.execution_id} until ")
    assert loser.xcom("release")["updated"] is False
    assert winner.xcom("release")["updated"] is True
    assert later.xcom("take_over")["updated"] is True  # the released lease is free again
    log = stored_rows(store_url, "lease_log")
    assert sorted(log) == sorted([winner.execution_id, later.execution_id])
    intervals = sorted((entry["start"], entry["end"]) for entry in log.values())
    for (_, end), (start, _) in pairwise(intervals):
        assert end <= start


def test_rate_limited_callers_running_at_once_call_an_interval_apart_waiting_deferred(
    airflow_workers: AirflowWorkers,
    conf: dict[str, Any],
    worker_env: dict[str, str],
    store_url: str,
) -> None:
    interval = 0.4
    job = (
        run_example_recording_waits,
        ("rate_limit_per_key", {**conf, "interval_seconds": interval}),
    )

    results = airflow_workers.run_together([job] * 3, env=worker_env)

    runs = [worker_runs[0] for worker_runs, _ in results]
    waits = [wait for _, worker_waits in results for wait in worker_waits]
    assert [run.state for run in runs] == ["success"] * 3
    calls = sorted(stored_rows(store_url, "rate_limited_calls").values(), key=lambda c: c["slot"])
    assert len(calls) == 3
    assert all(call["calledAt"] >= call["slot"] for call in calls)  # nobody calls early
    for earlier, later in pairwise(calls):  # slots are an interval apart
        assert later["slot"] - earlier["slot"] >= interval - 1e-6
    # The gate keeps the calls themselves an interval apart, however late the trigger
    # woke a caller: a caller woken late may call after one of a later slot, never closer.
    by_call = sorted(calls, key=lambda call: call["calledAt"])
    for earlier, later in pairwise(by_call):
        assert later["calledAt"] - earlier["calledAt"] >= interval - 1e-6
    # Whoever waited did so in the trigger, with no task instance of its run running.
    assert {wait.trigger for wait in waits} <= {"DateTimeTrigger"}
    assert all(wait.running == [] for wait in waits)


def test_counter_runs_at_once_in_three_processes_never_lose_a_count(
    airflow_workers: AirflowWorkers,
    conf: dict[str, Any],
    worker_env: dict[str, str],
    store_url: str,
) -> None:
    job = (run_example, ("cross_run_counter", conf, 2))

    results = airflow_workers.run_together([job] * 3, env=worker_env)

    runs = [run for worker_runs in results for run in worker_runs]
    assert [run.state for run in runs] == ["success"] * 6
    # Each run got its own value back: no two increments saw the same count.
    assert sorted(run.xcom("report") for run in runs) == list(range(1, 7))
    assert stored_rows(store_url, "counters")["runs"]["count"] == 6


def wait_for_rows(store_url: str, table: str, *, timeout: float) -> dict[str, dict[str, Any]]:
    """Poll ``table`` until it has a row; return its rows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = stored_rows(store_url, table)
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no row appeared in {table} within {timeout:.0f}s")
