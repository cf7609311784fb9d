"""A PostgreSQL store built from a connection factory works whatever the connection's settings."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import dict_row

from airflow_atomic_store import AtomicStore


@pytest.mark.postgres
def test_factory_connections_with_dict_rows_still_work(postgres_server):
    url = postgres_server.create_database("factory_dict_rows")

    def connect() -> psycopg.Connection:
        return psycopg.connect(url, row_factory=dict_row)

    with AtomicStore.from_connection_factory("postgresql", connect) as store:
        assert store.atomic_upsert("t", "k", insert_value={"n": 1})["inserted"] is True
        assert store.get("t", "k") == {"n": 1}
        claimed = store.atomic_claim("t", limit=1)
        assert [row["key"] for row in claimed["claimed"]] == ["k"]
