"""Fixtures for running the example DAGs end to end (both backends).

``airflow_workers``  (session) warm Airflow worker processes, forked from one warmed-up
                     zygote (devkit/airflow_workers.py), for the tests that
                     need DAG runs in several processes at once. When any collected
                     test needs it, the zygote starts with the first test of this
                     directory, so its warm-up overlaps the single-process tests
                     (test_when_runs_overlap.py sorts last for that reason).
``conf``             the run conf every example DAG needs here: this test's
                     connection (``store_conn``, a fresh store) and nothing else.
``worker_env``       the environment a worker needs to reach that connection.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devkit.airflow_workers import AirflowWorkers

_NEEDS_WORKERS = pytest.StashKey[bool]()
WORKERS = 6  # the semaphore test runs six DAG runs at once


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[_NEEDS_WORKERS] = any(
        "airflow_workers" in getattr(item, "fixturenames", ()) for item in items
    )


@pytest.fixture(scope="session")
def airflow_workers(
    airflow_db: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AirflowWorkers]:
    template = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    pool = AirflowWorkers(tmp_path_factory.mktemp("airflow-workers"), template, size=WORKERS)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="session", autouse=True)
def _start_airflow_workers_early(request: pytest.FixtureRequest) -> None:
    if request.config.stash.get(_NEEDS_WORKERS, False):
        request.getfixturevalue("airflow_workers")


@pytest.fixture
def conf(store_conn: str) -> dict[str, Any]:
    return {"conn_id": store_conn}


@pytest.fixture
def worker_env(store_conn: str, store_url: str) -> dict[str, str]:
    return {f"AIRFLOW_CONN_{store_conn.upper()}": store_url}
