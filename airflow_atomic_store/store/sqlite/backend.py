"""The SQLite backend: each primitive is one ``BEGIN IMMEDIATE`` transaction.

``BEGIN IMMEDIATE`` takes SQLite's single write lock before reading, so the
read, the guard and the write cannot interleave with another writer in any
process; concurrent writers wait on the busy timeout instead of failing with
"database is locked". Inside that lock the guard and claim filter run as
compiled SQL and mutations run through the reference ``apply``, so SQLite's
mutation semantics are the oracle's by construction; the exception is a list
of top-level ``set``s, which ``json_set`` computes exactly, so that claim or
update is one ``UPDATE … RETURNING`` (``mutations.py``).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from contextlib import AbstractContextManager
from typing import Any

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec import apply
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store.backend import Notifications, check_storage_table
from airflow_atomic_store.store.claim_sets import BuildRequest, StoredSet
from airflow_atomic_store.store.migrations import Migrated
from airflow_atomic_store.store.requests import (
    Backlog,
    Claimed,
    ClaimRequest,
    Row,
    Selection,
    Updated,
    UpdatedMany,
    UpdateManyRequest,
    UpdateRequest,
    Upserted,
    UpsertedMany,
    UpsertManyRequest,
    UpsertRequest,
)
from airflow_atomic_store.store.snapshot import Snapshot
from airflow_atomic_store.store.sqlite import claim_sets, receipts
from airflow_atomic_store.store.sqlite import selection as selection_sql
from airflow_atomic_store.store.sqlite.bulk import SqliteBulk
from airflow_atomic_store.store.sqlite.connection import (
    DEFAULT_BUSY_TIMEOUT,
    SqliteConnection,
)
from airflow_atomic_store.store.sqlite.mutations import (
    json_set_params,
    json_set_sql,
    plain_fields,
)
from airflow_atomic_store.store.sqlite.statements import StatementCompiler


def path_from_url(url: str) -> str:
    """``sqlite:////abs/path.db`` → ``/abs/path.db``; ``sqlite:///rel.db`` → ``rel.db``."""
    path = url.split("://", 1)[1]
    return path[1:] if path.startswith("/") else path


