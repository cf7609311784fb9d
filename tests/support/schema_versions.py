"""Stores of older schema versions for the migration tests, and a synthetic migration.

``old_store(url)`` builds a store as a3d0ad4 made it, from the captured DDL and data in
``tests/fixtures/a3d0ad4`` (not from that commit's code). ``synthetic_migration(backend)``
is a version 2 that the tests register in place of the package's migrations: it adds a
column to the receipts and counts its own runs in a table of its own (created without
``IF NOT EXISTS``, so a second run would fail).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from airflow_atomic_store.store.migrations import Migration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "a3d0ad4"
STORAGE = "atomic_store_rows"

_SYNTHETIC = {
    "postgres": (
        "ALTER TABLE IF EXISTS {table_receipts} ADD COLUMN note text;\n"
        "CREATE TABLE {table_synthetic} (ran_at timestamptz DEFAULT clock_timestamp());\n"
        "INSERT INTO {table_synthetic} DEFAULT VALUES;\n"
    ),
    "sqlite": (
        "-- name: note\nALTER TABLE {table_receipts} ADD COLUMN note TEXT\n"
        "-- name: runs\nCREATE TABLE {table_synthetic} (ran INTEGER)\n"
        "-- name: ran\nINSERT INTO {table_synthetic} VALUES (1)\n"
    ),
}
#: Where each backend keeps its migrations (the attribute a test replaces).
MIGRATIONS_AT = {
    "postgres": "airflow_atomic_store.store.postgres.schema",
    "sqlite": "airflow_atomic_store.store.sqlite.connection",
}


def backend_of(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "postgres"


def synthetic_migration(backend: str) -> Migration:
    return Migration(2, "synthetic", _SYNTHETIC[backend])


@contextmanager
def registered(backend: str, *migrations: Migration) -> Iterator[None]:
    """The backend's migrations replaced by ``migrations`` (this process only)."""
    import importlib

    module = importlib.import_module(MIGRATIONS_AT[backend])
    saved = module.MIGRATIONS
    module.MIGRATIONS = migrations
    try:
        yield
    finally:
        module.MIGRATIONS = saved


def old_store(url: str) -> None:
    """Build a store with a3d0ad4's DDL and fill it with what a3d0ad4 wrote."""
    backend = backend_of(url)
    schema = (FIXTURES / f"{backend}_schema.sql").read_text(encoding="utf-8")
    data = (FIXTURES / f"{backend}_data.sql").read_text(encoding="utf-8")
    if backend == "sqlite":
        with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
            connection.executescript(schema + data)
        connection.close()
        return
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(schema.encode())
        connection.execute(data.encode())


def expected(url: str) -> dict[str, Any]:
    """What a3d0ad4's store held: ``rows`` by table and key, ``keyed`` calls, ``sets``."""
    captured = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))
    return dict(captured[backend_of(url)])


def query(url: str, statement: str) -> list[tuple[Any, ...]]:
    """Rows of one statement on the store's own database, outside the store."""
    if backend_of(url) == "sqlite":
        connection = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            return connection.execute(statement).fetchall()
        finally:
            connection.close()
    with psycopg.connect(url, autocommit=True) as connection:
        return connection.execute(statement.encode()).fetchall()


def versions(url: str) -> list[tuple[int, str]]:
    return [
        (int(v), str(n))
        for v, n in query(url, f"SELECT version, name FROM {STORAGE}_migrations ORDER BY version")
    ]


def open_old_store_with_synthetic_migration(url: str, barrier: Any, results: Any) -> None:
    """A worker process: with the synthetic version 2 registered, open the store at once."""
    from airflow_atomic_store import AtomicStore

    backend = backend_of(url)
    with registered(backend, synthetic_migration(backend)):
        barrier.wait(timeout=60)
        try:
            with AtomicStore(url) as store:
                results.put(("ok", store.get("settings", "limits")))
        except Exception as exc:  # reported to the test, which names it
            results.put(("error", repr(exc)))
