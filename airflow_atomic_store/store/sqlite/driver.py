"""The SQLite driver: each verb is one ``BEGIN IMMEDIATE`` transaction, one typed result.

``BEGIN IMMEDIATE`` takes SQLite's single write lock before reading, so the
read, the guard and the write cannot interleave with another writer in any
process; concurrent writers wait on the busy timeout instead of failing with
"database is locked". Inside that lock the guard and claim filter run as
compiled SQL and mutations run through the reference ``apply``, so SQLite's
mutation semantics are the oracle's by construction; the exception is a list
of top-level ``set``s, which ``json_set`` computes exactly, so that claim or
update is one ``UPDATE … RETURNING`` (``statements.py``).

Receipts are read and written inside the verb's own write transaction: a
concurrent call with the same key waits for the lock and then finds this call's
receipt. Claimable sets are partial indexes on ``(table_name, order column,
key)`` that a claim names (``INDEXED BY``); a build is one write transaction, so
no other process ever sees it half done.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from typing import Any

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec import apply
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store import contract
from airflow_atomic_store.store.contract import (
    Backlog,
    ChosenSet,
    Claimed,
    ClaimRequest,
    ClaimSetGone,
    Receipt,
    Row,
    Selection,
    Snapshot,
    StoredSet,
    Updated,
    UpdatedMany,
    UpdateManyRequest,
    UpdateRequest,
    Upserted,
    UpsertedMany,
    UpsertManyRequest,
    UpsertRequest,
    check_storage_table,
    is_set_index,
    stored_set,
)
from airflow_atomic_store.store.migrations import Migrated
from airflow_atomic_store.store.notify import Notifications
from airflow_atomic_store.store.sql import (
    Params,
    SnapshotDialect,
    SqlSnapshot,
    decoded,
    in_claim_order,
)
from airflow_atomic_store.store.sqlite.connection import DEFAULT_BUSY_TIMEOUT, SqliteConnection
from airflow_atomic_store.store.sqlite.statements import (
    Statements,
    json_set_params,
    json_set_sql,
    literal,
    path_sql,
    plain_fields,
)


def path_from_url(url: str) -> str:
    """``sqlite:////abs/path.db`` → ``/abs/path.db``; ``sqlite:///rel.db`` → ``rel.db``."""
    path = url.split("://", 1)[1]
    return path[1:] if path.startswith("/") else path


