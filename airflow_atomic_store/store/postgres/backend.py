"""The PostgreSQL backend: every primitive is one statement in autocommit.

Update is ``UPDATE … WHERE guard RETURNING``: PostgreSQL re-checks the guard
against the newest row version when it had to wait for a concurrent writer,
so a guard can never pass on a stale read. Claim selects its batch in a
materialised CTE with ``FOR UPDATE SKIP LOCKED`` (losers step past rows
another claimer holds) and marks them in the same statement. Upsert is
``INSERT … ON CONFLICT DO UPDATE``; ``xmax = 0`` on the returned row tells an
insert from an update.

A process holds each logical table's id (``tables.py``); after a reset of the
store's tables by someone else those ids match nothing. A write that inserts checks
its id in the catalog within its statement, and a call that found nothing checks
it afterwards: a stale id is reloaded and the call made once more.

The backend *has* a connection (``connection.py``: opened lazily, schema
ensured, errors translated) and a statement compiler (``statements.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, TypeVar

from airflow_atomic_store.exceptions import StoreUnavailableError
from airflow_atomic_store.store.backend import check_storage_table, decoded, in_claim_order
from airflow_atomic_store.store.delegation import delegated
from airflow_atomic_store.store.migrations import Migrated
from airflow_atomic_store.store.notify import DEFAULT_NOTIFY, NOTIFY_MODES, channel_for
from airflow_atomic_store.store.postgres import receipts, tables
from airflow_atomic_store.store.postgres.bulk import PostgresBulk
from airflow_atomic_store.store.postgres.connection import Connect, PostgresConnection
from airflow_atomic_store.store.postgres.explain import explain
from airflow_atomic_store.store.postgres.jsonb import jsonb
from airflow_atomic_store.store.postgres.listener import PostgresListener, PostgresReader
from airflow_atomic_store.store.postgres.mutation_sql import mutations_sql
from airflow_atomic_store.store.postgres.set_verbs import PostgresSetVerbs
from airflow_atomic_store.store.postgres.statements import StatementCompiler
from airflow_atomic_store.store.receipts import Receipt
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

_OWNER = "PostgresBackend"


def _sets(backend: PostgresBackend) -> PostgresSetVerbs:
    return backend._sets


#: Seed statements a seed may take while other sessions insert and delete its row.
_SEED_ATTEMPTS = 100
T = TypeVar("T")


class PostgresBackend:
    """Runs each primitive as one statement on a single lazily-opened connection."""

    #: Claims select ``FOR UPDATE SKIP LOCKED``: rows others hold are stepped past.
    skips_held_rows = True

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
        self._ids = tables.TableIds(self._table_name)
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
        self._sets = PostgresSetVerbs(self.connection, self._table_name, self._sql.where)
        self._bulk = PostgresBulk(
            cursor=self._cursor,
            ids=self._ids,
            storage_table=self._table_name,
            notify=notify,
            where=self._sql.where,
            queries=self._sql.queries,
        )

    def _id(self, table: str) -> int:
        """A written table's id, given to it on its first write."""
        return self._ids.ensure(self._cursor, table)

    def _read_id(self, table: str) -> int | None:
        """A read table's id; None (bound, it matches no row) when nothing wrote to it.

        Reads never write, not even the catalog: a read-only role can read.
        """
        return self._ids.known(self._cursor, table)

    def _again_if_stale(self, call: Callable[[], T], missed: Callable[[T], bool], *names: str) -> T:
        """``call()``, made once more if it found nothing with an id gone stale (``tables.py``)."""
        return self._ids.again_if_stale(self._cursor, call, missed, names)

    # -- notifications (the waiters' capability, ``store/notify.py``) ---------
    # h40: the notifier and the waiters' shared reads; a driver carries these over.

    def notifications(self) -> PostgresBackend:
        return self

    def channel(self, table: str) -> str:
        """The channel the writes to ``table`` notify (per storage table and table)."""
        return channel_for(self._table_name, table)

    def listener(self, connect_args: dict[str, Any]) -> PostgresListener:
        return PostgresListener(connect_args)

    def reader(self, connect_args: dict[str, Any]) -> PostgresReader:
        return PostgresReader(connect_args, self)

    def count_query(self, selection: Selection) -> tuple[bytes, list[Any]]:
        return self._selection("count", selection)

    def get_changed_query(
        self, table: str, seen: Mapping[str, str | None]
    ) -> tuple[bytes, dict[str, Any]]:
        """By name: a reader runs it on its own connection, where no stale id is noticed.
        A row's version is its ``xmin``: every write of the row makes a new one."""
        params = {"table": table, "keys": list(seen), "seen": list(seen.values())}
        return self._sql.queries["get_changed_by_name"], params

    def get_many(self, table: str, keys: Collection[str]) -> dict[str, dict[str, Any]]:
        params = {"table": table, "keys": list(keys)}
        with self._cursor(many_rows=True) as cur:
            rows = cur.execute(self._sql.queries["get_many"], params).fetchall()
        return {key: value for key, value in rows}

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """Read-only inspection queries in one transaction (``inspect.py``)."""
        from airflow_atomic_store.store.postgres.inspect import snapshot

        return snapshot(self._cursor(many_rows=True), self._table_name, self._sql.where)

    # -- claimable sets (``set_verbs.py``) ------------------------------------

    load_claim_sets = delegated(PostgresSetVerbs.load_claim_sets, _sets, _OWNER)
    build_claim_set = delegated(PostgresSetVerbs.build_claim_set, _sets, _OWNER)
    build_in_progress = delegated(PostgresSetVerbs.build_in_progress, _sets, _OWNER)
    touch_claim_set = delegated(PostgresSetVerbs.touch_claim_set, _sets, _OWNER)
    drop_idle_claim_sets = delegated(PostgresSetVerbs.drop_idle_claim_sets, _sets, _OWNER)
    ensure_record_index = delegated(PostgresSetVerbs.ensure_record_index, _sets, _OWNER)
    drop_claim_set = delegated(PostgresSetVerbs.drop_claim_set, _sets, _OWNER)

    # -- plain verbs ----------------------------------------------------------

    def put(self, table: str, key: str, value: dict[str, Any]) -> None:
        """A put whose held id went stale inserts nothing (``statements._INSERT``): the
        ids are reloaded and it is made again; a second miss (reset again) raises."""
        extras, channel = self._sql.extras("put", table, keyed=False)
        statement, stored = self._sql.put(extras), jsonb(value)
        for _ in range(2):
            with self._cursor() as cur:
                args = (key, stored, self._id(table), table, *channel)
                if cur.execute(statement, args).rowcount:
                    return
            self._ids.forget()
        raise tables.reset_meanwhile(table)

    def get(self, table: str, key: str) -> dict[str, Any] | None:
        def get() -> dict[str, Any] | None:
            with self._cursor() as cur:
                row = cur.execute(self._sql.queries["get"], (self._read_id(table), key)).fetchone()
            return None if row is None else row[0]

        return self._again_if_stale(get, lambda value: value is None, table)

    def delete(self, table: str, key: str) -> bool:
        def delete() -> bool:
            args = (self._read_id(table), key)
            with self._cursor() as cur:
                return cur.execute(self._sql.queries["delete"], args).fetchone() is not None

        return self._again_if_stale(delete, lambda deleted: not deleted, table)

    def query(self, selection: Selection) -> list[Row]:
        where_sql, params = self._sql.where.compile(selection.where, selection.match)
        statement = self._sql.query(where_sql, selection.ordering)

        def query() -> list[Row]:
            args = (self._read_id(selection.table), *params, selection.limit)
            with self._cursor(many_rows=selection.limit > 1) as cur:
                return decoded(cur.execute(statement, args).fetchall())

        return self._again_if_stale(query, lambda rows: not rows, selection.table)

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
        """A count binds the table's name (the statement looks its id up: a trigger runs
        it on its own connection, where no stale id would be noticed); explain its id."""
        table = selection.table if kind == "count" else self._read_id(selection.table)
        table_filter, where_sql, params = self._sql.selection_filter(
            table, selection.where, selection.match, selection.claim_set
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
        held = (request.table,)

        def update() -> Updated:
            args = (*mutation_params, self._id(request.table), request.key, *params)
            rows, recorded = self._execute(
                statement, args, channel, request.receipt, many_rows=False, held=held
            )
            if recorded is not receipts.NOTHING:
                return Updated(recorded[0], replayed=True)
            return Updated(rows[0][0] if rows else None)

        return self._again_if_stale(
            update, lambda done: done.value is None and not done.replayed, *held
        )

    def claim(self, request: ClaimRequest) -> Claimed:
        selection = request.selection
        apply: str | None = None  # a delete-claim marks nothing
        mutation_params: Sequence[Any] = ()
        if request.mode == "mark":
            apply, mutation_params = mutations_sql(request.mutations, "t.value")
        keyed = request.receipt is not None
        extras, channel = self._sql.extras("claim", selection.table, keyed)
        if request.archive_table is not None:
            extras = replace(extras, archive=True)
        held = (selection.table, *filter(None, (request.archive_table,)))

        def claim() -> Claimed:
            table_id = self._id(selection.table)
            archive = tuple((self._id(name), name) for name in held[1:])
            table_filter, where_sql, params = self._sql.selection_filter(
                table_id,
                selection.where,
                selection.match,
                selection.claim_set,
                archive=archive[0] if archive else None,
            )
            statement = self._sql.claim(
                where_sql, selection.ordering, selection.limit, table_filter, apply, extras
            )
            args = (*params, *mutation_params, table_id, *(held_id for held_id, _ in archive))
            rows, recorded = self._execute(
                statement,
                args,
                channel,
                request.receipt,
                many_rows=selection.limit > 1,
                held=held[:1],
            )
            if recorded is not receipts.NOTHING:
                return Claimed([(key, value) for key, value in recorded], replayed=True)
            return Claimed(in_claim_order(rows, selection.ordering))

        return self._again_if_stale(claim, lambda done: not (done.rows or done.replayed), *held)

    def upsert(self, request: UpsertRequest) -> Upserted:
        """Without mutations it is a seed: insert if absent, else read the row, so a
        duplicate delivery writes nothing. The seed finds no row only when the
        conflicting row was committed after its snapshot was taken (``DO NOTHING``
        waited for that insert), or was deleted since; the next statement settles it.
        """
        table, key, value = request.table, request.key, jsonb(request.insert_value)
        extras, channel = self._sql.extras("upsert", table, request.receipt is not None)
        mutation_params: Sequence[Any] = ()
        if request.mutations:
            apply, mutation_params = mutations_sql(request.mutations, "t.value")
            statement = self._sql.upsert(apply, extras)
        else:
            statement = self._sql.seed(extras)
        for _ in range(_SEED_ATTEMPTS):
            # An insert under a stale id inserts nothing, and the receipt records nothing
            # (it reads the effect): the ids are reloaded and the next attempt uses them.
            held = (key, value, self._id(table), table)
            args = (*held, *mutation_params) if request.mutations else (*held, held[2], key)
            rows, recorded = self._execute(
                statement, args, channel, request.receipt, many_rows=False
            )
            if recorded is not receipts.NOTHING:
                inserted, stored = recorded
                return Upserted(bool(inserted), stored, replayed=True)
            if rows:
                stored, inserted = rows[0]
                return Upserted(bool(inserted), stored)
            self._ids.current(self._cursor, (table,))
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
        held: tuple[str, ...] = (),
    ) -> tuple[list[Any], Any]:
        """A write's rows, and what an earlier call under its key recorded (or ``NOTHING``),
        through ``receipts.run_keyed``. ``channel`` (the notification's, when the write
        notifies) goes last; before it, with a receipt, the id and name of the table in
        ``held``, which the receipt checks (``statements._RECORDED``).
        """
        checked = (part for name in held for part in (self._id(name), name)) if receipt else ()
        outcome = receipts.run_keyed(
            self._cursor,
            self._table_name,
            self._sql.queries,
            statement,
            args,
            receipt,
            many_rows=many_rows,
            last=(*checked, *channel),
        )
        return outcome.rows, outcome.recorded

    def purge_receipts(self, limit: int) -> int:
        with self._cursor() as cur:
            return receipts.purge(cur, self._sql.queries, limit)

    def migrate(self) -> Migrated:
        return self.connection.migrate()

    def close(self) -> None:
        self.connection.close()

    # -- many rows per call (``bulk.py``) ---------------------------------------------------

    def upsert_many(self, request: UpsertManyRequest) -> UpsertedMany:
        return self._bulk.upsert_many(request)

    def update_many(self, request: UpdateManyRequest) -> UpdatedMany:
        return self._bulk.update_many(request)
