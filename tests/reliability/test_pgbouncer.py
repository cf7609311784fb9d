"""The store behind PgBouncer in transaction pooling mode (docs/deploying.md).

A pool of one server connection: every client's statement runs on the same server
session, one transaction after another, so whatever one client leaves set on the
session, every other client gets. PgBouncer 1.18 (Debian's here) cannot carry
protocol-level prepared statements, so the stores turn preparing off, as the docs say.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.inspection import StoreInspector
from devkit.pgbouncer import PgBouncer
from devkit.postgres_server import PostgresServer

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.parametrize("backend", ["postgres"], indirect=True),
]

_roles = itertools.count(1)


@pytest.fixture
def pooled_url(backend: str, postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh role's store through PgBouncer (transaction pooling, one server connection)."""
    role = f"bouncer_{os.getpid()}_{next(_roles)}"
    postgres_server.create_user_schema(role)
    try:
        with PgBouncer(postgres_server, pool_size=1, user=role) as bouncer:
            yield bouncer.url_for(postgres_server.dbname)
    finally:
        postgres_server.drop_user_schema(role)


def _pooled_store(url: str, **options: Any) -> AtomicStore:
    return AtomicStore.from_connection_factory(
        "postgresql", lambda: psycopg.connect(url, prepare_threshold=None), **options
    )


def _session_setting(url: str, name: str) -> str:
    """What another client of the pool finds ``name`` set to."""
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as other:
        row = other.execute("SELECT current_setting(%s)", (name,)).fetchone()
    assert row is not None
    return str(row[0])


def test_a_read_only_store_behind_transaction_pooling_leaves_other_clients_able_to_write(
    pooled_url: str,
) -> None:
    with _pooled_store(pooled_url) as writer, _pooled_store(pooled_url, read_only=True) as reader:
        writer.put("jobs", "a", {"status": "pending"})
        assert reader.get("jobs", "a") == {"status": "pending"}
        assert [row.key for row in StoreInspector(reader).rows("jobs").rows] == ["a"]
        writer.put("jobs", "b", {"status": "pending"})  # was: "read-only transaction"
        assert writer.atomic_claim("jobs", limit=2)["count"] == 2
        with pytest.raises(Exception, match="read-only"):
            reader.put("jobs", "c", {})  # the reader itself still writes nothing
        assert _session_setting(pooled_url, "default_transaction_read_only") == "off"


def test_a_read_only_stores_timeouts_behind_transaction_pooling_stay_its_own(
    pooled_url: str,
) -> None:
    with _pooled_store(pooled_url) as writer:
        writer.put("jobs", "a", {"status": "pending"})
    before = _session_setting(pooled_url, "statement_timeout")
    with _pooled_store(pooled_url, read_only=True, statement_timeout=7, lock_timeout=3) as reader:
        assert reader.get("jobs", "a") == {"status": "pending"}
        with reader.snapshot():
            pass
        assert _session_setting(pooled_url, "statement_timeout") == before
        assert _session_setting(pooled_url, "lock_timeout") == "0"
