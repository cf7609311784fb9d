"""A pytest plugin for `make compat`, Airflow 3.2 only: wait for the in-process API to start.

``dag.test()`` talks to an in-process execution API. In 3.2.2 that API's
``transport`` starts the app's lifespan on another thread and returns without
waiting, so on a busy machine the first request can arrive before the lifespan
has stored its service registry and the task fails with ``'State' object has no
attribute 'svcs_registry'``. Airflow 3.3 waits for the start-up; this does the
same for 3.2, in the tests only. Deployments are not affected: a real API server
finishes its lifespan before it serves.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # After tests/conftest.py has pointed AIRFLOW_HOME at its throwaway home; an import
    # warning here would be Airflow's own (the tests ignore those where DAGs run).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from airflow.sdk.execution_time import supervisor

    unready = supervisor.in_process_api_server

    def in_process_api_server() -> Any:
        api = unready()
        api.transport  # starts the lifespan (cached: later uses get this transport)  # noqa: B018
        deadline = time.monotonic() + 60
        while getattr(api.app.state, "svcs_registry", None) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the in-process execution API did not start in 60 s")
            time.sleep(0.005)
        return api

    supervisor.in_process_api_server = in_process_api_server
