"""The PostgreSQL backend's statements: one builder per verb, composed from named pieces.

A verb's optional parts (the idempotency receipt, the notification) are pieces
added to the statement's ``WITH`` list with psycopg's ``sql`` module; no SQL
text is edited after it is written. Identifiers are quoted by the driver
(``sql.Identifier``), the claim's limit is a ``sql.Literal``, compiled ``where``
SQL (``where.py``) is inserted whole, and every value is a bound parameter
(``%s``). Parameters follow the text's order: the effect's, then the receipt's
(``receipts.parameters``), then the notification's channel.

A statement with no optional part is the bare effect (``UPDATE … RETURNING``,
the claim's two-step ``WITH picked``): the common call pays for no CTE it does
not use.

A statement that can insert a row takes the table's id from the tables catalog
(``_HELD``: the id the process holds, and its name), so an id gone stale after a
reset of the store inserts nothing, and the backend sees it (``tables.py``). The
same check gates what an update's or a claim's receipt records, and a delete-claim's
archive: a call made with a stale id records nothing and deletes nothing, so the
call made again with the new id applies once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from psycopg import sql

from airflow_atomic_store.spec import Condition, Ordering
from airflow_atomic_store.store.claim_sets import ChosenSet
from airflow_atomic_store.store.compiler import WhereCompiler, order_sql
from airflow_atomic_store.store.notify import channel_for
from airflow_atomic_store.store.postgres import receipts, schema
from airflow_atomic_store.store.postgres.queries import NamedQueries
from airflow_atomic_store.store.postgres.where import PostgresWhere

#: The claim's selection: shared by the claim itself and ``explain_claim``.
#: The limit (validated, 1..1000) is a literal: with ``LIMIT $n`` PostgreSQL's
#: generic plan assumes a tenth of the table is wanted, is never preferred, and
#: every claim pays for planning again; with the number in the text, a prepared
#: claim is planned once per connection.
_PICK = sql.SQL(
    "SELECT r.key, r.{order_column} AS claim_order "
    "FROM {table} AS r WHERE {table_filter} AND {where} "
    "ORDER BY {order} LIMIT {limit} FOR UPDATE SKIP LOCKED"
)
#: Capped and unlocked: a trigger asks whether work is there, it never claims it.
_COUNT = sql.SQL(
    "SELECT count(*), min(CASE WHEN n = 1 THEN key END) FROM (SELECT r.key, "
    "row_number() OVER (ORDER BY {order}) AS n FROM {table} AS r "
    "WHERE {table_filter} AND {where} ORDER BY {order} LIMIT {limit}) AS matching"
)
_QUERY = sql.SQL(
    "SELECT r.key, r.value::text FROM {table} AS r WHERE r.table_id = %s AND {where} "
    "ORDER BY {order} LIMIT %s"
)
_UPDATE = sql.SQL(
    "UPDATE {table} AS r SET value = {apply}, record_timestamp = clock_timestamp() "
    "WHERE r.table_id = %s AND r.key = %s AND {where} RETURNING r.value"
)
_MARK_PICKED = sql.SQL(
    "UPDATE {table} AS t SET value = {apply}, record_timestamp = clock_timestamp() "
    "FROM picked WHERE t.table_id = %s AND t.key = picked.key "
    "RETURNING t.key, {value}, picked.claim_order"
)
#: A delete-claim removes its picked rows and returns them as they were.
_DELETE_PICKED = sql.SQL(
    "DELETE FROM {table} AS t USING picked WHERE t.table_id = %s AND t.key = picked.key "
    "RETURNING t.key, {value}, picked.claim_order"
)
#: A delete-claim with an archive copies what it deleted, in the same statement.
#: Its id is checked before anything is picked (``selection_filter``).
_ARCHIVE = sql.SQL(
    "INSERT INTO {table} AS a (table_id, key, value) SELECT %s, key, value FROM effect "
    "ON CONFLICT (table_id, key) DO UPDATE "
    "SET value = EXCLUDED.value, record_timestamp = clock_timestamp()"
)
#: The catalog entry of the id a process holds, if it is still that name's: a primary-key
#: lookup of a small, cached table. Parameters: the id, the name.
_HELD = sql.SQL("FROM {tables} AS c WHERE c.id = %s AND c.name = %s")
#: ``_HELD``'s id as an inserted row's: a stale id inserts nothing. Parameters: key, value,
#: then ``_HELD``'s. (A foreign key would take a KEY SHARE lock on the catalog row per
#: insert, and concurrent inserts into one table would share it through multixacts.)
_INSERT = sql.SQL("INSERT INTO {table} AS t (table_id, key, value) SELECT c.id, %s, %s {held}")
_UPSERT = sql.SQL(
    "{insert} ON CONFLICT (table_id, key) DO UPDATE "
    "SET value = {apply}, record_timestamp = clock_timestamp() "
    "RETURNING t.value, (t.xmax = 0) AS inserted"
)
_PUT = sql.SQL(
    "{insert} ON CONFLICT (table_id, key) DO UPDATE "
    "SET value = EXCLUDED.value, record_timestamp = clock_timestamp()"
)
#: A seed inserts the row if absent, else reads it: a duplicate delivery writes nothing.
_SEED_INSERTED = sql.SQL("{insert} ON CONFLICT (table_id, key) DO NOTHING RETURNING value")
_SEED_EFFECT = sql.SQL(
    "SELECT value, true AS inserted FROM inserted UNION ALL "
    "SELECT value, false FROM {table} WHERE table_id = %s AND key = %s "
    "AND NOT EXISTS (SELECT FROM inserted)"
)
#: With an idempotency key, the receipt is written by the same statement as the effect;
#: a receipt already under that key aborts the statement (``receipts.run_keyed``).
#: ``atomic_store_receipt_v1`` refuses a result over the receipt's size limit (a
#: parameter), so the statement fails whole (``ResultTooLargeError``).
_RECEIPT = sql.SQL(
    "INSERT INTO {receipts} (idempotency_key, primitive, table_name, target, result, expires_at) "
    "SELECT %s, %s, %s, %s, atomic_store_receipt_v1({result}, %s), "
    "clock_timestamp() + make_interval(secs => %s) {source}"
)
#: ``pg_notify`` runs once, and only when ``changed`` has rows (a write that changed
#: nothing wakes nobody); its channel is the statement's last parameter.
_NOTIFIED = sql.SQL("SELECT pg_notify(%s, '') WHERE EXISTS (SELECT FROM {changed})")

#: What each keyed verb records as its result, read from its ``effect`` CTE, and the
#: receipt's ``FROM``: a row per effect row reads ``effect`` (whose insert checked the
#: id); a scalar subquery reads the held id's catalog entry (``_HELD``), so a call made
#: with a stale id records nothing (its two parameters follow the receipt's).
_RECORDED = {
    "update": (sql.SQL("jsonb_build_array((SELECT value FROM effect))"), _HELD),
    # In claim order as this call returns it (``in_claim_order``: ties by key in
    # code point order, which is "C" collation's order for UTF-8), so a replay,
    # whatever direction it asks for, returns the first call's batch as it was.
    "claim": (
        sql.SQL(
            "COALESCE((SELECT jsonb_agg(jsonb_build_array(key, value) "
            'ORDER BY claim_order {direction}, key COLLATE "C" {direction}) FROM effect), '
            "'[]'::jsonb)"
        ),
        _HELD,
    ),
    "upsert": (sql.SQL("jsonb_build_array(inserted, value)"), sql.SQL("FROM effect")),
}


@dataclass(frozen=True)
class Extras:
    """A write's optional parts: the receipt it records, the channel it notifies."""

    receipt: bool = False
    notify: bool = False
    archive: bool = False  # a delete-claim's copy into its archive table


