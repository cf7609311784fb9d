"""PostgreSQL's many-rows verbs: one statement per call, however many rows.

``upsert_many`` binds the call's keys as one ``text[]`` and their values as one
``jsonb`` array (``ROWS FROM`` zips them, ``WITH ORDINALITY`` numbers them), so
10,000 items are one round trip and one statement, as pgmq's ``send_batch`` binds
a ``jsonb[]``. Rows are inserted in key order ("C" collation, the rows table's):
two calls over overlapping keys then wait for each other's keys in the same order
and never deadlock. Each row's ``created_at`` is the statement's start plus its
item's position in microseconds, so a queue takes the items of one call in the
order they were given (FIFO), whatever their keys.

An item with mutations, when its row exists, gets them through
``atomic_store_apply_v1`` (the reference semantics, errors included: a mutation
that cannot apply fails the whole statement). The items' mutations are bound as
one ``jsonb`` object by key, which ``ON CONFLICT DO UPDATE`` looks each conflicting
row up in.

``update_many`` looks each key up by the primary key and locks its row, in key order,
judges ``where`` on the locked (newest) version of each row on its own, then updates
the rows that passed (or, with an archive table, deletes them and writes them there
with their new value) in the same statement: the claim's two steps, by key and
without ``SKIP LOCKED``.

An ``update_many`` in place notifies the table's channel as the one-row update does;
one that archives does not (see there). Both verbs write their receipt in the same
statement as their effect, as the one-row verbs do (``statements.py``): a key that
already has one aborts the statement and its recorded result is returned instead.
And both take the table's id from the tables catalog (``held``), so an id gone stale
after a reset of the store writes nothing and the call is made once more with the
new id (``tables.py``).

``update_many`` is planned for each call (``prepare=False``): a cached generic plan is
made once, early, and one made while the table was a page or two scanned it per key
ever after as it grew; a plan for the call's own keys and the table's size costs less
than one such scan. ``upsert_many``, whose only lookup is its conflict arbiter, stays
prepared.

``upsert_many``'s parameters are named. ``update_many`` embeds the compiled
``where`` and mutation SQL, whose placeholders are positional: its parameters are
put in text order by :func:`_update_many_params`, right below its pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import sql

from airflow_atomic_store.store.compiler import WhereCompiler
from airflow_atomic_store.store.notify import channel_for
from airflow_atomic_store.store.postgres import receipts, schema, tables
from airflow_atomic_store.store.postgres.jsonb import dumps
from airflow_atomic_store.store.postgres.mutation_sql import mutations_sql
from airflow_atomic_store.store.postgres.queries import NamedQueries
from airflow_atomic_store.store.receipts import Receipt
from airflow_atomic_store.store.requests import (
    UpdatedMany,
    UpdateManyRequest,
    UpsertedMany,
    UpsertManyRequest,
)

Cursor = Callable[..., AbstractContextManager[psycopg.Cursor[Any]]]

# -- upsert_many ---------------------------------------------------------------------------

#: The call's items, numbered in the order given; keys in the rows table's collation.
_INPUT = sql.SQL(
    'input AS MATERIALIZED (SELECT i.key COLLATE "C" AS key, i.value, i.ord '
    "FROM ROWS FROM (unnest(%(keys)s::text[]), jsonb_array_elements(%(values)s::jsonb)) "
    "WITH ORDINALITY AS i(key, value, ord))"
)
#: The id the process holds, if it is still its table's (one row) or not (none).
_HELD = sql.SQL(
    "held AS (SELECT c.id FROM {tables} AS c WHERE c.id = %(table_id)s AND c.name = %(table)s)"
)
_INSERT = sql.SQL(
    "INSERT INTO {rows} AS t (table_id, key, value, created_at, record_timestamp) "
    "SELECT held.id, i.key, i.value, {stamp}, {stamp} FROM input AS i, held ORDER BY i.key"
)
_STAMP = sql.SQL("statement_timestamp() + (i.ord - 1) * interval '1 microsecond'")
#: Seeds only: a row that exists is left alone, and only inserted rows come back.
_SEED = sql.SQL("effect AS ({insert} ON CONFLICT (table_id, key) DO NOTHING RETURNING t.key)")
#: Some items carry mutations (``%(mutations)s``: a jsonb object, by key): those rows
#: that exist get them; the others are left alone (the ``WHERE`` of ``DO UPDATE``).
_MUTATE = sql.SQL(
    "effect AS ({insert} ON CONFLICT (table_id, key) DO UPDATE "
    "SET value = {apply}(t.value, %(mutations)s::jsonb -> t.key), "
    "record_timestamp = clock_timestamp() "
    "WHERE jsonb_exists(%(mutations)s::jsonb, t.key) "
    "RETURNING t.key, (t.xmax = 0) AS inserted)"
)
_INSERTED = {
    False: sql.SQL("SELECT key FROM effect"),
    True: sql.SQL("SELECT key FROM effect WHERE inserted"),
}
_RECEIPT = sql.SQL(
    "receipt AS (INSERT INTO {receipts} "
    "(idempotency_key, primitive, table_name, target, result, expires_at) "
    "SELECT %(receipt_key)s, %(receipt_primitive)s, %(table)s, %(receipt_target)s, "
    "atomic_store_receipt_v1(to_jsonb(ARRAY({recorded})), %(receipt_max_bytes)s), "
    "clock_timestamp() + make_interval(secs => %(receipt_retention)s) FROM held)"
)
_NOTIFIED = sql.SQL(
    "notified AS (SELECT pg_notify(%(channel)s, '') AS sent WHERE EXISTS (SELECT FROM effect))"
)
_UPSERT_RESULT = sql.SQL("SELECT EXISTS (SELECT FROM held), ARRAY({inserted}){notified}")

# -- update_many ---------------------------------------------------------------------------

#: Parameters (text order): the keys (sorted), the table id, the where's; with an archive,
#: its id and name. Each key is one primary-key lookup, fenced (``OFFSET 0``) so that the
#: planner cannot trade them for a scan of the table's rows (with ``key = ANY(…)`` and
#: statistics that lagged a growing table it scanned every row of the logical table). A
#: lookup locks its row, and the guard is judged on the locked (newest) version. The keys
#: come sorted in code point order, the "C" collation's, and are looked up (so locked) in
#: that order, as ``upsert_many`` inserts: no deadlock between them.
_PICK = sql.SQL(
    "picked AS MATERIALIZED (SELECT r.table_id, r.key FROM unnest(%s::text[]) AS k(key) "
    "CROSS JOIN LATERAL (SELECT t.table_id, t.key, t.value FROM {rows} AS t "
    "WHERE t.table_id = %s AND t.key = k.key OFFSET 0) AS r "
    "WHERE {where}{archive_held} FOR UPDATE OF r)"
)
_ARCHIVE_HELD = sql.SQL(" AND EXISTS (SELECT FROM {tables} AS c WHERE c.id = %s AND c.name = %s)")
#: Joined on the picked rows' own ``(table_id, key)``, with no constant for a scan of
#: the logical table's rows to start from: the primary key is the plan. Parameters: the
#: mutations'.
_UPDATE_PICKED = sql.SQL(
    "effect AS (UPDATE {rows} AS t SET value = {apply}, record_timestamp = clock_timestamp() "
    "FROM picked WHERE t.table_id = picked.table_id AND t.key = picked.key RETURNING t.key)"
)
#: Parameters: the mutations', the archive's id. The rows leave with their new value,
#: which replaces an archived row of the same key (as ``retire`` archives).
_ARCHIVE_PICKED = sql.SQL(
    "effect AS (DELETE FROM {rows} AS t USING picked WHERE t.table_id = picked.table_id "
    "AND t.key = picked.key RETURNING t.key, {apply} AS value), "
    "archived AS (INSERT INTO {rows} AS a (table_id, key, value) SELECT %s, key, value "
    "FROM effect ON CONFLICT (table_id, key) DO UPDATE "
    "SET value = EXCLUDED.value, record_timestamp = clock_timestamp())"
)
#: Parameters: ``receipts.parameters``, then the held id and name of the table.
_UPDATE_RECEIPT = sql.SQL(
    "receipt AS (INSERT INTO {receipts} "
    "(idempotency_key, primitive, table_name, target, result, expires_at) "
    "SELECT %s, %s, %s, %s, "
    "atomic_store_receipt_v1(to_jsonb(ARRAY(SELECT key FROM effect)), %s), "
    "clock_timestamp() + make_interval(secs => %s) "
    "FROM {tables} AS c WHERE c.id = %s AND c.name = %s)"
)
#: Parameter: the channel.
_UPDATE_NOTIFIED = sql.SQL(
    "notified AS (SELECT pg_notify(%s, '') AS sent WHERE EXISTS (SELECT FROM effect))"
)


def _update_many_params(
    table_id: int,
    request: UpdateManyRequest,
    where_params: Sequence[Any],
    apply_params: Sequence[Any],
    archive: tuple[int, str] | None,
    channel: str | None,
) -> tuple[Any, ...]:
    """``update_many``'s parameters in the order its text holds their placeholders."""
    receipt = request.receipt
    picked = (sorted(request.keys), table_id, *where_params, *(archive or ()))
    effect = (*apply_params, *(() if archive is None else (archive[0],)))
    keyed = () if receipt is None else (*receipts.parameters(receipt), table_id, request.table)
    return (*picked, *effect, *keyed, *((channel,) if channel else ()))


