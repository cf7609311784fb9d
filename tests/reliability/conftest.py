"""Fixtures for the reliability tests.

``shared_store``   one store per module and backend (a fresh SQLite file, or a fresh
                   PostgreSQL role and schema); each test case uses its own logical
                   tables, so hundreds of cases do not each pay for schema creation.
``unreachable_url`` a store URL that cannot be reached: proves that a spec is judged
                   before any I/O (the store connects lazily).
``offline_store``  one store per module on such a URL.
"""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from airflow_atomic_store import AtomicStore

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
        _unreachable(backend, tmp_path_factory.mktemp("offline")) as url,
        AtomicStore(url) as store,
    ):
        yield store


@pytest.fixture
def unreachable_url(backend: str, tmp_path: Path) -> Iterator[str]:
    with _unreachable(backend, tmp_path) as url:
        yield url


@contextmanager
def _unreachable(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        blocker = tmp_path / "a-file-not-a-directory"
        blocker.write_text("")
        yield f"sqlite:///{blocker / 'store.db'}"
        return
    # A bound socket that never listens: connecting to it is refused at once.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"postgresql://postgres@127.0.0.1:{sock.getsockname()[1]}/nowhere"
