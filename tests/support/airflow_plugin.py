"""Real DAG runs: one throwaway ``AIRFLOW_HOME`` per test session (a pytest plugin).

Airflow reads its configuration when it is first imported, so the environment
is set here, at import time, before any test module imports Airflow; importing
Airflow earlier would point it at the wrong home, so that is refused loudly.
``tests/conftest.py`` loads this plugin, so every tier that runs DAGs
(``tests/airflow``, ``tests/example_dags``) shares the home and its metadata DB.

``airflow_db``   (session) initialises the metadata DB once (``resetdb``).
``store_conn``   points a fresh Airflow connection at the test's fresh store
                 (``store_url`` from tests/conftest.py: SQLite file or PostgreSQL
                 database) through an ``AIRFLOW_CONN_<ID>`` environment variable.
``run_dag``      serialises a DAG defined in a test, runs it with ``dag.test()``
                 and returns a :class:`DagRunResult` (states, try numbers, XComs).
``dag_id``       a DAG id unique to the test (and backend).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devkit.airflow_home import dag_test_environment
from devkit.dagrun import DagRunResult, run_dag_test  # imports airflow lazily

_HOME = Path(tempfile.mkdtemp(prefix="atomic-airflow-home-"))
if "airflow" in sys.modules:  # pragma: no cover - a guard, not a code path
    raise RuntimeError(
        "airflow was imported before tests/support/airflow_plugin.py could point AIRFLOW_HOME "
        "at a throwaway directory; do not import airflow before tests/conftest.py is loaded"
    )
os.environ.update(dag_test_environment(_HOME, AIRFLOW__LOGGING__LOGGING_LEVEL="INFO"))
(_HOME / "dags").mkdir()
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)


# Warnings Airflow itself triggers and we cannot avoid; ignored only where DAGs run.
_DAG_TEST_DIRS = ("airflow", "example_dags")
_AIRFLOW_WARNINGS = (
    # airflow.api_fastapi (the in-process execution API that dag.test() starts) imports
    # starlette's test client, which warns that httpx is deprecated in favour of httpx2.
    "ignore:Using `httpx` with `starlette.testclient` is deprecated:UserWarning",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).parents[1]
    dirs = [tests / name for name in _DAG_TEST_DIRS]
    for item in items:
        if any(directory in item.path.parents for directory in dirs):
            for spec in _AIRFLOW_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(spec))


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[None]:
    from airflow.utils import db

    db.resetdb()
    yield


_conn_numbers = iter(range(1, 1_000_000))


@pytest.fixture
def store_conn(store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A connection id for this test's fresh store (a new id each time: no cache can leak)."""
    conn_id = f"atomic_store_test_{next(_conn_numbers)}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", store_url)
    return conn_id


@pytest.fixture
def dag_id(request: pytest.FixtureRequest) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name).strip("_")


@pytest.fixture
def run_dag(airflow_db: None) -> Callable[..., DagRunResult]:
    def run(dag: Any, *, conf: dict[str, Any] | None = None) -> DagRunResult:
        return run_dag_test(dag, conf=conf)

    return run
