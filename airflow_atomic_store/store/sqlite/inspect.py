"""SQLite's inspection queries (``store/snapshot.py``), read in one ``BEGIN`` … ``COMMIT``.

The snapshot also turns on ``PRAGMA query_only`` for its length, so SQLite
itself refuses any write a change here might slip in.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

from airflow_atomic_store.spec import Condition
from airflow_atomic_store.store.compiler import WhereCompiler
from airflow_atomic_store.store.snapshot import Claim, StoredRow
from airflow_atomic_store.store.sqlite.where import literal, path_sql
from airflow_atomic_store.timestamps import parse_timestamp


def _string_at(field: str) -> str:
    """The top-level ``field`` when it holds a JSON string, else NULL."""
    path = path_sql((field,))
    return f"(CASE WHEN {path.type} = 'text' THEN {path.text} END)"


_STATUS = _string_at("status")
_CLAIMED_AT = _string_at("claimedAt")
_CLAIMED_BY = _string_at("claimedBy")

_STATEMENTS = {
    "tables": "SELECT table_name, count(*) FROM {table} GROUP BY table_name",
    "statuses": (
        f"SELECT {_STATUS}, count(*) FROM {{table}} AS r WHERE r.table_name = ? GROUP BY 1"
    ),
    "count": "SELECT count(*) FROM {table} AS r WHERE {table_filter} AND {where}",
    "oldest": "SELECT min(r.created_at) FROM {table} AS r WHERE {table_filter} AND {where}",
    "claims": (
        f"SELECT r.key, {_CLAIMED_AT}, {_CLAIMED_BY} FROM {{table}} AS r "
        "WHERE {table_filter} AND {where} "
        f"ORDER BY {_CLAIMED_AT} IS NULL, {_CLAIMED_AT}, r.key LIMIT ?"
    ),
    "rows": (
        "SELECT r.key, r.value, r.created_at, r.record_timestamp FROM {table} AS r "
        "WHERE {table_filter} AND {where} ORDER BY r.created_at, r.key LIMIT ? OFFSET ?"
    ),
}


class SqliteSnapshot:
    def __init__(
        self, connection: sqlite3.Connection, storage_table: str, where: WhereCompiler
    ) -> None:
        self._connection = connection
        self._table = storage_table
        self._where = where

    def _run(
        self,
        kind: str,
        table: str,
        where: Sequence[Condition] = (),
        match: str = "all",
        inline: Collection[int] = (),
        tail: Sequence[Any] = (),
    ) -> list[Any]:
        where_sql, params = self._where.compile(where, match, inline)
        if inline:  # a literal table name too, so a claimable set's predicate is provable
            table_filter, head = f"r.table_name = {literal(table)}", []
        else:
            table_filter, head = "r.table_name = ?", [table]
        statement = _STATEMENTS[kind].format(
            table=self._table, table_filter=table_filter, where=where_sql
        )
        return self._connection.execute(statement, (*head, *params, *tail)).fetchall()

    def table_counts(self) -> list[tuple[str, int]]:
        statement = _STATEMENTS["tables"].format(table=self._table)
        return [(name, count) for name, count in self._connection.execute(statement)]

    def status_counts(self, table: str) -> list[tuple[str | None, int]]:
        statement = _STATEMENTS["statuses"].format(table=self._table)
        return [(status, count) for status, count in self._connection.execute(statement, (table,))]

    def count(
        self, table: str, where: Sequence[Condition], match: str, inline: Collection[int] = ()
    ) -> int:
        return int(self._run("count", table, where, match, inline)[0][0])

    def oldest_created(
        self, table: str, where: Sequence[Condition], match: str, inline: Collection[int] = ()
    ) -> datetime | None:
        (oldest,) = self._run("oldest", table, where, match, inline)[0]
        return None if oldest is None else parse_timestamp(oldest)

    def claims(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        limit: int,
        inline: Collection[int] = (),
    ) -> list[Claim]:
        rows = self._run("claims", table, where, match, inline, (limit,))
        return [Claim(key, at, by) for key, at, by in rows]

    def rows(
        self, table: str, where: Sequence[Condition], match: str, limit: int, offset: int
    ) -> list[StoredRow]:
        rows = self._run("rows", table, where, match, tail=(limit, offset))
        return [
            StoredRow(key, json.loads(value), parse_timestamp(created), parse_timestamp(updated))
            for key, value, created, updated in rows
        ]


def snapshot(
    transaction: AbstractContextManager[sqlite3.Connection],
    storage_table: str,
    where: WhereCompiler,
) -> AbstractContextManager[SqliteSnapshot]:
    """A snapshot inside the backend's read transaction (``BEGIN``, not ``BEGIN IMMEDIATE``)."""

    @contextmanager
    def opened() -> Iterator[SqliteSnapshot]:
        with transaction as connection:
            connection.execute("PRAGMA query_only = ON")
            try:
                yield SqliteSnapshot(connection, storage_table, where)
            finally:
                connection.execute("PRAGMA query_only = OFF")

    return opened()
