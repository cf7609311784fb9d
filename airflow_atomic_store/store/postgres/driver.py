"""The PostgreSQL driver: every verb is one statement in autocommit, one typed result.

Update is ``UPDATE … WHERE guard RETURNING``: PostgreSQL re-checks the guard
against the newest row version when it had to wait for a concurrent writer, so
a guard can never pass on a stale read. Claim selects its batch in a
materialised CTE with ``FOR UPDATE SKIP LOCKED`` (losers step past rows another
claimer holds) and marks (or deletes) them in the same statement. Upsert is
``INSERT … ON CONFLICT DO UPDATE``; ``xmax = 0`` on the returned row tells an
insert from an update.

Each method translates one request into one statement (``statements.py``) and
its rows into one result; the policy around it (which claimable set serves a
claim, receipts' expiry, a retry without a dropped set) is the store's, decided
before the call. Statements find a logical table's id themselves, so a call is
one round trip whether it finds rows or not; a write to a table the catalog does
not list yet adds the name first (once per process and name) and writes again.

Idempotency receipts: the keyed statement inserts its receipt in a data-modifying
CTE beside the effect. A receipt already under the key makes that insert fail
with a unique violation, which aborts the whole statement (the effect with it);
a concurrent call with the same key waits on the key's index entry until the
first commits, then fails the same way. Either way the driver then reads the
recorded result.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.adapt import Dumper

from airflow_atomic_store.exceptions import StoreUnavailableError
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.store import contract
from airflow_atomic_store.store.contract import (
    Backlog,
    Claimed,
    ClaimRequest,
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
)
from airflow_atomic_store.store.migrations import Migrated
from airflow_atomic_store.store.notify import DEFAULT_NOTIFY, NOTIFY_MODES, channel_for
from airflow_atomic_store.store.postgres import schema
from airflow_atomic_store.store.postgres.connection import Connect, PostgresConnection
from airflow_atomic_store.store.postgres.listener import PostgresListener, PostgresReader
from airflow_atomic_store.store.postgres.statements import (
    Extras,
    Statements,
    dumps,
    jsonb,
    literal,
    mutations_sql,
    path_sql,
)
from airflow_atomic_store.store.sql import (
    Params,
    SnapshotDialect,
    SqlSnapshot,
    decoded,
    in_claim_order,
)

#: Seed statements a seed may take while other sessions insert and delete its row.
_SEED_ATTEMPTS = 100
#: Statements one name may take to get its id: the second always finds it (ids are
#: never deleted), unless the catalog itself was dropped meanwhile.
_ADD_ATTEMPTS = 3


class PostgresDriver:
    """Runs each verb as one statement on a single lazily-opened connection.

    :param notify: the write families (``store/notify.py``) that ``pg_notify``
        their table's channel in the same statement.
    """

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
        self._table_name = self.storage_table = check_storage_table(storage_table)
        #: Logical tables this process has seen in the catalog: a write to one of them
        #: goes straight to its statement (which checks the catalog itself).
        self._listed: set[str] = set()
        self.connection = PostgresConnection(
            connect,
            table_name=self._table_name,
            secrets=secrets,
            timeouts={"lock_timeout": lock_timeout, "statement_timeout": statement_timeout},
            read_only=read_only,
            on_schema_created=self._listed.clear,
        )
        self._cursor = self.connection.cursor
        self._sql = Statements(self._table_name)
        self._notify = notify

    # -- plain verbs ------------------------------------------------------------------

    def put(self, table: str, key: str, value: dict[str, Any]) -> None:
        extras, params = self._extras("put", table, False)
        statement = self._sql.put(extras)
        params.update(table=table, key=key, value=jsonb(value))
        for _ in range(2):
            self._list(table)
            with self._cursor() as cur:
                if cur.execute(statement, params).rowcount:
                    return
            self._listed.discard(table)  # the store was reset meanwhile: list it again
        raise _reset_meanwhile(table)

    def get(self, table: str, key: str) -> dict[str, Any] | None:
        with self._cursor() as cur:
            row = cur.execute(self._sql.queries["get"], {"table": table, "key": key}).fetchone()
        return None if row is None else row[0]

    def get_many(self, table: str, keys: Collection[str]) -> dict[str, dict[str, Any]]:
        params = {"table": table, "keys": list(keys)}
        with self._cursor(many_rows=True) as cur:
            rows = cur.execute(self._sql.queries["get_many"], params).fetchall()
        return {key: value for key, value in rows}

    def delete(self, table: str, key: str) -> bool:
        with self._cursor() as cur:
            deleted = cur.execute(self._sql.queries["delete"], {"table": table, "key": key})
            return deleted.fetchone() is not None

    def query(self, selection: Selection) -> list[Row]:
        where_sql, where = self._sql.where.compile(selection.where, selection.match)
        statement = self._sql.query(where_sql, selection.ordering)
        params = {**where, "table": selection.table, "limit": selection.limit}
        with self._cursor(many_rows=selection.limit > 1) as cur:
            return decoded(cur.execute(statement, params).fetchall())

    def count(self, selection: Selection) -> Backlog:
        statement, params = self.count_query(selection)
        with self._cursor() as cur:
            return Backlog.from_row(cur.execute(statement, params).fetchone())

    # -- primitives -----------------------------------------------------------------

    def update(self, request: UpdateRequest) -> Updated:
        apply, params = mutations_sql(request.mutations, "r.value")
        extras, head = self._extras("update", request.table, request.receipt is not None)
        where_sql, where = self._sql.where.compile(request.where, request.match)
        statement = self._sql.update(where_sql, apply, extras)
        params = {**head, **params, **where, "table": request.table, "key": request.key}
        rows, recorded = self._keyed(statement, params, request.receipt, many_rows=False)
        if recorded is not _NOTHING:
            return Updated(recorded[0], replayed=True)
        return Updated(rows[0][0] if rows else None)

    def claim(self, request: ClaimRequest) -> Claimed:
        selection = request.selection
        apply: str | None = None  # a delete-claim marks nothing
        params: Params = {}
        if request.mode == "mark":
            apply, params = mutations_sql(request.mutations, "t.value")
        extras, head = self._extras("claim", selection.table, request.receipt is not None)
        archive = request.archive_table
        if archive is not None:
            extras = Extras(extras.receipt, extras.notify, archive=True)
            head["archive"] = archive
        where_sql, where = self._sql.selection_where(
            selection.where, selection.match, selection.claim_set
        )
        statement = self._sql.claim(where_sql, selection.ordering, selection.limit, apply, extras)
        params = {**head, **params, **where, "table": selection.table}
        for _ in range(2):
            if archive is not None:
                self._list(archive)
            rows, recorded = self._keyed(
                statement, params, request.receipt, many_rows=selection.limit > 1
            )
            if recorded is not _NOTHING:
                return Claimed([(key, value) for key, value in recorded], replayed=True)
            if not rows or rows[-1][0] is not None:
                return Claimed(in_claim_order(rows, selection.ordering))
            self._listed.discard(archive or "")  # the archive is not listed: list it again
        raise _reset_meanwhile(archive or selection.table)

    def upsert(self, request: UpsertRequest) -> Upserted:
        """Without mutations it is a seed: insert if absent, else read the row, so a
        duplicate delivery writes nothing. The seed finds no row when the table is not
        listed, when the conflicting row was committed after its snapshot was taken
        (``DO NOTHING`` waited for that insert), or was deleted since; the next
        statement settles it.
        """
        table = request.table
        extras, head = self._extras("upsert", table, request.receipt is not None)
        params: Params = {}
        if request.mutations:
            apply, params = mutations_sql(request.mutations, "t.value")
            statement = self._sql.upsert(apply, extras)
        else:
            statement = self._sql.seed(extras)
        params = {**head, **params, "table": table, "key": request.key}
        params["value"] = jsonb(request.insert_value)
        for _ in range(_SEED_ATTEMPTS):
            self._list(table)
            rows, recorded = self._keyed(statement, params, request.receipt, many_rows=False)
            if recorded is not _NOTHING:
                inserted, stored = recorded
                return Upserted(bool(inserted), stored, replayed=True)
            if rows:
                stored, inserted = rows[0]
                return Upserted(bool(inserted), stored)
            self._listed.discard(table)  # perhaps reset meanwhile: list it again
        raise StoreUnavailableError(
            f"seed of {request.key!r} kept meeting a row inserted and deleted by others; try again"
        )

    # -- many rows per call (issue 42; ``statements.py`` says how) ------------------------

    def upsert_many(self, request: UpsertManyRequest) -> UpsertedMany:
        """One statement however many items; the table listed first if this process has
        not seen it (an unlisted table inserts nothing: listed, and once more)."""
        table, receipt = request.table, request.receipt
        mutating = any(item.mutations for item in request.items)
        notify = "upsert" in self._notify
        statement = self._sql.upsert_many(mutating, receipt is not None, notify)
        params: Params = {
            "keys": [item.key for item in request.items],
            "values": dumps([item.insert_value for item in request.items]),  # one encode
            "table": table,
        }
        if mutating:
            params["mutations"] = dumps(
                {
                    item.key: [mutation.to_json() for mutation in item.mutations]
                    for item in request.items
                    if item.mutations
                }
            )
        if notify:
            params["channel"] = channel_for(self._table_name, table)
        for _ in range(2):
            self._list(table)
            rows, recorded = self._keyed(statement, params, receipt, many_rows=True)
            if recorded is not _NOTHING:
                return UpsertedMany(frozenset(recorded), replayed=True)
            listed, inserted = rows[0][0], rows[0][1]
            if listed:
                return UpsertedMany(frozenset(inserted))
            self._listed.discard(table)  # the store was reset meanwhile: list it again
        raise _reset_meanwhile(table)

    def update_many(self, request: UpdateManyRequest) -> UpdatedMany:
        """Planned for each call (``prepare=False``): a generic plan cached early, while
        the table was a page or two, scanned it per key ever after as it grew."""
        where_sql, where = self._sql.where.compile(request.where, request.match)
        apply, params = mutations_sql(request.mutations, "t.value")
        archive = request.archive_table
        # Rows that move to an archive leave the table: no waiter there can come true, and
        # (as ``retire``'s archive) the archive's new rows are not announced.
        notify = "update" in self._notify and archive is None
        statement = self._sql.update_many(
            where_sql, apply, request.receipt is not None, notify, archive is not None
        )
        params = {**params, **where, "table": request.table, "keys": sorted(request.keys)}
        if notify:
            params["channel"] = channel_for(self._table_name, request.table)
        if archive is not None:
            params["archive"] = archive
        for _ in range(2):
            if archive is not None:
                self._list(archive)
            rows, recorded = self._keyed(
                statement, params, request.receipt, many_rows=True, prepare=False
            )
            if recorded is not _NOTHING:
                return UpdatedMany(frozenset(recorded), replayed=True)
            if not rows or rows[-1][0] is not None:
                return UpdatedMany(frozenset(row[0] for row in rows))
            self._listed.discard(archive or "")  # the archive is not listed: list it again
        raise _reset_meanwhile(archive or request.table)

    def explain_claim(self, selection: Selection, *, generic: bool = False) -> str:
        """The selection's plan; ``generic`` asks for the plan a prepared claim settles on."""
        statement, params = self._selection("pick", selection)
        with self._cursor(many_rows=True) as cur:
            return _explain(cur, statement, params, generic=generic)

    def purge_receipts(self, limit: int) -> int:
        with self._cursor() as cur:
            return cur.execute(self._sql.queries["purge_receipts"], {"limit": limit}).rowcount

    def migrate(self) -> Migrated:
        return self.connection.migrate()

    def close(self) -> None:
        self.connection.close()

    # -- claimable sets (``schema.py``) ------------------------------------------------

    def load_claim_sets(self) -> list[StoredSet]:
        with self._cursor(many_rows=True) as cur:
            return schema.load_sets(cur, self._table_name)

    def build_claim_set(self, claim_set: ClaimSet) -> StoredSet:
        with self._cursor() as cur:
            return schema.build_set(cur, self._table_name, claim_set)

    def drop_claim_set(self, name: str) -> bool:
        with self._cursor() as cur:
            return schema.drop_set(cur, self._table_name, name)

    # -- notifications: River's ``GetListener`` capability ----------------------------

    def notifications(self) -> PostgresDriver:
        return self

    def channel(self, table: str) -> str:
        """The channel the writes to ``table`` notify (per storage table and table)."""
        return channel_for(self._table_name, table)

    def listener(self, connect_args: dict[str, Any]) -> PostgresListener:
        return PostgresListener(connect_args)

    def reader(self, connect_args: dict[str, Any]) -> PostgresReader:
        return PostgresReader(connect_args, self)

    def count_query(self, selection: Selection) -> tuple[bytes, dict[str, Any]]:
        """A selection's capped count, by table name: a reader runs it on its own
        connection."""
        return self._selection("count", selection)

    def get_changed_query(
        self, table: str, seen: Mapping[str, str | None]
    ) -> tuple[bytes, dict[str, Any]]:
        """Of ``seen``'s keys, the rows whose version (``xmin``: new at every write) is not
        the one given, by table name: a reader runs it on its own connection."""
        params = {"table": table, "keys": list(seen), "seen": list(seen.values())}
        return self._sql.queries["get_changed_by_name"], params

    # -- inspection -------------------------------------------------------------------

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """Read-only inspection queries in one ``REPEATABLE READ READ ONLY`` transaction:
        every figure of one call comes from the same snapshot, and the server itself
        refuses a write inside it."""
        cursor, find = self._cursor(many_rows=True), self._sql.queries["find_table"]
        rows_table = sql.Identifier(self._table_name).as_string(None)
        catalog = sql.Identifier(schema.tables_catalog_name(self._table_name)).as_string(None)
        receipts = sql.Identifier(f"{self._table_name}_receipts").as_string(None)

        @contextmanager
        def opened() -> Iterator[Snapshot]:
            with cursor as cur, cur.connection.transaction():
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

                def table_id(table: str) -> int | None:
                    row = cur.execute(find, {"table": table}).fetchone()
                    return None if row is None else int(row[0])

                yield SqlSnapshot(
                    _SNAPSHOT, cur, rows_table, self._sql.where, table_id, catalog, receipts
                )

        return opened()

    # -- helpers ----------------------------------------------------------------------

    def _extras(self, family: str, table: str, keyed: bool) -> tuple[Extras, Params]:
        """The write's optional parts, and the parameters its notification takes."""
        if family not in self._notify:
            return Extras(receipt=keyed), {}
        return Extras(receipt=keyed, notify=True), {"channel": channel_for(self._table_name, table)}

    def _list(self, table: str) -> None:
        """Give ``table`` its id in the catalog unless this process saw it listed."""
        if table in self._listed:
            return
        with self._cursor() as cur:
            for _ in range(_ADD_ATTEMPTS):
                if cur.execute(self._sql.queries["add_table"], {"table": table}).fetchone():
                    self._listed.add(table)
                    return
        raise StoreUnavailableError(f"could not give the logical table {table!r} an id; try again")

    def _selection(self, kind: str, selection: Selection) -> tuple[bytes, dict[str, Any]]:
        where_sql, where = self._sql.selection_where(
            selection.where, selection.match, selection.claim_set
        )
        statement = self._sql.selection(kind, where_sql, selection.ordering, selection.limit)
        return statement, {**where, "table": selection.table}

    def _keyed(
        self,
        statement: bytes,
        params: Params,
        receipt: Receipt | None,
        *,
        many_rows: bool,
        prepare: bool | None = None,
    ) -> tuple[list[Any], Any]:
        """A write's rows, and what an earlier call under its key recorded (or ``_NOTHING``).

        On a receipt conflict the recorded result is read instead; an expired receipt
        is removed and the statement runs again: after its retention a key is new.
        """
        if receipt is None:
            with self._cursor(many_rows=many_rows) as cur:
                return cur.execute(statement, params, prepare=prepare).fetchall(), _NOTHING
        params = {
            **params,
            "receipt_key": receipt.key,
            "receipt_primitive": receipt.primitive,
            "receipt_table": receipt.table,
            "receipt_target": receipt.target,
            "receipt_max_bytes": contract.MAX_RESULT_BYTES,
            "receipt_retention": receipt.retention,
        }
        conflict = f"{self._table_name}_receipts_pkey"
        while True:
            with self._cursor(many_rows=many_rows) as cur:
                try:
                    return cur.execute(statement, params, prepare=prepare).fetchall(), _NOTHING
                except psycopg.errors.UniqueViolation as exc:
                    if exc.diag.constraint_name != conflict:
                        raise
                found = self._recorded(cur, receipt)
                if found is not None:
                    return [], found

    def _recorded(self, cursor: psycopg.Cursor[Any], receipt: Receipt) -> Any:
        """The recorded raw result, or None when the receipt has expired (it is then
        removed) or was purged meanwhile; ``IdempotencyKeyError`` for another use."""
        key = {"receipt_key": receipt.key}
        row = cursor.execute(self._sql.queries["read_receipt"], key).fetchone()
        if row is None:
            return None
        primitive, table_name, target, result, expired = row
        if expired:
            cursor.execute(self._sql.queries["forget_expired_receipt"], key)
            return None
        receipt.check_reuse(primitive, table_name, target)
        return result


