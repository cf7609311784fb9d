"""A pytest plugin for `make compat`, Airflow 3.0 only: let ``dag.test()`` serialise the DAG.

From 3.1, ``dag.test()`` runs only DAGs already serialised in the metadata DB, so
``tests/airflow/dagrun.py`` writes each test's DAG there first, with 3.1+ APIs
(``LazyDeserializedDAG.from_dag``, ``parse_duration``). 3.0's ``dag.test()``
serialises the DAG itself, so on 3.0 that step is skipped; the runs and the
assertions on them are the same.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    from tests.airflow import dagrun  # loaded by tests/conftest.py before the session starts

    def serialise(dag: Any) -> None:
        return None

    dagrun.serialise = serialise
