"""PostgreSQL's inspection snapshot (``store/snapshot.py``) in one read-only transaction.

``REPEATABLE READ READ ONLY``: every figure of one call comes from the same
snapshot, and the server itself refuses a write inside it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from airflow_atomic_store.store.compiler import WhereCompiler
from airflow_atomic_store.store.postgres import schema
from airflow_atomic_store.store.postgres.where import literal, path_sql
from airflow_atomic_store.store.snapshot import SnapshotDialect, SqlSnapshot


def _execute(
    cursor: psycopg.Cursor[Any], statement: str, params: Sequence[Any] | None
) -> list[Any]:
    # With parameters (even none) psycopg parses placeholders and undoes literal()'s %%.
    return cursor.execute(statement.encode(), None if params is None else tuple(params)).fetchall()


def _aware(moment: datetime) -> datetime:
    return moment  # timestamptz arrives as an aware datetime


def _value(value: dict[str, Any]) -> dict[str, Any]:
    return value  # jsonb arrives decoded


DIALECT = SnapshotDialect(
    placeholder="%s",
    string_type="string",
    byte_order=' COLLATE "C"',
    path_sql=path_sql,
    literal=literal,
    execute=_execute,
    parse_time=_aware,
    parse_value=_value,
    table_column="table_id",
    table_counts=(
        "SELECT t.name, count(*) FROM {table} AS r JOIN {tables} AS t ON t.id = r.table_id "
        "GROUP BY t.name"
    ),
    time_param="%s::timestamptz",
    minutes_since="floor(extract(epoch FROM {column} - {mark}) / 60)::bigint",
)


def snapshot(
    cursor: AbstractContextManager[psycopg.Cursor[Any]],
    storage_table: str,
    where: WhereCompiler,
) -> AbstractContextManager[SqlSnapshot]:
    """A snapshot on the backend's connection, inside a transaction of its own.

    Logical tables are looked up by id in the snapshot itself (``tables.py``).
    """
    catalog = schema.tables_catalog(storage_table)
    find_id = f"SELECT id FROM {catalog} WHERE name = %s".encode()

    @contextmanager
    def opened() -> Iterator[SqlSnapshot]:
        with cursor as cur, cur.connection.transaction():
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

            def table_id(table: str) -> int | None:
                row = cur.execute(find_id, (table,)).fetchone()
                return None if row is None else int(row[0])

            rows_table = sql.Identifier(storage_table).as_string(None)
            receipts = sql.Identifier(f"{storage_table}_receipts").as_string(None)
            yield SqlSnapshot(DIALECT, cur, rows_table, where, table_id, catalog, receipts)

    return opened()
