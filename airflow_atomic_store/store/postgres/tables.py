"""PostgreSQL's logical tables by id: the store's tables catalog and a process's cache of it.

Rows are keyed by ``(table_id, key)`` (``rows_table.sql`` says why). A logical
table gets its id the first time something writes to it, and keeps it: ids are
never reused or changed, so a process looks each name up once per store and
then binds the integer. A read of a table that has no id yet needs no statement
at all: it has no rows.

What a process holds can still go stale: a reset of the store's tables
(``TRUNCATE … RESTART IDENTITY``, a ``DROP``) by someone else empties the catalog,
and the next writer gives the name a new id. The sequence never deals an id out
twice, so a stale id can only match nothing; the backend notices it where a call
found nothing (:meth:`TableIds.current`, one lookup on that path only) or where a
write's catalog check inserted nothing (``statements.py``), reloads, and calls again.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import psycopg

from airflow_atomic_store.exceptions import StoreUnavailableError
from airflow_atomic_store.store.postgres import schema

Cursor = Callable[[], AbstractContextManager[psycopg.Cursor[Any]]]
T = TypeVar("T")

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

    def held(self, table: str) -> int | None:
        """The id this process holds for the table, without a statement (None: none held)."""
        return self._ids.get(table)

    def current(self, cursor: Cursor, tables: tuple[str, ...]) -> bool:
        """Whether every id held for ``tables`` is still its table's; if one is not, the
        catalog was reset, and every held id is forgotten (they are all suspect).

        One primary-key lookup per held name: callers ask only when a call found
        nothing, so the common path pays nothing for it.
        """
        for table in tables:
            held = self._ids.get(table)
            if held is None:
                continue
            with cursor() as cur:
                row = cur.execute(self._find, (table,)).fetchone()
            if row is None or row[0] != held:
                self.forget()
                return False
        return True

    def again_if_stale(
        self,
        cursor: Cursor,
        call: Callable[[], T],
        missed: Callable[[T], bool],
        tables: tuple[str, ...],
    ) -> T:
        """``call()``'s result; when it ``missed`` (found nothing) and an id it used for
        ``tables`` is stale, the ids are reloaded and the call made again, once.

        Once is enough: a second miss is an answer, with ids read after the reset.
        """
        result = call()
        if missed(result) and not self.current(cursor, tables):
            return call()
        return result

    def forget(self) -> None:
        """Drop what this process remembers (the store's tables were recreated)."""
        self._ids.clear()


def reset_meanwhile(table: str) -> StoreUnavailableError:
    """A write whose held id and then its reloaded one both inserted nothing: the store
    was reset twice around it. Nothing was written, so it is safe to make again."""
    return StoreUnavailableError(
        f"the store's tables were reset while writing to {table!r}; nothing was written; try again"
    )