class SqliteDriver:
    """Runs each verb in one write transaction on a single lazily-opened connection."""

    #: One writer at a time: a claim waits for a held row, never steps past it.
    skips_held_rows = False

    def __init__(
        self,
        path: str,
        *,
        storage_table: str,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        read_only: bool = False,
    ) -> None:
        self._table = self.storage_table = check_storage_table(storage_table)
        self.connection = SqliteConnection(
            path, table=self._table, busy_timeout=busy_timeout, read_only=read_only
        )
        self._transaction = self.connection.transaction
        self._sql = Statements(self._table)

    # -- plain verbs ------------------------------------------------------------------

    def put(self, table: str, key: str, value: dict[str, Any]) -> None:
        params = {"table": table, "key": key, "value": dumps(value), "now": timestamps.now()}
        with self._transaction() as connection:
            connection.execute(self._sql.statement("put"), params)

    def get(self, table: str, key: str) -> dict[str, Any] | None:
        with self._transaction(write=False) as connection:
            row = connection.execute(
                self._sql.statement("get"), {"table": table, "key": key}
            ).fetchone()
        return None if row is None else json.loads(row[0])

    def get_many(self, table: str, keys: Collection[str]) -> dict[str, dict[str, Any]]:
        """The waiters' shared poll of many rows, one statement (keys as a JSON array)."""
        params = {"table": table, "keys": json.dumps(list(keys))}
        with self._transaction(write=False) as connection:
            rows = connection.execute(self._sql.statement("get_many"), params).fetchall()
        return {key: json.loads(value) for key, value in rows}

    def delete(self, table: str, key: str) -> bool:
        params = {"table": table, "key": key}
        with self._transaction() as connection:
            return connection.execute(self._sql.statement("delete"), params).rowcount > 0

    def query(self, selection: Selection) -> list[Row]:
        with self._transaction(write=False) as connection:
            return self._select(connection, selection)

    def count(self, selection: Selection) -> Backlog:
        statement, params = self._sql.compile_select("count", selection)
        with self._transaction(write=False) as connection:
            rows = _fetch(connection, statement, {**params, "limit": selection.limit}, selection)
        return Backlog.from_row(rows[0] if rows else None)

    def explain_claim(self, selection: Selection, *, generic: bool = False) -> str:
        """SQLite plans a statement without its parameters' values: every plan is generic."""
        statement, params = self._sql.compile_select("explain_claim", selection)
        with self._transaction(write=False) as connection:
            rows = _fetch(connection, statement, {**params, "limit": selection.limit}, selection)
        return "\n".join(str(row[-1]) for row in rows)

    # -- primitives -------------------------------------------------------------------

    def update(self, request: UpdateRequest) -> Updated:
        where_sql, where = self._sql.where.compile(request.where, request.match)
        receipt = request.receipt
        params = {**where, "table": request.table, "key": request.key}
        fields = plain_fields(request.mutations)
        with self._transaction(alone=fields is not None and receipt is None) as connection:
            recorded = self._recorded(connection, receipt)
            if recorded is not _NOTHING:
                return Updated(recorded[0], replayed=True)
            params["now"] = timestamps.now()
            if fields is not None:  # one UPDATE … RETURNING: no read, no Python apply
                statement = self._sql.statement(
                    "guarded_update", where_sql, mutation=json_set_sql(fields)
                )
                params.update(json_set_params(request.mutations))
                row = connection.execute(statement, params).fetchone()
                new_value = None if row is None else json.loads(row[0])
            else:
                statement = self._sql.statement("guarded", where_sql)
                row = connection.execute(statement, params).fetchone()
                new_value = None if row is None else apply(request.mutations, json.loads(row[0]))
                if new_value is not None:
                    params["value"] = dumps(new_value)
                    connection.execute(self._sql.statement("write"), params)
            self._record(connection, receipt, [new_value])
        return Updated(new_value)

    def claim(self, request: ClaimRequest) -> Claimed:
        selection, receipt = request.selection, request.receipt
        deleting = request.mode == "delete"
        fields = plain_fields(request.mutations)
        # Ordered by created_at (or deleting) and without a receipt the claim is one statement.
        one_statement = deleting or (
            fields is not None and selection.ordering.column == "created_at"
        )
        alone = one_statement and receipt is None and request.archive_table is None
        with self._transaction(alone=alone) as connection:
            recorded = self._recorded(connection, receipt)
            if recorded is not _NOTHING:
                return Claimed([(key, value) for key, value in recorded], replayed=True)
            now = timestamps.now()
            if deleting:
                claimed = self._delete_claim(connection, selection)
                if request.archive_table is not None:
                    archive = request.archive_table
                    connection.executemany(
                        self._sql.statement("put"),
                        [
                            {"table": archive, "key": key, "value": dumps(value), "now": now}
                            for key, value in claimed
                        ],
                    )
            elif fields is not None:
                claimed = self._mark_claim(connection, request, fields, now)
            else:
                picked = self._select(connection, selection)
                claimed = [(key, apply(request.mutations, value)) for key, value in picked]
                table = selection.table
                connection.executemany(
                    self._sql.statement("write"),
                    [
                        {"value": dumps(value), "now": now, "table": table, "key": key}
                        for key, value in claimed
                    ],
                )
            self._record(connection, receipt, [list(row) for row in claimed])
        return Claimed(claimed)

    def upsert(self, request: UpsertRequest) -> Upserted:
        receipt = request.receipt
        params: Params = {"table": request.table, "key": request.key}
        with self._transaction() as connection:
            recorded = self._recorded(connection, receipt)
            if recorded is not _NOTHING:
                inserted, value = recorded
                return Upserted(bool(inserted), value, replayed=True)
            row = connection.execute(self._sql.statement("get"), params).fetchone()
            params["now"] = timestamps.now()
            if row is None:
                params["value"] = dumps(request.insert_value)
                connection.execute(self._sql.statement("insert"), params)
                inserted, value = True, request.insert_value
            else:
                inserted, value = False, json.loads(row[0])
                if request.mutations:
                    value = apply(request.mutations, value)
                    params["value"] = dumps(value)
                    connection.execute(self._sql.statement("write"), params)
            self._record(connection, receipt, [inserted, value])
        return Upserted(inserted, value)

    # -- many rows per call (issue 42): one write transaction each ----------------------
    #
    # One writer at a time, so a call holding the write lock sees and writes its rows with
    # no other writer in between. Each inserted row's ``created_at`` is the call's start
    # plus its item's position in microseconds (``timestamps.series``), so one call's items
    # keep their order, as on PostgreSQL. Any error rolls the whole call back.

    def upsert_many(self, request: UpsertManyRequest) -> UpsertedMany:
        """Which keys exist, one ``executemany`` of the others, and the reference ``apply``
        for the existing rows with mutations."""
        table, receipt, items = request.table, request.receipt, request.items
        with self._transaction() as connection:
            recorded = self._recorded(connection, receipt)
            if recorded is not _NOTHING:
                return UpsertedMany(frozenset(recorded), replayed=True)
            mutating = any(item.mutations for item in items)
            keys = {"table": table, "keys": json.dumps([item.key for item in items])}
            existing = dict(
                connection.execute(
                    self._sql.statement("existing" if mutating else "existing_keys"), keys
                ).fetchall()
            )
            stamps = timestamps.series(len(items))
            connection.executemany(
                self._sql.statement("insert_at"),
                [
                    {
                        "table": table,
                        "key": item.key,
                        "value": dumps(item.insert_value),
                        "created_at": at,
                    }
                    for item, at in zip(items, stamps, strict=True)
                    if item.key not in existing
                ],
            )
            now = timestamps.now()
            connection.executemany(
                self._sql.statement("write"),
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
            self._record(connection, receipt, inserted)
        return UpsertedMany(frozenset(inserted))

    def update_many(self, request: UpdateManyRequest) -> UpdatedMany:
        """One ``UPDATE … RETURNING`` when the mutations are top-level ``set``s and nothing is
        archived; else the guarded rows through ``apply``, written back or archived."""
        where_sql, where = self._sql.where.compile(request.where, request.match)
        params = {**where, "table": request.table, "keys": json.dumps(list(request.keys))}
        fields = plain_fields(request.mutations)
        with self._transaction() as connection:
            recorded = self._recorded(connection, request.receipt)
            if recorded is not _NOTHING:
                return UpdatedMany(frozenset(recorded), replayed=True)
            now = timestamps.now()
            if fields is not None and request.archive_table is None:
                statement = self._sql.statement(
                    "guarded_set_many", where_sql, mutation=json_set_sql(fields)
                )
                values = {**params, **json_set_params(request.mutations), "now": now}
                updated = [row[0] for row in connection.execute(statement, values)]
            else:
                rows = connection.execute(
                    self._sql.statement("guarded_many", where_sql), params
                ).fetchall()
                changed = [
                    (key, dumps(apply(request.mutations, json.loads(value)))) for key, value in rows
                ]
                table, archive = request.table, request.archive_table
                if archive is None:
                    connection.executemany(
                        self._sql.statement("write"),
                        [{"table": table, "key": k, "value": v, "now": now} for k, v in changed],
                    )
                else:
                    connection.executemany(
                        self._sql.statement("delete"),
                        [{"table": table, "key": key} for key, _ in changed],
                    )
                    connection.executemany(
                        self._sql.statement("put"),
                        [{"table": archive, "key": k, "value": v, "now": now} for k, v in changed],
                    )
                updated = [key for key, _ in changed]
            self._record(connection, request.receipt, updated)
        return UpdatedMany(frozenset(updated))

    def purge_receipts(self, limit: int) -> int:
        params = {"now": timestamps.now(), "limit": limit}
        with self._transaction() as connection:
            return connection.execute(self._sql.statement("purge_receipts"), params).rowcount

    def notifications(self) -> Notifications | None:
        """None: SQLite has no notifications (a trigger polls)."""
        return None

    def migrate(self) -> Migrated:
        return self.connection.migrate()

    def close(self) -> None:
        self.connection.close()

    # -- claimable sets ---------------------------------------------------------------

    def load_claim_sets(self) -> list[StoredSet]:
        with self._transaction(write=False) as connection:
            return self._load_sets(connection)

    def build_claim_set(self, claim_set: ClaimSet) -> StoredSet:
        """Record the set and build its partial index in one write transaction (SQLite has
        one writer at a time: the build holds up other writers while it runs)."""
        name = claim_set.index_name(self._table)
        with self._transaction() as connection:
            self.connection.create_set(connection, name, claim_set)
            return next(s for s in self._load_sets(connection) if s.name == name)

    def drop_claim_set(self, name: str) -> bool:
        """Forget the set and drop its index (only a set index's name is ever dropped)."""
        params = {"name": name}
        with self._transaction() as connection:
            known = connection.execute(self._sql.statement("forget_set"), params).rowcount > 0
            if not is_set_index(self._table, name):
                return known
            present = connection.execute(self._sql.statement("index_exists"), params).fetchone()
            connection.execute(f"DROP INDEX IF EXISTS {name}")
            return known or present is not None

    def _load_sets(self, connection: sqlite3.Connection) -> list[StoredSet]:
        rows = connection.execute(self._sql.statement("load_sets")).fetchall()
        return [
            stored_set(name, json.loads(spec), origin, problem, bool(present))
            for name, spec, origin, problem, present in rows
        ]

    # -- inspection -------------------------------------------------------------------

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """Read-only inspection queries in one read transaction (``BEGIN``), with
        ``PRAGMA query_only`` on for its length: SQLite itself refuses any write."""
        transaction, table, where = self._transaction(write=False), self._table, self._sql.where

        @contextmanager
        def opened() -> Iterator[Snapshot]:
            with transaction as connection:
                connection.execute("PRAGMA query_only = ON")
                try:
                    yield SqlSnapshot(
                        _SNAPSHOT,
                        connection,
                        table,
                        where,
                        _same_name,
                        receipts_table=f"{table}_receipts",  # as queries.sql names it
                    )
                finally:
                    connection.execute("PRAGMA query_only = OFF")

        return opened()

    # -- helpers ----------------------------------------------------------------------

    def _select(self, connection: sqlite3.Connection, selection: Selection) -> list[Row]:
        statement, params = self._sql.compile_select("select", selection)
        return decoded(
            _fetch(connection, statement, {**params, "limit": selection.limit}, selection)
        )

    def _delete_claim(self, connection: sqlite3.Connection, selection: Selection) -> list[Row]:
        """A delete-claim as one ``DELETE … WHERE rowid IN (the selection) RETURNING``."""
        statement, params = self._sql.compile_select(
            f"delete_{selection.ordering.column}", selection
        )
        rows = _fetch(connection, statement, {**params, "limit": selection.limit}, selection)
        return in_claim_order(rows, selection.ordering)

    def _mark_claim(
        self,
        connection: sqlite3.Connection,
        request: ClaimRequest,
        fields: tuple[str, ...],
        now: str,
    ) -> list[Row]:
        """The claim as ``UPDATE … WHERE rowid IN (the selection) RETURNING``, re-sorted.

        Ordered by ``record_timestamp`` the old value is needed for the order and
        RETURNING shows only the new one, so the rows are picked first.
        """
        selection = request.selection
        mutation = json_set_sql(fields)
        head = {**json_set_params(request.mutations), "now": now, "limit": selection.limit}
        if selection.ordering.column == "created_at":
            statement, params = self._sql.compile_select("claim_update", selection, mutation)
            rows = _fetch(connection, statement, {**params, **head}, selection)
            return in_claim_order(rows, selection.ordering)
        statement, params = self._sql.compile_select("pick", selection)
        picked = [row[0] for row in _fetch(connection, statement, {**params, **head}, selection)]
        if not picked:
            return []
        position = {rowid: number for number, rowid in enumerate(picked)}
        rows = connection.execute(
            self._sql.statement("update_picked", mutation=mutation),
            {**head, "picked": dumps(picked)},
        ).fetchall()
        rows.sort(key=lambda row: position[row[0]])
        return decoded([(key, value) for _, key, value in rows])

    def _recorded(self, connection: sqlite3.Connection, receipt: Receipt | None) -> Any:
        """The result recorded under the receipt's key, inside the write transaction; an
        expired receipt is removed (after its retention a key is new)."""
        if receipt is None:
            return _NOTHING
        key = {"receipt_key": receipt.key}
        row = connection.execute(
            self._sql.statement("read_receipt"), {**key, "now": timestamps.now()}
        ).fetchone()
        if row is None:
            return _NOTHING
        primitive, table, target, result, expired = row
        if expired:
            connection.execute(self._sql.statement("forget_receipt"), key)
            return _NOTHING
        receipt.check_reuse(primitive, table, target)
        return json.loads(result)

    def _record(self, connection: sqlite3.Connection, receipt: Receipt | None, result: Any) -> None:
        """Write the receipt of a keyed call beside its effect, in the same transaction."""
        if receipt is None:
            return
        text = dumps(result)
        if len(text) * 4 > contract.MAX_RESULT_BYTES:  # UTF-8 takes at most 4 bytes a character
            receipt.check_result_size(len(text.encode()))  # raises: the transaction rolls back
        connection.execute(
            self._sql.statement("record_receipt"),
            {
                "receipt_key": receipt.key,
                "primitive": receipt.primitive,
                "receipt_table": receipt.table,
                "target": receipt.target,
                "result": text,
                "now": timestamps.now(),
                "expires_at": timestamps.shifted(timedelta(seconds=receipt.retention)),
            },
        )


#: ``_recorded``'s "no receipt holds a result".
_NOTHING: Any = object()


def _fetch(
    connection: sqlite3.Connection, statement: str, params: Params, selection: Selection
) -> list[Any]:
    """All rows of a statement that may name a claimable set's index, which may be gone."""
    claim_set: ChosenSet | None = selection.claim_set
    try:
        return connection.execute(statement, params).fetchall()
    except sqlite3.OperationalError as exc:
        if claim_set is not None and "no such index" in str(exc):
            raise ClaimSetGone(claim_set.name) from exc
        raise


def _same_name(table: str) -> str:
    return table  # rows hold their logical table's name


def _execute(connection: sqlite3.Connection, statement: str, params: Params) -> list[Any]:
    return connection.execute(statement, params).fetchall()


_SNAPSHOT = SnapshotDialect(
    placeholder=":{}",
    string_type="text",
    byte_order="",  # SQLite's default collation already compares bytes
    path_sql=path_sql,
    literal=literal,
    execute=_execute,
    parse_time=timestamps.parse_timestamp,
    parse_value=json.loads,
    table_column="table_name",
    table_counts="SELECT table_name, count(*) FROM {table} GROUP BY table_name",
    time_cast="",  # timestamps are canonical text: they compare as text
    minutes_since="CAST((julianday({column}) - julianday({mark})) * 1440 AS INTEGER)",
)