class PostgresBulk:
    """One store's ``upsert_many`` and ``update_many``, on its backend's connection and ids."""

    def __init__(
        self,
        *,
        cursor: Cursor,
        ids: tables.TableIds,
        storage_table: str,
        notify: frozenset[str],
        where: WhereCompiler,
        queries: NamedQueries,
    ) -> None:
        self._cursor, self._ids, self._storage_table = cursor, ids, storage_table
        self._notify, self._where, self._queries = notify, where, queries
        self._names = {
            "rows": sql.Identifier(storage_table),
            "tables": sql.Identifier(schema.tables_catalog_name(storage_table)),
            "receipts": sql.Identifier(receipts.receipts_name(storage_table)),
        }
        self.upsert_statement = lru_cache(maxsize=8)(self._upsert_statement)
        self.update_statement = lru_cache(maxsize=256)(self._update_statement)

    # -- upsert_many -------------------------------------------------------------------

    def upsert_many(self, request: UpsertManyRequest) -> UpsertedMany:
        table, receipt = request.table, request.receipt
        mutating = any(item.mutations for item in request.items)
        notify = "upsert" in self._notify
        statement = self.upsert_statement(mutating, receipt is not None, notify)
        params: dict[str, Any] = {
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
            params["channel"] = channel_for(self._storage_table, table)
        for _ in range(2):
            params["table_id"] = self._ids.ensure(self._cursor, table)
            rows, recorded = self._run(statement, params, receipt)
            if recorded is not receipts.NOTHING:
                return UpsertedMany(frozenset(recorded), replayed=True)
            held, inserted = rows[0][0], rows[0][1]
            if held:
                return UpsertedMany(frozenset(inserted))
            self._ids.forget()  # the store was reset: nothing was written under the old id
        raise tables.reset_meanwhile(table)

    def _upsert_statement(self, mutating: bool, keyed: bool, notify: bool) -> bytes:
        insert = _INSERT.format(stamp=_STAMP, **self._names)
        effect = (_MUTATE if mutating else _SEED).format(
            insert=insert, apply=sql.Identifier(schema.APPLY_FUNCTION)
        )
        ctes = [_INPUT, _HELD.format(**self._names), effect]
        if keyed:
            ctes.append(_RECEIPT.format(recorded=_INSERTED[mutating], **self._names))
        if notify:
            ctes.append(_NOTIFIED)
        final = _UPSERT_RESULT.format(
            inserted=_INSERTED[mutating],
            notified=sql.SQL(", (SELECT count(*) FROM notified)" if notify else ""),
        )
        return _finish(ctes, final)

    # -- update_many -------------------------------------------------------------------

    def update_many(self, request: UpdateManyRequest) -> UpdatedMany:
        where_sql, where_params = self._where.compile(request.where, request.match)
        archiving = request.archive_table is not None
        apply, apply_params = mutations_sql(request.mutations, "t.value")
        # Rows that move to an archive leave the table: no waiter there (a count of
        # claimable rows, a row's guard) can come true, and, as ``retire``'s archive, the
        # archive table's new rows are not announced. So only an update in place notifies.
        notify = "update" in self._notify and not archiving
        statement = self.update_statement(
            where_sql, apply, request.receipt is not None, notify, archiving
        )
        channel = channel_for(self._storage_table, request.table) if notify else None
        names = (request.table, *filter(None, (request.archive_table,)))

        def update() -> UpdatedMany:
            table_id = self._ids.ensure(self._cursor, request.table)
            archive = None
            if request.archive_table is not None:
                archive_id = self._ids.ensure(self._cursor, request.archive_table)
                archive = (archive_id, request.archive_table)
            params = _update_many_params(
                table_id, request, where_params, apply_params, archive, channel
            )
            rows, recorded = self._run(statement, params, request.receipt, prepare=False)
            if recorded is not receipts.NOTHING:
                return UpdatedMany(frozenset(recorded), replayed=True)
            return UpdatedMany(frozenset(row[0] for row in rows))

        result = update()
        if (
            not result.updated
            and not result.replayed
            and not self._ids.current(self._cursor, names)
        ):
            return update()  # an id went stale (a reset of the store): once more, with new ids
        return result

    def _update_statement(
        self, where_sql: str, apply: str, keyed: bool, notify: bool, archiving: bool
    ) -> bytes:
        archive_held = _ARCHIVE_HELD.format(**self._names) if archiving else sql.SQL("")
        ctes: list[sql.Composable] = [
            _PICK.format(where=sql.SQL(where_sql), archive_held=archive_held, **self._names),
            (_ARCHIVE_PICKED if archiving else _UPDATE_PICKED).format(
                apply=sql.SQL(apply), **self._names
            ),
        ]
        if keyed:
            ctes.append(_UPDATE_RECEIPT.format(**self._names))
        final = "SELECT key FROM effect"
        if notify:
            ctes.append(_UPDATE_NOTIFIED)
            final += " LEFT JOIN notified ON true"
        return _finish(ctes, sql.SQL(final))

    # -- running a keyed statement ---------------------------------------------------------

    def _run(
        self, statement: bytes, params: Any, receipt: Receipt | None, *, prepare: bool = True
    ) -> tuple[list[Any], Any]:
        """The statement's rows, or what an earlier call under the receipt's key recorded.

        As ``receipts.run_keyed``: a receipt already under the key aborts the statement
        (nothing applied) and its result is read instead; an expired one is removed and
        the statement runs again. Named parameters get the receipt's by name.
        """
        if receipt is not None and isinstance(params, dict):
            params.update(
                receipt_key=receipt.key,
                receipt_primitive=receipt.primitive,
                receipt_target=receipt.target,
                receipt_max_bytes=receipt.max_result_bytes,
                receipt_retention=receipt.retention,
            )
        while True:
            with self._cursor(many_rows=True) as cur:
                try:
                    executed = cur.execute(statement, params, prepare=None if prepare else False)
                    return executed.fetchall(), receipts.NOTHING
                except psycopg.Error as exc:
                    if receipt is None or not receipts.is_conflict(exc, self._storage_table):
                        raise
                found = receipts.recorded(cur, self._queries, receipt)
                if found is not None:
                    return [], found


def _finish(ctes: list[sql.Composable], final: sql.Composable) -> bytes:
    statement = sql.SQL("WITH {} {}").format(sql.SQL(", ").join(ctes), final)
    return statement.as_string(None).encode()
