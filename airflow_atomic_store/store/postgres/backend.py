"""The PostgreSQL backend: every primitive is one statement in autocommit.

Update is ``UPDATE … WHERE guard RETURNING``: PostgreSQL re-checks the guard
against the newest row version when it had to wait for a concurrent writer,
so a guard can never pass on a stale read. Claim selects its batch in a
materialised CTE with ``FOR UPDATE SKIP LOCKED`` (losers step past rows
another claimer holds) and marks them in the same statement. Upsert is
``INSERT … ON CONFLICT DO UPDATE``; ``xmax = 0`` on the returned row tells an
insert from an update.

The backend *has* a connection (``connection.py``: opened lazily, schema
ensured, errors translated) and a statement compiler (``statements.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from airflow_atomic_store.exceptions import StoreUnavailableError
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.store.backend import check_storage_table, decoded, in_claim_order
from airflow_atomic_store.store.claim_sets import BuildRequest, StoredSet
from airflow_atomic_store.store.notify import DEFAULT_NOTIFY, NOTIFY_MODES, channel_for
from airflow_atomic_store.store.postgres import claim_sets, receipts, schema, set_catalog
from airflow_atomic_store.store.postgres.connection import Connect, PostgresConnection
from airflow_atomic_store.store.postgres.explain import explain
from airflow_atomic_store.store.postgres.jsonb import jsonb
from airflow_atomic_store.store.postgres.listener import PostgresListener
from airflow_atomic_store.store.postgres.mutation_sql import mutations_sql
from airflow_atomic_store.store.postgres.statements import StatementCompiler
from airflow_atomic_store.store.postgres.tables import TableIds
from airflow_atomic_store.store.receipts import Receipt
from airflow_atomic_store.store.requests import (
    Backlog,
    Claimed,
    ClaimRequest,
    Row,
    Selection,
    Updated,
    UpdateRequest,
    Upserted,
    UpsertRequest,
)
from airflow_atomic_store.store.snapshot import Snapshot

#: Seed statements a seed may take while other sessions insert and delete its row.
_SEED_ATTEMPTS = 100


class PostgresBackend:
    """Runs each primitive as one statement on a single lazily-opened connection."""

    def __init__(
        self,
        connect: Connect,
        *,
        storage_table: str,
        lock_timeout: float | None = None,
        statement_timeout: float | None = None,
        secrets: tuple[str, ...] = (),
        notify: frozenset[str] = NOTIFY_MODES[DEFAULT_NOTIFY],
        read_only: bool = False,
    ) -> None:
        self._table_name = check_storage_table(storage_table)
        self._ids = TableIds(self._table_name)
        self.connection = PostgresConnection(
            connect,
            table_name=self._table_name,
            secrets=secrets,
            timeouts={"lock_timeout": lock_timeout, "statement_timeout": statement_timeout},
            read_only=read_only,
            # ids remembered from tables that were dropped are not theirs
            on_schema_created=self._ids.forget,
        )
        self._cursor = self.connection.cursor
        self._sql = StatementCompiler(self._table_name, notify)

    def _id(self, table: str) -> int:
        """A written table's id, given to it on its first write."""
        return self._ids.ensure(self._cursor, table)

    def _read_id(self, table: str) -> int | None:
        """A read table's id; None (bound, it matches no row) when nothing wrote to it.

        Reads never write, not even the catalog: a read-only role can read.
        """
        return self._ids.known(self._cursor, table)

    # -- notifications (the trigger's capability) ----------------------------

    def notifications(self) -> PostgresBackend:
        return self

    def listener(self, table: str, connect_args: dict[str, Any]) -> PostgresListener:
        """On the channel the writes to ``table`` notify (per storage table and table)."""
        return PostgresListener(connect_args, channel_for(self._table_name, table))

    def count_query(self, selection: Selection) -> tuple[bytes, list[Any]]:
        return self._selection("count", selection)

    def value_query(self, table: str, key: str) -> tuple[bytes, list[Any]]:
        return self._sql.queries["get"], [self._read_id(table), key]

    def written_query(self, table: str) -> tuple[bytes, list[Any]] | None:
        """The catalog lookup :meth:`count_query` would make for a table not yet seen written."""
        return self._ids.find_query(table)

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """Read-only inspection queries in one transaction (``inspect.py``)."""
        from airflow_atomic_store.store.postgres.inspect import snapshot

        return snapshot(self._cursor(many_rows=True), self._table_name, self._sql.where)

    # -- claimable sets -----------------------------------------------------

    def load_claim_sets(self) -> list[StoredSet]:
        with self._cursor(many_rows=True) as cur:
            return claim_sets.load(cur, schema.sets_table(self._table_name))

    def build_claim_set(self, request: BuildRequest) -> StoredSet | None:
        with self._cursor() as cur:
            return claim_sets.build(cur, self._table_name, self._sql.where, request)

    def build_in_progress(self, claim_set: ClaimSet) -> bool:
        with self._cursor() as cur:
            return claim_sets.build_in_progress(cur, claim_set)

    def touch_claim_set(self, name: str) -> bool:
        if self.connection.read_only:
            return True
        with self._cursor() as cur:
            return set_catalog.touch(cur, schema.sets_table(self._table_name), name)

    def drop_idle_claim_sets(self, idle_seconds: float) -> list[str]:
        if self.connection.read_only:
            return []
        with self._cursor() as cur:
            return claim_sets.drop_idle(cur, self._table_name, idle_seconds)

    def ensure_record_index(self, *, timeout: float) -> bool:
        """The ``record_timestamp`` index, built the first time something orders by it.

        A read-only store builds nothing: it orders without the index.
        """
        if self.connection.read_only:
            return False
        name, create = schema.record_index(self._table_name)
        sets_table = schema.sets_table(self._table_name)
        with self._cursor() as cur:
            if claim_sets.record_index_given_up(cur, sets_table, name):
                return False
            with claim_sets.build_lock(cur, wait=False) as held:
                if not held:
                    return False
                outcome = claim_sets.build_concurrently(
                    cur, self._table_name, name, create.decode(), timeout=timeout
                )
            claim_sets.record_index_gave_up(cur, sets_table, name, outcome, timeout)
        return outcome == "ready"

    def drop_claim_set(self, name: str) -> bool:
        with self._cursor() as cur:
            return claim_sets.drop(cur, self._table_name, name)

    # -- plain verbs ----------------------------------------------------------

    def put(self, table: str, key: str, value: dict[str, Any]) -> None:
        extras, channel = self._sql.extras("put", table, keyed=False)
        with self._cursor() as cur:
            cur.execute(self._sql.put(extras), (self._id(table), key, jsonb(value), *channel))

    def get(self, table: str, key: str) -> dict[str, Any] | None:
        with self._cursor() as cur:
            row = cur.execute(self._sql.queries["get"], (self._read_id(table), key)).fetchone()
        return None if row is None else row[0]

    def delete(self, table: str, key: str) -> bool:
        args = (self._read_id(table), key)
        with self._cursor() as cur:
            return cur.execute(self._sql.queries["delete"], args).fetchone() is not None

    def query(self, selection: Selection) -> list[Row]:
        where_sql, params = self._sql.where.compile(selection.where, selection.match)
        args = (self._read_id(selection.table), *params, selection.limit)
        with self._cursor(many_rows=selection.limit > 1) as cur:
            return decoded(
                cur.execute(self._sql.query(where_sql, selection.ordering), args).fetchall()
            )

    def count(self, selection: Selection) -> Backlog:
        statement, params = self.count_query(selection)
        with self._cursor() as cur:
            return Backlog.from_row(cur.execute(statement, params).fetchone())

    def explain_claim(self, selection: Selection, *, generic: bool = False) -> str:
        """The selection's plan; ``generic`` asks for the plan a prepared claim settles on."""
        statement, params = self._selection("pick", selection)
        with self._cursor(many_rows=True) as cur:
            return explain(cur, statement, params, generic=generic)

    def _selection(self, kind: str, selection: Selection) -> tuple[bytes, list[Any]]:
        table_filter, where_sql, params = self._sql.selection_filter(
            self._read_id(selection.table), selection.where, selection.match, selection.claim_set
        )
        statement = self._sql.selection(
            kind, where_sql, selection.ordering, selection.limit, table_filter
        )
        return statement, params

    # -- primitives ---------------------------------------------------------

    def update(self, request: UpdateRequest) -> Updated:
        apply, mutation_params = mutations_sql(request.mutations, "r.value")
        extras, channel = self._sql.extras("update", request.table, request.receipt is not None)
        where_sql, params = self._sql.where.compile(request.where, request.match)
        statement = self._sql.update(where_sql, apply, extras)
        args = (*mutation_params, self._id(request.table), request.key, *params)
        rows, recorded = self._execute(statement, args, channel, request.receipt, many_rows=False)
        if recorded is not receipts.NOTHING:
            return Updated(recorded[0], replayed=True)
        return Updated(rows[0][0] if rows else None)

    def claim(self, request: ClaimRequest) -> Claimed:
        selection = request.selection
        apply: str | None = None  # a delete-claim marks nothing
        mutation_params: Sequence[Any] = ()
        if request.mode == "mark":
            apply, mutation_params = mutations_sql(request.mutations, "t.value")
        keyed = request.receipt is not None
        extras, channel = self._sql.extras("claim", selection.table, keyed)
        archive: tuple[int, ...] = ()
        if request.archive_table is not None:
            extras, archive = replace(extras, archive=True), (self._id(request.archive_table),)
        table_id = self._id(selection.table)
        table_filter, where_sql, params = self._sql.selection_filter(
            table_id, selection.where, selection.match, selection.claim_set
        )
        statement = self._sql.claim(
            where_sql, selection.ordering, selection.limit, table_filter, apply, extras
        )
        args = (*params, *mutation_params, table_id, *archive)
        many_rows = selection.limit > 1
        rows, recorded = self._execute(
            statement, args, channel, request.receipt, many_rows=many_rows
        )
        if recorded is not receipts.NOTHING:
            return Claimed([(key, value) for key, value in recorded], replayed=True)
        return Claimed(in_claim_order(rows, selection.ordering))

    def upsert(self, request: UpsertRequest) -> Upserted:
        """Without mutations it is a seed: insert if absent, else read the row, so a
        duplicate delivery writes nothing. The seed finds no row only when the
        conflicting row was committed after its snapshot was taken (``DO NOTHING``
        waited for that insert), or was deleted since; the next statement settles it.
        """
        table_id, value = self._id(request.table), jsonb(request.insert_value)
        extras, channel = self._sql.extras("upsert", request.table, request.receipt is not None)
        args: tuple[Any, ...]
        if request.mutations:
            apply, mutation_params = mutations_sql(request.mutations, "t.value")
            statement = self._sql.upsert(apply, extras)
            args = (table_id, request.key, value, *mutation_params)
        else:
            statement = self._sql.seed(extras)
            args = (table_id, request.key, value, table_id, request.key)
        for _ in range(_SEED_ATTEMPTS):
            rows, recorded = self._execute(
                statement, args, channel, request.receipt, many_rows=False
            )
            if recorded is not receipts.NOTHING:
                inserted, stored = recorded
                return Upserted(bool(inserted), stored, replayed=True)
            if rows:
                stored, inserted = rows[0]
                return Upserted(bool(inserted), stored)
        raise StoreUnavailableError(
            f"seed of {request.key!r} kept meeting a row inserted and deleted by others; try again"
        )

    def _execute(
        self,
        statement: bytes,
        args: tuple[Any, ...],
        channel: tuple[str, ...],
        receipt: Receipt | None,
        *,
        many_rows: bool,
    ) -> tuple[list[Any], Any]:
        """A write's rows, and what an earlier call under its key recorded (or ``NOTHING``).

        Without a receipt: the statement, once, on the store's connection. With one:
        through ``receipts.run_keyed``, which writes the receipt in the same
        statement, or returns the recorded result when the key was used before.
        ``channel`` (the notification's, when the write notifies) goes last.
        """
        if receipt is None:
            with self._cursor(many_rows=many_rows) as cur:
                return cur.execute(statement, (*args, *channel)).fetchall(), receipts.NOTHING
        outcome = receipts.run_keyed(
            self._cursor,
            self._table_name,
            self._sql.queries,
            statement,
            args,
            receipt,
            many_rows=many_rows,
            last=channel,
        )
        return outcome.rows, outcome.recorded

    def purge_receipts(self, limit: int) -> int:
        with self._cursor() as cur:
            return receipts.purge(cur, self._sql.queries, limit)

    def close(self) -> None:
        self.connection.close()