class SqliteBackend:
    """Runs each primitive in one write transaction on a single lazily-opened connection."""

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
        self._table = check_storage_table(storage_table)
        self.connection = SqliteConnection(
            path, table=self._table, busy_timeout=busy_timeout, read_only=read_only
        )
        self._transaction = self.connection.transaction
        self._sql = StatementCompiler(self._table)
        self._bulk = SqliteBulk(self._table, self._transaction, self._sql)

    def notifications(self) -> Notifications | None:
        """None: SQLite has no notifications (a trigger polls)."""
        return None

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """Read-only inspection queries in one read transaction (``inspect.py``)."""
        from airflow_atomic_store.store.sqlite.inspect import snapshot

        return snapshot(self._transaction(write=False), self._table, self._sql.where)

    # -- claimable sets -----------------------------------------------------

    def load_claim_sets(self) -> list[StoredSet]:
        with self._transaction(write=False) as connection:
            return claim_sets.load(connection, self._table)

    def build_claim_set(self, request: BuildRequest) -> StoredSet | None:
        """Record the set and build its partial index in one write transaction.

        SQLite has one writer at a time, so the build holds up other writers for
        as long as it takes; ``timeout`` is not applied.
        """
        with self._transaction() as connection:
            return claim_sets.build(connection, self._table, self._sql.where, request)

    def build_in_progress(self, claim_set: ClaimSet) -> bool:
        """Never visible: a build is one write transaction, which other writers wait for."""
        return False

    def touch_claim_set(self, name: str) -> bool:
        if self.connection.read_only:
            return True
        with self._transaction(alone=True) as connection:
            return claim_sets.touch(connection, self._table, name)

    def drop_idle_claim_sets(self, idle_seconds: float) -> list[str]:
        if self.connection.read_only:
            return []
        with self._transaction() as connection:
            return claim_sets.drop_idle(connection, self._table, idle_seconds)

    def ensure_record_index(self, *, timeout: float) -> bool:
        """One write transaction, like a set's build (``timeout`` is not applied).

        A read-only store builds nothing: it orders without the index.
        """
        if self.connection.read_only:
            return False
        with self._transaction() as connection:
            connection.execute(
                f"CREATE INDEX IF NOT EXISTS {self._table}_record_idx "
                f"ON {self._table} (table_name, record_timestamp, key)"
            )
        return True

    def drop_claim_set(self, name: str) -> bool:
        with self._transaction() as connection:
            return claim_sets.drop(connection, self._table, name)

    def count(self, selection: Selection) -> Backlog:
        statement, params = self._sql.compile_select("count", selection)
        with self._transaction(write=False) as connection:
            rows = selection_sql.fetch(
                connection, statement, (*params, selection.limit), selection.claim_set
            )
        return Backlog.from_row(rows[0] if rows else None)

    def explain_claim(self, selection: Selection, *, generic: bool = False) -> str:
        """SQLite plans a statement without its parameters' values: every plan is generic."""
        statement, params = self._sql.compile_select("explain_claim", selection)
        with self._transaction(write=False) as connection:
            rows = selection_sql.fetch(
                connection, statement, (*params, selection.limit), selection.claim_set
            )
        return "\n".join(str(row[-1]) for row in rows)

    # -- primitives ---------------------------------------------------------

    def put(self, table: str, key: str, value: dict[str, Any]) -> None:
        now = timestamps.now()
        with self._transaction() as connection:
            connection.execute(self._sql.statement("put"), (table, key, dumps(value), now, now))

    def get(self, table: str, key: str) -> dict[str, Any] | None:
        with self._transaction(write=False) as connection:
            row = connection.execute(self._sql.statement("get"), (table, key)).fetchone()
        return None if row is None else json.loads(row[0])

    def get_many(self, table: str, keys: Collection[str]) -> dict[str, dict[str, Any]]:
        """h40: the waiters' shared poll of many rows, one statement (keys as a JSON array)."""
        params = {"table": table, "keys": json.dumps(list(keys))}
        with self._transaction(write=False) as connection:
            rows = connection.execute(self._sql.statement("get_many"), params).fetchall()
        return {key: json.loads(value) for key, value in rows}

    def delete(self, table: str, key: str) -> bool:
        with self._transaction() as connection:
            return connection.execute(self._sql.statement("delete"), (table, key)).rowcount > 0

    def query(self, selection: Selection) -> list[Row]:
        with self._transaction(write=False) as connection:
            return selection_sql.select(connection, self._sql, selection)

    def update(self, request: UpdateRequest) -> Updated:
        where_sql, params = self._sql.where.compile(request.where, request.match)
        table, key, receipt = request.table, request.key, request.receipt
        fields = plain_fields(request.mutations)
        with self._transaction(alone=fields is not None and receipt is None) as connection:
            recorded = receipts.recorded(connection, self._sql.statement, receipt)
            if recorded is not receipts.NOTHING:
                return Updated(recorded[0], replayed=True)
            if fields is not None:  # one UPDATE … RETURNING: no read, no Python apply
                row = connection.execute(
                    self._sql.statement("guarded_update", where_sql, mutation=json_set_sql(fields)),
                    (*json_set_params(request.mutations), timestamps.now(), table, key, *params),
                ).fetchone()
                new_value = None if row is None else json.loads(row[0])
            else:
                row = connection.execute(
                    self._sql.statement("guarded", where_sql), (table, key, *params)
                ).fetchone()
                new_value = None if row is None else apply(request.mutations, json.loads(row[0]))
                if new_value is not None:
                    connection.execute(
                        self._sql.statement("write"),
                        (dumps(new_value), timestamps.now(), table, key),
                    )
            receipts.record(connection, self._sql.statement, receipt, [new_value])
        return Updated(new_value)

    def claim(self, request: ClaimRequest) -> Claimed:
        selection, receipt = request.selection, request.receipt
        deleting = request.mode == "delete"
        fields = plain_fields(request.mutations)
        # Ordered by created_at (or deleting) and without a receipt the claim is one statement.
        one_statement = deleting or (
            fields is not None and selection.ordering.column == "created_at"
        )
        alone = one_statement and receipt is None
        with self._transaction(alone=alone) as connection:
            recorded = receipts.recorded(connection, self._sql.statement, receipt)
            if recorded is not receipts.NOTHING:
                return Claimed([(key, value) for key, value in recorded], replayed=True)
            if deleting:
                claimed = selection_sql.delete_in_sql(connection, self._sql, selection)
                if request.archive_table is not None:
                    now = timestamps.now()
                    connection.executemany(
                        self._sql.statement("put"),
                        [
                            (request.archive_table, key, dumps(value), now, now)
                            for key, value in claimed
                        ],
                    )
            elif fields is not None:
                claimed = selection_sql.claim_in_sql(connection, self._sql, request, fields)
            else:
                picked = selection_sql.select(connection, self._sql, selection)
                claimed = [(key, apply(request.mutations, value)) for key, value in picked]
                now = timestamps.now()
                connection.executemany(
                    self._sql.statement("write"),
                    [(dumps(value), now, selection.table, key) for key, value in claimed],
                )
            receipts.record(
                connection, self._sql.statement, receipt, [list(row) for row in claimed]
            )
        return Claimed(claimed)

    def upsert(self, request: UpsertRequest) -> Upserted:
        table, key, receipt = request.table, request.key, request.receipt
        with self._transaction() as connection:
            recorded = receipts.recorded(connection, self._sql.statement, receipt)
            if recorded is not receipts.NOTHING:
                inserted, value = recorded
                return Upserted(bool(inserted), value, replayed=True)
            row = connection.execute(self._sql.statement("get"), (table, key)).fetchone()
            now = timestamps.now()
            if row is None:
                connection.execute(
                    self._sql.statement("insert"),
                    (table, key, dumps(request.insert_value), now, now),
                )
                inserted, value = True, request.insert_value
            else:
                inserted, value = False, json.loads(row[0])
                if request.mutations:
                    value = apply(request.mutations, value)
                    connection.execute(
                        self._sql.statement("write"), (dumps(value), now, table, key)
                    )
            receipts.record(connection, self._sql.statement, receipt, [inserted, value])
        return Upserted(inserted, value)

    def purge_receipts(self, limit: int) -> int:
        with self._transaction() as connection:
            return connection.execute(
                self._sql.statement("purge_receipts"), (timestamps.now(), limit)
            ).rowcount

    def migrate(self) -> Migrated:
        return self.connection.migrate()

    def close(self) -> None:
        self.connection.close()

    # -- many rows per call (``bulk.py``) ---------------------------------------------------

    def upsert_many(self, request: UpsertManyRequest) -> UpsertedMany:
        return self._bulk.upsert_many(request)

    def update_many(self, request: UpdateManyRequest) -> UpdatedMany:
        return self._bulk.update_many(request)
