"""PostgreSQL's logical tables by id: the store's tables catalog and a process's cache of it.

Rows are keyed by ``(table_id, key)`` (``rows_table.sql`` says why). A logical
table gets its id the first time something writes to it, and keeps it: ids are
never reused or changed, so a process looks each name up once per store and
then binds the integer. A read of a table that has no id yet needs no statement
at all: it has no rows.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from airflow_atomic_store.exceptions import StoreUnavailableError
from airflow_atomic_store.store.postgres import schema

Cursor = Callable[[], AbstractContextManager[psycopg.Cursor[Any]]]

_FIND = "SELECT id FROM {tables} WHERE name = %s"
#: Insert the name unless it is there; when another session inserts it meanwhile
#: (committed after this statement's snapshot), neither branch returns a row and the
#: next statement, on a new snapshot, finds it.
_FIND_OR_ADD = (
    "WITH found AS (SELECT id FROM {tables} WHERE name = %s), "
    "added AS (INSERT INTO {tables} (name) SELECT %s WHERE NOT EXISTS (SELECT FROM found) "
    "ON CONFLICT (name) DO NOTHING RETURNING id) "
    "SELECT id FROM found UNION ALL SELECT id FROM added"
)
#: Statements one name may take to get its id: the second always finds it (ids are
#: never deleted), unless the catalog itself was dropped meanwhile.
_ATTEMPTS = 3


class TableIds:
    """One store's ids of its logical tables, looked up (or added) once each."""

    def __init__(self, storage_table: str) -> None:
        catalog = schema.tables_catalog(storage_table)
        self._find = _FIND.format(tables=catalog).encode()
        self._find_or_add = _FIND_OR_ADD.format(tables=catalog).encode()
        self._ids: dict[str, int] = {}

    def known(self, cursor: Cursor, table: str) -> int | None:
        """The table's id, or None when nothing has written to it yet (not remembered)."""
        if table in self._ids:
            return self._ids[table]
        with cursor() as cur:
            row = cur.execute(self._find, (table,)).fetchone()
        if row is None:
            return None
        self._ids[table] = row[0]
        return int(row[0])

    def find_query(self, table: str) -> tuple[bytes, list[Any]] | None:
        """:meth:`known`'s lookup, for another connection; None once the id is remembered."""
        if table in self._ids:
            return None
        return self._find, [table]

    def ensure(self, cursor: Cursor, table: str) -> int:
        """The table's id, given to it now if it has none."""
        if table in self._ids:
            return self._ids[table]
        with cursor() as cur:
            for _ in range(_ATTEMPTS):
                row = cur.execute(self._find_or_add, (table, table)).fetchone()
                if row is not None:
                    self._ids[table] = row[0]
                    return int(row[0])
        raise StoreUnavailableError(f"could not give the logical table {table!r} an id; try again")

    def forget(self) -> None:
        """Drop what this process remembers (the store's tables were recreated)."""
        self._ids.clear()
