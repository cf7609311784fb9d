"""The store connections the API server can read, described without their secrets.

Connections come from ``AIRFLOW_CONN_*`` environment variables and the metadata
database, the two places Airflow can list; a connection that lives only in a
secrets backend cannot be listed, but the page opens it when its id is typed
in. A description never holds a login, a password or extras: only the id, the
type and where the store is (host, port and database, or the SQLite file).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from airflow_atomic_store.hooks.atomic_store import SUPPORTED_CONN_TYPES, AtomicStoreHook
from airflow_atomic_store.store import AtomicStore

_ENV_PREFIX = "AIRFLOW_CONN_"
_TYPES = {*SUPPORTED_CONN_TYPES, "postgresql"}


@dataclass(frozen=True)
class StoreConnection:
    """A store connection as the page lists it: never a credential."""

    conn_id: str
    conn_type: str
    location: str
    source: str  # "environment" or "metadata database"


def store_connections() -> list[StoreConnection]:
    """Every listable connection of a type the store reads, sorted by id (env vars first win)."""
    from airflow.models.connection import Connection

    found: dict[str, StoreConnection] = {}
    for name in sorted(os.environ):
        if not name.startswith(_ENV_PREFIX) or name == _ENV_PREFIX:
            continue
        conn_id = name[len(_ENV_PREFIX) :].lower()
        try:
            conn = Connection.get_connection_from_secrets(conn_id)
        except Exception:  # an unparsable variable is Airflow's to report, not the page's
            continue
        _add(found, conn, "environment")
    for conn in _metadata_connections():
        _add(found, conn, "metadata database")
    return sorted(found.values(), key=lambda c: c.conn_id)


def _metadata_connections() -> list[Any]:
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(Connection).where(Connection.conn_type.in_(sorted(_TYPES))))
        return [
            _Described(row.conn_id, row.conn_type, row.host, row.port, row.schema) for row in rows
        ]


@dataclass(frozen=True)
class _Described:
    """The non-secret fields of a metadata-database connection, read inside its session."""

    conn_id: str
    conn_type: str | None
    host: str | None
    port: int | None
    schema: str | None


def _add(found: dict[str, StoreConnection], conn: Any, source: str) -> None:
    conn_type = (conn.conn_type or "").lower()
    if conn_type not in _TYPES or conn.conn_id in found:
        return
    found[conn.conn_id] = StoreConnection(conn.conn_id, conn_type, _location(conn), source)


def _location(conn: Any) -> str:
    if (conn.conn_type or "").lower() == "sqlite":
        return str(conn.host or conn.schema or "")
    host = str(conn.host or "")
    port = f":{conn.port}" if conn.port else ""
    database = f"/{conn.schema}" if conn.schema else ""
    return f"{host}{port}{database}"


@contextmanager
def open_store(conn_id: str) -> Iterator[AtomicStore]:
    """The store behind ``conn_id``, opened read-only (a page never creates a store: where
    none is, the first read raises ``ConnectionConfigError``), and closed after use."""
    store = AtomicStoreHook(conn_id).open_read_only()
    try:
        yield store
    finally:
        store.close()
