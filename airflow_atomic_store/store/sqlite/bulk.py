"""SQLite's many-rows verbs: one ``BEGIN IMMEDIATE`` transaction per call.

SQLite has one writer at a time, so a call holding the write lock sees and writes
its rows with no other writer in between: ``upsert_many`` reads which keys exist,
inserts the others with one ``executemany`` and gives the existing rows with
mutations the reference ``apply``; ``update_many`` selects the rows whose guard
holds and writes them (one ``UPDATE … RETURNING`` when the mutations are top-level
``set``s, as the one-row update's fast path). Any error rolls the whole
transaction back: nothing is half-applied. Receipts are read and written inside
the same transaction, as the one-row verbs do (``receipts.py``).

Each inserted row's ``created_at`` is the call's start plus its item's position in
microseconds (``timestamps.series``), so one call's items keep their order, as on
PostgreSQL. The statements without compiled SQL in them take named parameters; the
guarded ones take the compiled ``where``'s positional ones, in text order.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec import apply
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store.requests import (
    UpdatedMany,
    UpdateManyRequest,
    UpsertedMany,
    UpsertManyRequest,
)
from airflow_atomic_store.store.sqlite import receipts
from airflow_atomic_store.store.sqlite.mutations import json_set_params, json_set_sql, plain_fields
from airflow_atomic_store.store.sqlite.statements import StatementCompiler

#: The call's keys are bound as one JSON array; seeds need only which rows exist.
_EXISTING = (
    "SELECT key, {value} FROM {table} "
    "WHERE table_name = :table AND key IN (SELECT value FROM json_each(:keys))"
)
_INSERT = (
    "INSERT INTO {table} (table_name, key, value, created_at, record_timestamp) "
    "VALUES (:table, :key, :value, :created_at, :created_at)"
)
_WRITE = (
    "UPDATE {table} SET value = :value, record_timestamp = :now "
    "WHERE table_name = :table AND key = :key"
)
_DELETE = "DELETE FROM {table} WHERE table_name = :table AND key = :key"
#: Parameters: the table, the keys (a JSON array), the where's.
_GUARDED = (
    "SELECT r.key, r.value FROM {table} AS r "
    "WHERE r.table_name = ? AND r.key IN (SELECT value FROM json_each(?)) AND {where}"
)
#: Parameters: the json_set's, the timestamp, then ``_GUARDED``'s.
_GUARDED_SET = (
    "UPDATE {table} AS r SET value = {mutation}, record_timestamp = ? "
    "WHERE r.table_name = ? AND r.key IN (SELECT value FROM json_each(?)) AND {where} "
    "RETURNING key"
)


class SqliteBulk:
    """One store's ``upsert_many`` and ``update_many``, on its backend's connection."""

    def __init__(self, table: str, transaction: Any, statements: StatementCompiler) -> None:
        self._table, self._transaction, self._sql = table, transaction, statements
        self._existing = {
            mutating: _EXISTING.format(table=table, value="value" if mutating else "NULL")
            for mutating in (False, True)
        }
        self._insert = _INSERT.format(table=table)
        self._write = _WRITE.format(table=table)
        self._delete = _DELETE.format(table=table)

    def upsert_many(self, request: UpsertManyRequest) -> UpsertedMany:
        table, receipt, items = request.table, request.receipt, request.items
        with self._transaction() as connection:
            recorded = receipts.recorded(connection, self._sql.statement, receipt)
            if recorded is not receipts.NOTHING:
                return UpsertedMany(frozenset(recorded), replayed=True)
            keys = json.dumps([item.key for item in items])
            mutating = any(item.mutations for item in items)
            existing = dict(
                connection.execute(
                    self._existing[mutating], {"table": table, "keys": keys}
                ).fetchall()
            )
            stamps = timestamps.series(len(items))
            connection.executemany(
                self._insert,
                [
                    {
                        "table": table,
                        "key": item.key,
                        "value": dumps(item.insert_value),
                        "created_at": stamp,
                    }
                    for item, stamp in zip(items, stamps, strict=True)
                    if item.key not in existing
                ],
            )
            now = timestamps.now()
            connection.executemany(
                self._write,
                [
                    {
                        "table": table,
                        "key": item.key,
                        "now": now,
                        "value": dumps(apply(item.mutations, json.loads(existing[item.key]))),
                    }
                    for item in items
                    if item.mutations and item.key in existing
                ],
            )
            inserted = [item.key for item in items if item.key not in existing]
            receipts.record(connection, self._sql.statement, receipt, inserted)
        return UpsertedMany(frozenset(inserted))

    def update_many(self, request: UpdateManyRequest) -> UpdatedMany:
        where_sql, where_params = self._sql.where.compile(request.where, request.match)
        guarded = (request.table, json.dumps(list(request.keys)), *where_params)
        fields = plain_fields(request.mutations)
        with self._transaction() as connection:
            recorded = receipts.recorded(connection, self._sql.statement, request.receipt)
            if recorded is not receipts.NOTHING:
                return UpdatedMany(frozenset(recorded), replayed=True)
            if fields is not None and request.archive_table is None:
                # One UPDATE … RETURNING: no read, no Python apply (``mutations.py``).
                statement = _GUARDED_SET.format(
                    table=self._table, mutation=json_set_sql(fields), where=where_sql
                )
                params = (*json_set_params(request.mutations), timestamps.now(), *guarded)
                updated = [row[0] for row in connection.execute(statement, params)]
            else:
                updated = self._apply(connection, request, where_sql, guarded)
            receipts.record(connection, self._sql.statement, request.receipt, updated)
        return UpdatedMany(frozenset(updated))

    def _apply(
        self,
        connection: sqlite3.Connection,
        request: UpdateManyRequest,
        where_sql: str,
        guarded: tuple[Any, ...],
    ) -> list[str]:
        """The guarded rows' new values through ``apply``, written back or archived."""
        statement = _GUARDED.format(table=self._table, where=where_sql)
        rows = connection.execute(statement, guarded).fetchall()
        changed = [(key, dumps(apply(request.mutations, json.loads(value)))) for key, value in rows]
        now = timestamps.now()
        if request.archive_table is None:
            connection.executemany(
                self._write,
                [{"table": request.table, "key": k, "value": v, "now": now} for k, v in changed],
            )
        else:
            connection.executemany(
                self._delete, [{"table": request.table, "key": key} for key, _ in changed]
            )
            connection.executemany(
                self._sql.statement("put"),
                [(request.archive_table, key, value, now, now) for key, value in changed],
            )
        return [key for key, _ in changed]