#: ``_keyed``'s "nothing was recorded before: the statement ran".
_NOTHING: Any = object()


def _reset_meanwhile(table: str) -> StoreUnavailableError:
    """A write that found its table unlisted twice: the store was reset around it.
    Nothing was written, so it is safe to make again."""
    return StoreUnavailableError(
        f"the store's tables were reset while writing to {table!r}; nothing was written; try again"
    )


# -- inspection's dialect ----------------------------------------------------------------


def _execute(cursor: psycopg.Cursor[Any], statement: str, params: Params) -> list[Any]:
    # With parameters (even none) psycopg parses placeholders and undoes literal()'s %%.
    return cursor.execute(statement.encode(), params).fetchall()


def _aware(moment: datetime) -> datetime:
    return moment  # timestamptz arrives as an aware datetime


def _value(value: dict[str, Any]) -> dict[str, Any]:
    return value  # jsonb arrives decoded


_SNAPSHOT = SnapshotDialect(
    placeholder="%({})s",
    string_type="string",
    byte_order=' COLLATE "C"',
    path_sql=path_sql,
    literal=literal,
    execute=_execute,
    parse_time=_aware,
    parse_value=_value,
    table_column="table_id",
    table_counts=(
        "SELECT t.name, count(*) FROM {table} AS r JOIN {tables} AS t ON t.id = r.table_id "
        "GROUP BY t.name"
    ),
    time_cast="::timestamptz",
    minutes_since="floor(extract(epoch FROM {column} - {mark}) / 60)::bigint",
)