def _cte(name: str, body: sql.Composable, *, materialized: bool = False) -> sql.Composed:
    keyword = " AS MATERIALIZED " if materialized else " AS "
    return sql.Composed([sql.SQL(name + keyword + "("), body, sql.SQL(")")])


def _with(
    ctes: list[sql.Composable], final: sql.Composable, extras: Extras, *, changed: str
) -> sql.Composed:
    """``WITH <ctes>[, notified] <final>``.

    A CTE runs only if referenced, hence the notification's join: it has no
    column the final ``SELECT`` names.
    """
    if extras.notify:
        ctes = [*ctes, _cte("notified", _NOTIFIED.format(changed=sql.SQL(changed)))]
        final = sql.SQL("{} LEFT JOIN notified ON true").format(final)
    return sql.SQL("WITH {} {}").format(sql.SQL(", ").join(ctes), final)


class StatementCompiler:
    """One store's statements, built once per shape and cached; ``where`` compiled.

    :param table_name: the storage table (validated).
    :param notify: the write families that ``pg_notify`` their table's channel.
    """

    def __init__(self, table_name: str, notify: frozenset[str]) -> None:
        self._table_name = table_name
        self._table = sql.Identifier(table_name)
        self._receipts = sql.Identifier(receipts.receipts_name(table_name))
        self._tables = sql.Identifier(schema.tables_catalog_name(table_name))
        self._held = _HELD.format(tables=self._tables)
        self._insert = _INSERT.format(table=self._table, held=self._held)
        self._by_name = _BY_NAME.format(tables=self._tables).as_string(None)
        self._archive_filter = _ARCHIVE_FILTER.format(held=self._held).as_string(None)
        self._notify = notify
        self.where = WhereCompiler(PostgresWhere())
        self.queries = NamedQueries(table=self._table, receipts=self._receipts, tables=self._tables)
        self.put = lru_cache(maxsize=2)(self._put)
        self.update = lru_cache(maxsize=512)(self._update)
        self.claim = lru_cache(maxsize=512)(self._claim)
        self.upsert = lru_cache(maxsize=512)(self._upsert)
        self.seed = lru_cache(maxsize=4)(self._seed)
        self.selection = lru_cache(maxsize=512)(self._selection)

    def extras(self, family: str, table: str, keyed: bool) -> tuple[Extras, tuple[str, ...]]:
        """The write's optional parts, and the parameters its notification appends."""
        if family not in self._notify:
            return Extras(receipt=keyed), ()
        return Extras(receipt=keyed, notify=True), (channel_for(self._table_name, table),)

    def _receipt(self, primitive: str, ordering: Ordering | None = None) -> sql.Composed:
        result, source = _RECORDED[primitive]
        direction = sql.SQL(ordering.direction.upper() if ordering else "")
        return _RECEIPT.format(
            receipts=self._receipts,
            result=result.format(direction=direction),
            source=source.format(tables=self._tables),  # ``_HELD``'s, or none
        )

    def _finish(self, statement: sql.Composable) -> bytes:
        return statement.as_string(None).encode()

    def _put(self, extras: Extras) -> bytes:
        put = _PUT.format(insert=self._insert)
        if not extras.notify:
            return self._finish(put)
        effect = _cte("effect", sql.SQL("{} RETURNING 1").format(put))
        return self._finish(
            _with([effect], sql.SQL("SELECT 1 FROM effect"), extras, changed="effect")
        )

    def _update(self, where_sql: str, apply: str, extras: Extras) -> bytes:
        effect = _UPDATE.format(table=self._table, apply=sql.SQL(apply), where=sql.SQL(where_sql))
        return self._effect_statement(effect, "update", extras, sql.SQL("SELECT value FROM effect"))

    def _upsert(self, apply: str, extras: Extras) -> bytes:
        effect = _UPSERT.format(insert=self._insert, apply=sql.SQL(apply))
        final = sql.SQL("SELECT value, inserted FROM effect")
        return self._effect_statement(effect, "upsert", extras, final)

    def _effect_statement(
        self, effect: sql.Composed, primitive: str, extras: Extras, final: sql.Composable
    ) -> bytes:
        """The bare effect, or the effect as a CTE with the parts ``extras`` asks for."""
        if extras == Extras():
            return self._finish(effect)
        ctes: list[sql.Composable] = [_cte("effect", effect)]
        if extras.receipt:
            ctes.append(_cte("receipt", self._receipt(primitive)))
        return self._finish(_with(ctes, final, extras, changed="effect"))

    def _claim(
        self,
        where_sql: str,
        ordering: Ordering,
        limit: int,
        table_filter: str,
        apply: str | None,
        extras: Extras,
    ) -> bytes:
        """A claim: ``apply`` marks the picked rows; ``apply`` None deletes them."""
        picked = _cte(
            "picked",
            self._pick(_PICK, where_sql, ordering, limit, table_filter),
            materialized=True,
        )
        if extras == Extras():
            # Each value as its JSON text, decoded by the backend in one call for the batch.
            take = self._take(apply, sql.SQL("t.value::text"))
            return self._finish(sql.SQL("WITH {} {}").format(picked, take))
        # The CTEs that read ``effect`` (a receipt) keep the jsonb.
        ctes: list[sql.Composable] = [picked, _cte("effect", self._take(apply, sql.SQL("t.value")))]
        if extras.archive:
            ctes.append(_cte("archived", _ARCHIVE.format(table=self._table)))
        if extras.receipt:
            ctes.append(_cte("receipt", self._receipt("claim", ordering)))
        final = sql.SQL("SELECT key, value::text, claim_order FROM effect")
        return self._finish(_with(ctes, final, extras, changed="effect"))

    def _take(self, apply: str | None, value: sql.SQL) -> sql.Composed:
        """What a claim does to its picked rows: mark them (``apply``), or delete them."""
        if apply is None:
            return _DELETE_PICKED.format(table=self._table, value=value)
        return _MARK_PICKED.format(table=self._table, apply=sql.SQL(apply), value=value)

    def _seed(self, extras: Extras) -> bytes:
        ctes: list[sql.Composable] = [
            _cte("inserted", _SEED_INSERTED.format(insert=self._insert)),
            _cte("effect", _SEED_EFFECT.format(table=self._table)),
        ]
        if extras.receipt:
            ctes.append(_cte("receipt", self._receipt("upsert")))
        final = sql.SQL("SELECT value, inserted FROM effect")
        return self._finish(_with(ctes, final, extras, changed="inserted"))

    def _pick(
        self, template: sql.SQL, where_sql: str, ordering: Ordering, limit: int, table_filter: str
    ) -> sql.Composed:
        return template.format(
            table=self._table,
            table_filter=sql.SQL(table_filter),
            where=sql.SQL(where_sql),
            order=sql.SQL(order_sql(ordering)),
            order_column=sql.SQL(
                ordering.column
            ),  # a validated column name, as order_sql writes it
            limit=sql.Literal(limit),
        )

    def _selection(
        self, kind: str, where_sql: str, ordering: Ordering, limit: int, table_filter: str
    ) -> bytes:
        """A read over the claim's selection: ``pick`` (explain) or ``count`` (triggers)."""
        return self._finish(self._pick(_SELECTIONS[kind], where_sql, ordering, limit, table_filter))

    def query(self, where_sql: str, ordering: Ordering) -> bytes:
        return self._finish(
            _QUERY.format(
                table=self._table, where=sql.SQL(where_sql), order=sql.SQL(order_sql(ordering))
            )
        )

    def selection_filter(
        self,
        table: int | str | None,
        where: Sequence[Condition],
        match: str,
        chosen: ChosenSet | None,
        *,
        archive: tuple[int, str] | None = None,
    ) -> tuple[str, str, list[Any]]:
        """A claim's selection as ``(table filter, where SQL, parameters)``.

        With a claimable set, the conditions the set covers are literals, so the
        planner proves the set's index predicate from the text, for custom and
        generic plans alike; the table id stays bound (the set's index leads with
        it). A ``table`` None (a read of a table nothing wrote to) matches no row; a
        name (a count on another connection: ``count_query``) is looked up in the
        catalog by the statement, so no id it holds can be stale. ``archive`` (a
        delete-claim's archive: its held id and name) picks nothing unless that id
        is still its table's: rows are never deleted into a stale id.
        """
        if chosen is None:
            where_sql, params = self.where.compile(where, match)
        else:
            conditions, inline = chosen.claim_filter(where)
            where_sql, params = self.where.compile(conditions, match, inline)
        table_filter = self._by_name if isinstance(table, str) else "r.table_id = %s"
        if archive is None:
            return table_filter, where_sql, [table, *params]
        return self._archive_filter, where_sql, [table, *archive, *params]


_SELECTIONS = {"pick": _PICK, "count": _COUNT}
#: A count's table filter by name (``selection_filter``), and a delete-claim's with an archive.
_BY_NAME = sql.SQL("r.table_id = (SELECT id FROM {tables} WHERE name = %s)")
_ARCHIVE_FILTER = sql.SQL("r.table_id = %s AND EXISTS (SELECT {held})")
