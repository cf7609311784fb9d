"""The Celery e2e's configuration and its worker checks, on their own (the run is ``make e2e-celery``).

The deployment itself needs ``redis-server`` and the Celery provider, which ``make
e2e-celery`` installs; these tests need neither.
"""

from __future__ import annotations

import importlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from e2e.celery_executor import (
    HOSTNAME_VARIABLE,
    WORKERS,
    CelerySetup,
    celery_settings,
    redis_config,
    worker_environment,
    worker_hostname,
)
from e2e.celery_hosts import describe, ran_on_every_worker, tasks_by_host
from e2e.checks import CheckFailed
from e2e.deployment import LocalExecutorSetup


def directives(config: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in config.splitlines() if line)


def test_the_broker_listens_on_loopback_only_and_writes_nothing_to_disk(tmp_path: Path) -> None:
    config = directives(redis_config(6399, tmp_path))
    assert config["bind"] == "127.0.0.1"
    assert config["port"] == "6399"
    assert config["protected-mode"] == "yes"
    assert config["dir"] == f'"{tmp_path}"'
    assert config["save"] == '""'
    assert config["appendonly"] == "no"
    assert config["daemonize"] == "no"  # the harness holds the process, in its own session


def test_the_celery_settings_use_the_harness_broker_and_the_metadata_database() -> None:
    settings = celery_settings(broker_port=6399, database_port=5499, concurrency=4)
    assert settings == {
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CELERY__BROKER_URL": "redis://127.0.0.1:6399/0",
        "AIRFLOW__CELERY__RESULT_BACKEND": "db+postgresql://postgres@127.0.0.1:5499/airflow",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "4",
    }


def test_the_workers_together_have_as_many_slots_as_the_local_run() -> None:
    setup = CelerySetup()
    assert len(WORKERS) == 2
    assert setup.concurrency * len(WORKERS) == 8  # python -m e2e's default parallelism
    assert len(set(setup.task_hosts)) == len(WORKERS)
    assert setup.worker_hostnames == WORKERS


def test_each_worker_names_itself_and_serves_logs_on_a_port_of_its_own() -> None:
    first, second = (worker_environment(name) for name in WORKERS)
    assert (first[HOSTNAME_VARIABLE], second[HOSTNAME_VARIABLE]) == WORKERS
    port = "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"
    assert first[port] != second[port]
    module, _, function = first["AIRFLOW__CORE__HOSTNAME_CALLABLE"].rpartition(".")
    assert getattr(importlib.import_module(module), function) is worker_hostname


def test_the_hostname_callable_reports_the_worker_it_runs_under(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(HOSTNAME_VARIABLE, "worker-b")
    assert worker_hostname() == "worker-b"
    monkeypatch.delenv(HOSTNAME_VARIABLE)
    assert worker_hostname()  # outside a worker: this machine's name


def test_the_local_executor_runs_its_tasks_under_the_scheduler_and_names_no_workers() -> None:
    setup = LocalExecutorSetup()
    assert setup.name == "LocalExecutor"
    assert setup.task_hosts == ("scheduler",)
    assert setup.worker_hostnames == ()
    assert setup.ready()


def ti(dag_id: str, task_id: str, hostname: str | None) -> dict[str, Any]:
    return {"dag_id": dag_id, "task_id": task_id, "hostname": hostname}


def test_task_instances_are_counted_by_the_host_that_ran_them_and_unstarted_ones_left_out() -> None:
    hosts = tasks_by_host(
        [
            ti("d", "process", "worker-a"),
            ti("d", "process", "worker-b"),
            ti("d", "process", "worker-a"),
            ti("d", "drain", "worker-b"),
            ti("d", "process", None),  # skipped: never ran
            ti("d", "process", ""),
        ]
    )
    assert hosts == {
        "worker-a": Counter({"d.process": 2}),
        "worker-b": Counter({"d.process": 1, "d.drain": 1}),
    }
    assert describe(hosts) == (
        "worker-a: 2 task instances (d.process 2); worker-b: 2 task instances (d.process 1, d.drain 1)"
    )


def test_a_run_spread_over_every_worker_passes() -> None:
    hosts = {"worker-a": Counter({"d.t": 3}), "worker-b": Counter({"d.t": 1})}
    ran_on_every_worker(hosts, WORKERS)


def test_a_worker_that_ran_nothing_fails_the_run() -> None:
    with pytest.raises(CheckFailed, match=r"\['worker-b'\] ran no task instance"):
        ran_on_every_worker({"worker-a": Counter({"d.t": 4})}, WORKERS)


def test_a_task_instance_that_ran_outside_the_workers_fails_the_run() -> None:
    hosts = {h: Counter({"d.t": 1}) for h in (*WORKERS, "scheduler-host")}
    with pytest.raises(CheckFailed, match=r"ran outside the workers.*scheduler-host"):
        ran_on_every_worker(hosts, WORKERS)


def test_describe_names_the_most_common_tasks_and_counts_the_rest() -> None:
    hosts = {"w": Counter({f"d.t{n}": 10 - n for n in range(6)})}
    assert describe(hosts, top=2) == "w: 45 task instances (d.t0 10, d.t1 9, and 4 more task(s))"
