"""The API server's app for the UI tests (tests/support/api_server.py has the clients)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.api_server import api_server_environment


@pytest.fixture(scope="module")
def api_app(airflow_db: None) -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as patch:
        api_server_environment(patch)
        from airflow.api_fastapi.app import create_app, purge_cached_app

        app = create_app()
        yield app
        purge_cached_app()
