"""Fixtures for the reliability tests.

``shared_store``   one store per module and backend (a fresh SQLite file, or a fresh
                   PostgreSQL role and schema); each test case uses its own logical
                   tables, so hundreds of cases do not each pay for schema creation.
``offline_store``  one store per module on an unreachable URL (tests/support/unreachable.py):
                   proves that a spec is judged before any I/O (the store connects lazily).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from airflow_atomic_store import AtomicStore
from tests.support.unreachable import unreachable_store_url

_names = itertools.count(1)


@pytest.fixture(scope="module")
def shared_url(
    backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('reliability') / 'store.db'}"
        return
    server = request.getfixturevalue("postgres_server")
    name = f"rel_{os.getpid()}_{next(_names)}"
    url = server.create_user_schema(name)
    try:
        yield url
    finally:
        server.drop_user_schema(name)


@pytest.fixture(scope="module")
def shared_store(shared_url: str) -> Iterator[AtomicStore]:
    with AtomicStore(shared_url) as store:
        yield store


@pytest.fixture(scope="module")
def offline_store(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AtomicStore]:
    with (
        unreachable_store_url(backend, tmp_path_factory.mktemp("offline")) as url,
        AtomicStore(url) as store,
    ):
        yield store
