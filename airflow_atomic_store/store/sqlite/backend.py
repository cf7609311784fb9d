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
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec import Condition, Mutation, Ordering, apply
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store.backend import Row, check_storage_table, counted
from airflow_atomic_store.store.claim_sets import IDLE_SECONDS, ChosenSet, Origin, StoredSet
from airflow_atomic_store.store.receipts import Receipt
from airflow_atomic_store.store.snapshot import Snapshot
from airflow_atomic_store.store.sqlite import claim_sets, receipts, selection
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


class SqliteBackend(SqliteConnection):
    def __init__(
        self,
        path: str,
        *,
        storage_table: str,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        read_only: bool = False,
    ) -> None:
        super().__init__(
            path,
            table=check_storage_table(storage_table),
            busy_timeout=busy_timeout,
            read_only=read_only,
        )
        self._sql = StatementCompiler(self._table)

    def written_query(self, table: str) -> tuple[bytes | str, list[Any]] | None:
        """None: counts read no catalog first (a trigger counts through the store)."""
        return None

    def notify_channel(self, table: str) -> str | None:
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

    def build_claim_set(
        self,
        claim_set: ClaimSet,
        origin: Origin,
        *,
        timeout: float | None,
        automatic_limit: int,
    ) -> StoredSet | None:
        """Record the set and build its partial index in one write transaction.

        SQLite has one writer at a time, so the build holds up other writers for
        as long as it takes; ``timeout`` is not applied.
        """
        with self._transaction() as connection:
            return claim_sets.build(
                connection,
                storage_table=self._table,
                where=self._sql.where,
                claim_set=claim_set,
                origin=origin,
                automatic_limit=automatic_limit,
                idle_seconds=IDLE_SECONDS,
            )

    def build_in_progress(self, claim_set: ClaimSet) -> bool:
        """Never visible: a build is one write transaction, which other writers wait for."""
        return False

    def touch_claim_set(self, name: str) -> bool:
        if self._read_only:
            return True
        with self._transaction(alone=True) as connection:
            return claim_sets.touch(connection, self._table, name)

    def drop_idle_claim_sets(self, idle_seconds: float) -> list[str]:
        if self._read_only:
            return []
        with self._transaction() as connection:
            return claim_sets.drop_idle(connection, self._table, idle_seconds)

    def ensure_record_index(self, *, timeout: float) -> bool:
        """One write transaction, like a set's build (``timeout`` is not applied).

        A read-only store builds nothing: it orders without the index.
        """
        if self._read_only:
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

    def count(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        claim_set: ChosenSet | None = None,
    ) -> tuple[int, str | None]:
        statement, params = self.count_query(table, where, match, ordering, limit, claim_set)
        with self._transaction(write=False) as connection:
            rows = selection.fetch(connection, statement, params, claim_set)
        return counted(rows[0] if rows else None)

    def count_query(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        claim_set: ChosenSet | None = None,
    ) -> tuple[str, list[Any]]:
        statement, params = self._sql.compile_select(
            "count", table, where, match, ordering, claim_set
        )
        return statement, [*params, limit]

    def explain_claim(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        claim_set: ChosenSet | None = None,
        *,
        generic: bool = False,
    ) -> str:
        """SQLite plans a statement without its parameters' values: every plan is generic."""
        statement, params = self._sql.compile_select(
            "explain_claim", table, where, match, ordering, claim_set
        )
        with self._transaction(write=False) as connection:
            rows = selection.fetch(connection, statement, (*params, limit), claim_set)
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

    def delete(self, table: str, key: str) -> bool:
        with self._transaction() as connection:
            return connection.execute(self._sql.statement("delete"), (table, key)).rowcount > 0

    def query(
        self, table: str, where: Sequence[Condition], match: str, ordering: Ordering, limit: int
    ) -> list[Row]:
        with self._transaction(write=False) as connection:
            return selection.select(connection, self._sql, table, where, match, ordering, limit)

    def update(
        self,
        table: str,
        key: str,
        where: Sequence[Condition],
        match: str,
        mutations: Sequence[Mutation],
        receipt: Receipt | None = None,
    ) -> tuple[dict[str, Any] | None, bool]:
        where_sql, params = self._sql.where.compile(where, match)
        fields = plain_fields(mutations)
        with self._transaction(alone=fields is not None and receipt is None) as connection:
            recorded = receipts.recorded(connection, self._sql.statement, receipt)
            if recorded is not receipts.NOTHING:
                return recorded[0], True
            if fields is not None:  # one UPDATE … RETURNING: no read, no Python apply
                row = connection.execute(
                    self._sql.statement("guarded_update", where_sql, mutation=json_set_sql(fields)),
                    (*json_set_params(mutations), timestamps.now(), table, key, *params),
                ).fetchone()
                new_value = None if row is None else json.loads(row[0])
            else:
                row = connection.execute(
                    self._sql.statement("guarded", where_sql), (table, key, *params)
                ).fetchone()
                new_value = None if row is None else apply(mutations, json.loads(row[0]))
                if new_value is not None:
                    connection.execute(
                        self._sql.statement("write"),
                        (dumps(new_value), timestamps.now(), table, key),
                    )
            receipts.record(connection, self._sql.statement, receipt, [new_value])
        return new_value, False

    def claim(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        mutations: Sequence[Mutation],
        claim_set: ChosenSet | None = None,
        receipt: Receipt | None = None,
    ) -> tuple[list[Row], bool]:
        fields = plain_fields(mutations)
        # Ordered by created_at and without a receipt the claim is one statement.
        alone = fields is not None and receipt is None and ordering.column == "created_at"
        with self._transaction(alone=alone) as connection:
            recorded = receipts.recorded(connection, self._sql.statement, receipt)
            if recorded is not receipts.NOTHING:
                return [(key, value) for key, value in recorded], True
            if fields is not None:
                claimed = selection.claim_in_sql(
                    connection,
                    self._sql,
                    table,
                    where,
                    match,
                    ordering,
                    limit,
                    mutations,
                    fields,
                    claim_set,
                )
            else:
                picked = selection.select(
                    connection, self._sql, table, where, match, ordering, limit, claim_set
                )
                claimed = [(key, apply(mutations, value)) for key, value in picked]
                now = timestamps.now()
                connection.executemany(
                    self._sql.statement("write"),
                    [(dumps(value), now, table, key) for key, value in claimed],
                )
            receipts.record(
                connection, self._sql.statement, receipt, [list(row) for row in claimed]
            )
        return claimed, False

    def upsert(
        self,
        table: str,
        key: str,
        insert_value: dict[str, Any],
        mutations: Sequence[Mutation],
        receipt: Receipt | None = None,
    ) -> tuple[tuple[bool, dict[str, Any]], bool]:
        with self._transaction() as connection:
            recorded = receipts.recorded(connection, self._sql.statement, receipt)
            if recorded is not receipts.NOTHING:
                inserted, value = recorded
                return (bool(inserted), value), True
            row = connection.execute(self._sql.statement("get"), (table, key)).fetchone()
            now = timestamps.now()
            if row is None:
                connection.execute(
                    self._sql.statement("insert"), (table, key, dumps(insert_value), now, now)
                )
                inserted, value = True, insert_value
            else:
                inserted, value = False, json.loads(row[0])
                if mutations:
                    value = apply(mutations, value)
                    connection.execute(
                        self._sql.statement("write"), (dumps(value), now, table, key)
                    )
            receipts.record(connection, self._sql.statement, receipt, [inserted, value])
        return (inserted, value), False

    def purge_receipts(self, limit: int) -> int:
        with self._transaction() as connection:
            return connection.execute(
                self._sql.statement("purge_receipts"), (timestamps.now(), limit)
            ).rowcount
