"""Hypothesis profiles: a short deterministic one for CI, a long one on demand.

``ATOMIC_STORE_LONG=1`` selects the long fuzz profile (thousands of
examples); the default keeps the whole suite within a few minutes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    max_examples=3000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("long" if os.environ.get("ATOMIC_STORE_LONG") else "ci")


@pytest.fixture(scope="module")
def module_store(backend: str, request: pytest.FixtureRequest, tmp_path_factory) -> Iterator:
    """One store per module and backend; each example uses its own logical table."""
    from airflow_atomic_store import AtomicStore

    if backend == "sqlite":
        url = f"sqlite:///{Path(tmp_path_factory.mktemp('prop')) / 'store.db'}"
    else:
        server = request.getfixturevalue("postgres_server")
        url = server.create_database(f"prop_{request.module.__name__.rsplit('.', 1)[-1]}")
    with AtomicStore(url) as store:
        yield store
