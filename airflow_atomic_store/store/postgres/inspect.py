"""PostgreSQL's inspection queries (``store/snapshot.py``) in one read-only transaction.

``REPEATABLE READ READ ONLY``: every figure of one call comes from the same
snapshot, and the server itself refuses a write inside it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

import psycopg

from airflow_atomic_store.spec import Condition
from airflow_atomic_store.store.compiler import WhereCompiler
from airflow_atomic_store.store.postgres.where import literal, path_sql
from airflow_atomic_store.store.snapshot import Claim, StoredRow


def _string_at(field: str) -> str:
    """The top-level ``field`` when it holds a JSON string, else NULL (byte order)."""
    path = path_sql((field,))
    return f"(CASE WHEN {path.type} = 'string' THEN {path.text} END) COLLATE \"C\""


_STATUS = _string_at("status")
_CLAIMED_AT = _string_at("claimedAt")
_CLAIMED_BY = _string_at("claimedBy")

_STATEMENTS = {
    "tables": "SELECT table_name, count(*) FROM {table} GROUP BY table_name",
    "statuses": (
        f"SELECT {_STATUS}, count(*) FROM {{table}} AS r WHERE r.table_name = %s GROUP BY 1"
    ),
    "count": "SELECT count(*) FROM {table} AS r WHERE {table_filter} AND {where}",
    "oldest": "SELECT min(r.created_at) FROM {table} AS r WHERE {table_filter} AND {where}",
    "claims": (
        f"SELECT r.key, {_CLAIMED_AT}, {_CLAIMED_BY} FROM {{table}} AS r "
        "WHERE {table_filter} AND {where} "
        f'ORDER BY {_CLAIMED_AT} IS NULL, {_CLAIMED_AT}, r.key COLLATE "C" LIMIT %s'
    ),
    "rows": (
        "SELECT r.key, r.value, r.created_at, r.record_timestamp FROM {table} AS r "
        "WHERE {table_filter} AND {where} ORDER BY r.created_at, r.key LIMIT %s OFFSET %s"
    ),
}


class PostgresSnapshot:
    def __init__(self, cursor: psycopg.Cursor[Any], storage_table: str, where: WhereCompiler):
        self._cursor = cursor
        self._table = storage_table  # already quoted as an identifier by the backend
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
            table_filter, head = "r.table_name = %s", [table]
        statement = _STATEMENTS[kind].format(
            table=self._table, table_filter=table_filter, where=where_sql
        )
        return self._cursor.execute(statement.encode(), (*head, *params, *tail)).fetchall()

    def table_counts(self) -> list[tuple[str, int]]:
        statement = _STATEMENTS["tables"].format(table=self._table)
        return [(name, count) for name, count in self._cursor.execute(statement.encode())]

    def status_counts(self, table: str) -> list[tuple[str | None, int]]:
        statement = _STATEMENTS["statuses"].format(table=self._table).encode()
        return [(status, count) for status, count in self._cursor.execute(statement, (table,))]

    def count(
        self, table: str, where: Sequence[Condition], match: str, inline: Collection[int] = ()
    ) -> int:
        return int(self._run("count", table, where, match, inline)[0][0])

    def oldest_created(
        self, table: str, where: Sequence[Condition], match: str, inline: Collection[int] = ()
    ) -> datetime | None:
        oldest: datetime | None = self._run("oldest", table, where, match, inline)[0][0]
        return oldest

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
        return [StoredRow(*row) for row in rows]


def snapshot(
    cursor: AbstractContextManager[psycopg.Cursor[Any]],
    storage_table: str,
    where: WhereCompiler,
) -> AbstractContextManager[PostgresSnapshot]:
    """A snapshot on the backend's connection, inside a transaction of its own."""

    @contextmanager
    def opened() -> Iterator[PostgresSnapshot]:
        with cursor as cur, cur.connection.transaction():
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield PostgresSnapshot(cur, storage_table, where)

    return opened()
