"""The PostgreSQL backend: every primitive is one statement in autocommit.

Update is ``UPDATE … WHERE guard RETURNING``: PostgreSQL re-checks the guard
against the newest row version when it had to wait for a concurrent writer,
so a guard can never pass on a stale read. Claim selects its batch in a
materialised CTE with ``FOR UPDATE SKIP LOCKED`` (losers step past rows
another claimer holds) and marks them in the same statement. Upsert is
``INSERT … ON CONFLICT DO UPDATE``; ``xmax = 0`` on the returned row tells an
insert from an update.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from airflow_atomic_store.exceptions import StoreUnavailableError
from airflow_atomic_store.spec import Condition, Mutation, Ordering
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.store.backend import (
    Row,
    check_storage_table,
    counted,
    decoded,
    in_claim_order,
)
from airflow_atomic_store.store.claim_sets import IDLE_SECONDS, ChosenSet, Origin, StoredSet
from airflow_atomic_store.store.notify import DEFAULT_NOTIFY, NOTIFY_MODES, channel_for
from airflow_atomic_store.store.postgres import claim_sets, receipts, schema, set_catalog
from airflow_atomic_store.store.postgres.connection import Connect, PostgresConnection
from airflow_atomic_store.store.postgres.explain import explain
from airflow_atomic_store.store.postgres.jsonb import jsonb
from airflow_atomic_store.store.postgres.mutation_sql import mutations_sql
from airflow_atomic_store.store.postgres.statements import StatementCompiler
from airflow_atomic_store.store.postgres.tables import TableIds
from airflow_atomic_store.store.receipts import Receipt
from airflow_atomic_store.store.snapshot import Snapshot


class PostgresBackend(PostgresConnection):
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
        table_name = check_storage_table(storage_table)
        super().__init__(
            connect,
            table_name=table_name,
            secrets=secrets,
            timeouts={"lock_timeout": lock_timeout, "statement_timeout": statement_timeout},
            read_only=read_only,
        )
        self._sql = StatementCompiler(table_name, notify)
        self._ids = TableIds(table_name)

    def _id(self, table: str) -> int:
        """A written table's id, given to it on its first write."""
        return self._ids.ensure(self._cursor, table)

    def _read_id(self, table: str) -> int | None:
        """A read table's id; None (bound, it matches no row) when nothing wrote to it.

        Reads never write, not even the catalog: a read-only role can read.
        """
        return self._ids.known(self._cursor, table)

    def _schema_created(self) -> None:
        self._ids.forget()  # ids remembered from tables that were dropped are not theirs

    def written_query(self, table: str) -> tuple[bytes, list[Any]] | None:
        """The catalog lookup :meth:`count_query` would make for a table not yet seen written."""
        return self._ids.find_query(table)

    def notify_channel(self, table: str) -> str | None:
        """Per storage table and logical table, as the writes' ``pg_notify`` names it."""
        return channel_for(self._table_name, table)

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """Read-only inspection queries in one transaction (``inspect.py``)."""
        from airflow_atomic_store.store.postgres.inspect import snapshot

        return snapshot(self._cursor(many_rows=True), self._table_name, self._sql.where)

    # -- claimable sets -----------------------------------------------------

    def load_claim_sets(self) -> list[StoredSet]:
        with self._cursor(many_rows=True) as cur:
            return claim_sets.load(cur, schema.sets_table(self._table_name))

    def build_claim_set(
        self,
        claim_set: ClaimSet,
        origin: Origin,
        *,
        timeout: float | None,
        automatic_limit: int,
    ) -> StoredSet | None:
        with self._cursor() as cur:
            return claim_sets.build(
                cur,
                storage_table=self._table_name,
                where=self._sql.where,
                claim_set=claim_set,
                origin=origin,
                timeout=timeout,
                automatic_limit=automatic_limit,
                idle_seconds=IDLE_SECONDS,
            )

    def build_in_progress(self, claim_set: ClaimSet) -> bool:
        with self._cursor() as cur:
            return claim_sets.build_in_progress(cur, claim_set)

    def touch_claim_set(self, name: str) -> bool:
        if self._read_only:
            return True
        with self._cursor() as cur:
            return set_catalog.touch(cur, schema.sets_table(self._table_name), name)

    def drop_idle_claim_sets(self, idle_seconds: float) -> list[str]:
        if self._read_only:
            return []
        with self._cursor() as cur:
            return claim_sets.drop_idle(cur, self._table_name, idle_seconds)

    def ensure_record_index(self, *, timeout: float) -> bool:
        """The ``record_timestamp`` index, built the first time something orders by it.

        A read-only store builds nothing: it orders without the index.
        """
        if self._read_only:
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

    # -- primitives ---------------------------------------------------------

    def put(self, table: str, key: str, value: dict[str, Any]) -> None:
        kind, channel = self._sql.notifying("put", "put", table)
        args = (self._id(table), key, jsonb(value), *channel)
        with self._cursor() as cur:
            cur.execute(self._sql.statement(kind), args)

    def get(self, table: str, key: str) -> dict[str, Any] | None:
        args = (self._read_id(table), key)
        with self._cursor() as cur:
            row = cur.execute(self._sql.statement("get"), args).fetchone()
        return None if row is None else row[0]

    def delete(self, table: str, key: str) -> bool:
        args = (self._read_id(table), key)
        with self._cursor() as cur:
            return cur.execute(self._sql.statement("delete"), args).fetchone() is not None

    def query(
        self, table: str, where: Sequence[Condition], match: str, ordering: Ordering, limit: int
    ) -> list[Row]:
        statement, params = self._sql.compile("query", where, match, ordering)
        args = (self._read_id(table), *params, limit)
        with self._cursor(many_rows=limit > 1) as cur:
            return decoded(cur.execute(statement, args).fetchall())

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
        with self._cursor() as cur:
            row = cur.execute(statement, params).fetchone()
        return counted(row)

    def count_query(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        claim_set: ChosenSet | None = None,
    ) -> tuple[bytes, list[Any]]:
        table_id = self._read_id(table)
        return self._sql.compile_pick("count", table_id, where, match, ordering, limit, claim_set)

    def update(
        self,
        table: str,
        key: str,
        where: Sequence[Condition],
        match: str,
        mutations: Sequence[Mutation],
        receipt: Receipt | None = None,
    ) -> tuple[dict[str, Any] | None, bool]:
        apply, mutation_params = mutations_sql(mutations, "r.value")
        kind, channel = self._sql.notifying(
            "update", "update" if receipt is None else "update+receipt", table
        )
        statement, params = self._sql.compile(kind, where, match, apply=apply)
        args = (*mutation_params, self._id(table), key, *params)
        rows, recorded = self._execute(statement, args, channel, receipt, many_rows=False)
        if recorded is not receipts.NOTHING:
            return recorded[0], True
        return (rows[0][0] if rows else None), False

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
        apply, mutation_params = mutations_sql(mutations, "t.value")
        kind, channel = self._sql.notifying(
            "claim", "claim" if receipt is None else "claim+receipt", table
        )
        table_id = self._id(table)
        statement, params = self._sql.compile_pick(
            kind, table_id, where, match, ordering, limit, claim_set, apply
        )
        args = (*params, *mutation_params, table_id)
        rows, recorded = self._execute(statement, args, channel, receipt, many_rows=limit > 1)
        if recorded is not receipts.NOTHING:
            return [(key, value) for key, value in recorded], True
        return in_claim_order(rows, ordering), False

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
        """The selection's plan; ``generic`` asks for the plan a prepared claim settles on."""
        statement, params = self._sql.compile_pick(
            "pick", self._read_id(table), where, match, ordering, limit, claim_set
        )
        with self._cursor(many_rows=True) as cur:
            return explain(cur, statement, params, generic=generic)

    def upsert(
        self,
        table: str,
        key: str,
        insert_value: dict[str, Any],
        mutations: Sequence[Mutation],
        receipt: Receipt | None = None,
    ) -> tuple[tuple[bool, dict[str, Any]], bool]:
        """``((inserted, value), replayed)``.

        Without mutations it is a seed: insert if absent, else read the row, so a
        duplicate delivery writes nothing. The seed finds no row only when the
        conflicting row was committed after its snapshot was taken (``DO NOTHING``
        waited for that insert), or was deleted since; the next statement settles it.
        """
        if mutations:
            apply, mutation_params = mutations_sql(mutations, "t.value")
            args: tuple[Any, ...] = (self._id(table), key, jsonb(insert_value), *mutation_params)
            kind = "upsert"
        else:
            table_id = self._id(table)
            apply, args, kind = "", (table_id, key, jsonb(insert_value), table_id, key), "seed"
        if receipt is not None:
            kind += "+receipt"
        kind, channel = self._sql.notifying("upsert", kind, table)
        statement = self._sql.statement(kind, "", None, apply)
        for _ in range(_SEED_ATTEMPTS):
            rows, recorded = self._execute(statement, args, channel, receipt, many_rows=False)
            if recorded is not receipts.NOTHING:
                inserted, value = recorded
                return (bool(inserted), value), True
            if rows:
                value, inserted = rows[0]
                return (bool(inserted), value), False
        raise StoreUnavailableError(
            f"seed of {key!r} kept meeting a row inserted and deleted by others; try again"
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
            statement,
            args,
            receipt,
            many_rows=many_rows,
            last=channel,
        )
        return outcome.rows, outcome.recorded

    def purge_receipts(self, limit: int) -> int:
        with self._cursor() as cur:
            return receipts.purge(cur, self._table_name, limit)


#: Seed statements a seed may take while other sessions insert and delete its row.
_SEED_ATTEMPTS = 100
