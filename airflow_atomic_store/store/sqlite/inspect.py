"""SQLite's inspection snapshot (``store/snapshot.py``), read in one ``BEGIN`` … ``COMMIT``.

The snapshot also turns on ``PRAGMA query_only`` for its length, so SQLite
itself refuses any write a change here might slip in.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from airflow_atomic_store.store.compiler import WhereCompiler
from airflow_atomic_store.store.snapshot import SnapshotDialect, SqlSnapshot
from airflow_atomic_store.store.sqlite.where import literal, path_sql
from airflow_atomic_store.timestamps import parse_timestamp


def _execute(
    connection: sqlite3.Connection, statement: str, params: Sequence[Any] | None
) -> list[Any]:
    return connection.execute(statement, tuple(params or ())).fetchall()


DIALECT = SnapshotDialect(
    placeholder="?",
    string_type="text",
    byte_order="",  # SQLite's default collation already compares bytes
    path_sql=path_sql,
    literal=literal,
    execute=_execute,
    parse_time=parse_timestamp,
    parse_value=json.loads,
    table_column="table_name",
    table_counts="SELECT table_name, count(*) FROM {table} GROUP BY table_name",
    time_param="?",  # timestamps are canonical text: they compare as text
    minutes_since="CAST((julianday({column}) - julianday({mark})) * 1440 AS INTEGER)",
)


def _same_name(table: str) -> str:
    return table  # rows hold their logical table's name


def snapshot(
    transaction: AbstractContextManager[sqlite3.Connection],
    storage_table: str,
    where: WhereCompiler,
) -> AbstractContextManager[SqlSnapshot]:
    """A snapshot inside the backend's read transaction (``BEGIN``, not ``BEGIN IMMEDIATE``)."""

    @contextmanager
    def opened() -> Iterator[SqlSnapshot]:
        with transaction as connection:
            connection.execute("PRAGMA query_only = ON")
            try:
                yield SqlSnapshot(
                    DIALECT,
                    connection,
                    storage_table,
                    where,
                    _same_name,
                    receipts_table=f"{storage_table}_receipts",  # as queries.sql names it
                )
            finally:
                connection.execute("PRAGMA query_only = OFF")

    return opened()