# -- a claim selection's plan, custom or generic -----------------------------------------

_EXPLAINED = "atomic_store_explain_claim"
_PREPARED = "SELECT 1 FROM pg_prepared_statements WHERE name = %(name)s"


@dataclass(frozen=True)
class _Positional:
    """The ``n``-th parameter of a ``PREPARE``d statement, written ``$n``."""

    number: int


class _PositionalDumper(Dumper):
    """Writes a :class:`_Positional` as ``$n``, so psycopg's own client-side binding
    (its placeholder grammar, ``%%`` included) turns a ``%(name)s`` statement into the
    ``$n`` text ``PREPARE`` takes."""

    def dump(self, obj: Any) -> bytes:
        return f"${obj.number}".encode()

    def quote(self, obj: Any) -> bytes:
        return self.dump(obj)


def _explain(cur: psycopg.Cursor[Any], statement: bytes, params: Params, *, generic: bool) -> str:
    """``EXPLAIN`` of ``statement``; ``generic``: the plan made without the parameters' values.

    PostgreSQL settles on a generic plan for a statement it has run five times, so
    that plan shows whether an index is chosen from the statement text alone.
    """
    selection = sql.SQL(statement.decode())
    if not generic:
        rows = cur.execute(sql.SQL("EXPLAIN {}").format(selection), params).fetchall()
        return "\n".join(row[0] for row in rows)
    # EXPLAIN EXECUTE takes no bound parameters: its arguments are literals, which
    # a client-side cursor on the same connection quotes as psycopg does.
    explained = sql.Identifier(_EXPLAINED)
    execute = sql.SQL("EXPLAIN EXECUTE {}").format(explained)
    if params:
        arguments = sql.SQL(", ").join(sql.Placeholder(name) for name in params)
        execute = sql.SQL("{}({})").format(execute, arguments)
    positions = {name: _Positional(number) for number, name in enumerate(params, start=1)}
    try:
        with cur.connection.transaction(), psycopg.ClientCursor(cur.connection) as client:
            client.adapters.register_dumper(_Positional, _PositionalDumper)
            client.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            client.execute(sql.SQL("PREPARE {} AS {}").format(explained, selection), positions)
            rows = client.execute(execute, params).fetchall()
    finally:
        if cur.execute(_PREPARED, {"name": _EXPLAINED}).fetchone() is not None:
            cur.execute(sql.SQL("DEALLOCATE PREPARE {}").format(explained))
    return "\n".join(row[0] for row in rows)
