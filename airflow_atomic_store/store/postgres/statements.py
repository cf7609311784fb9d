"""The PostgreSQL backend's statement templates, one per primitive and variant.

``{holes}`` are filled by :class:`~airflow_atomic_store.store.postgres.backend.PostgresBackend`
(quoted identifiers, compiled ``where`` SQL, the mutation expression, a validated
limit); values are always bound parameters (``%s``). A variant ``+receipt`` also
writes the idempotency receipt, ``+notify`` also ``pg_notify``s, in the same statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from psycopg import sql

from airflow_atomic_store.spec import Condition, Ordering
from airflow_atomic_store.store.claim_sets import ChosenSet
from airflow_atomic_store.store.compiler import WhereCompiler, order_sql
from airflow_atomic_store.store.notify import channel_for
from airflow_atomic_store.store.postgres import receipts
from airflow_atomic_store.store.postgres.where import PostgresWhere, literal

#: The claim's selection: shared by the claim itself and ``explain_claim``.
#: The limit (validated, 1..1000) is a literal: with ``LIMIT $n`` PostgreSQL's
#: generic plan assumes a tenth of the table is wanted, is never preferred, and
#: every claim pays for planning again; with the number in the text, a prepared
#: claim is planned once per connection.
_PICK = (
    "SELECT r.key, r.{order_column} AS claim_order "
    "FROM {table} AS r WHERE {table_filter} AND {where} "
    "ORDER BY {order} LIMIT {limit} FOR UPDATE SKIP LOCKED"
)

_UPDATE = (
    "UPDATE {table} AS r SET value = {apply}, "
    "record_timestamp = clock_timestamp() "
    "WHERE r.table_id = %s AND r.key = %s AND {where} RETURNING r.value"
)
_MARK_PICKED = (
    "UPDATE {table} AS t SET value = {apply}, "
    "record_timestamp = clock_timestamp() "
    "FROM picked WHERE t.table_id = %s AND t.key = picked.key"
)
_CLAIM = f"{_MARK_PICKED} RETURNING t.key, t.value, picked.claim_order"
_SEED = (
    "inserted AS (INSERT INTO {table} (table_id, key, value) VALUES (%s, %s, %s) "
    "ON CONFLICT (table_id, key) DO NOTHING RETURNING value), "
    "effect AS (SELECT value, true AS inserted FROM inserted UNION ALL "
    "SELECT value, false FROM {table} WHERE table_id = %s AND key = %s "
    "AND NOT EXISTS (SELECT FROM inserted))"
)
_UPSERT = (
    "INSERT INTO {table} AS t (table_id, key, value) VALUES (%s, %s, %s) "
    "ON CONFLICT (table_id, key) DO UPDATE "
    "SET value = {apply}, record_timestamp = clock_timestamp() "
    "RETURNING t.value, (t.xmax = 0) AS inserted"
)
#: With an idempotency key, the receipt is written by the same statement as the effect;
#: a receipt already under that key aborts the statement (``receipts.RECEIPT_CONFLICT``).
_RECEIPT = (
    "receipt AS (INSERT INTO {receipts} "
    "(idempotency_key, primitive, table_name, target, result, expires_at) "
    "SELECT %s, %s, %s, %s, atomic_store_receipt_v1({result}, %s), "
    "clock_timestamp() + make_interval(secs => %s) {source})"
)

_PUT = (
    "INSERT INTO {table} AS t (table_id, key, value) VALUES (%s, %s, %s) "
    "ON CONFLICT (table_id, key) DO UPDATE "
    "SET value = EXCLUDED.value, record_timestamp = clock_timestamp()"
)

STATEMENTS = {
    "put": _PUT,
    "get": "SELECT value FROM {table} WHERE table_id = %s AND key = %s",
    "delete": "DELETE FROM {table} WHERE table_id = %s AND key = %s RETURNING 1",
    "query": (
        "SELECT r.key, r.value::text FROM {table} AS r WHERE r.table_id = %s AND {where} "
        "ORDER BY {order} LIMIT %s"
    ),
    "update": _UPDATE,
    # A claim returns each value as its JSON text, decoded by the backend in one call
    # for the batch; the CTE it may feed (a receipt) keeps the jsonb.
    "claim": (
        f"WITH picked AS MATERIALIZED ({_PICK}) {_MARK_PICKED} "
        "RETURNING t.key, t.value::text, picked.claim_order"
    ),
    "pick": _PICK,
    # Capped and unlocked: a trigger asks whether work is there, it never claims it.
    "count": (
        "SELECT count(*), min(CASE WHEN n = 1 THEN key END) FROM (SELECT r.key, "
        "row_number() OVER (ORDER BY {order}) AS n FROM {table} AS r "
        "WHERE {table_filter} AND {where} ORDER BY {order} LIMIT {limit}) AS matching"
    ),
    "seed": f"WITH {_SEED} SELECT value, inserted FROM effect",
    "upsert": _UPSERT,
    "update+receipt": (
        f"WITH effect AS ({_UPDATE}), "
        + _RECEIPT.replace("{result}", "jsonb_build_array((SELECT value FROM effect))").replace(
            "{source}", ""
        )
        + " SELECT value FROM effect"
    ),
    "claim+receipt": (
        f"WITH picked AS MATERIALIZED ({_PICK}), effect AS ({_CLAIM}), "
        + _RECEIPT.replace(
            "{result}",
            # In claim order as this call returns it (``_in_claim_order``: ties by key in
            # code point order, which is "C" collation's order for UTF-8), so a replay,
            # whatever direction it asks for, returns the first call's batch as it was.
            "COALESCE((SELECT jsonb_agg(jsonb_build_array(key, value) "
            'ORDER BY claim_order {direction}, key COLLATE "C" {direction}) FROM effect), '
            "'[]'::jsonb)",
        ).replace("{source}", "")
        + " SELECT key, value::text, claim_order FROM effect"
    ),
    "seed+receipt": (
        f"WITH {_SEED}, "
        + _RECEIPT.replace("{result}", "jsonb_build_array(inserted, value)").replace(
            "{source}", "FROM effect"
        )
        + " SELECT value, inserted FROM effect"
    ),
    "upsert+receipt": (
        f"WITH effect AS ({_UPSERT}), "
        + _RECEIPT.replace("{result}", "jsonb_build_array(inserted, value)").replace(
            "{source}", "FROM effect"
        )
        + " SELECT value, inserted FROM effect"
    ),
}


def _with_notify(statement: str, *, changed: str = "effect") -> str:
    """``statement`` (``WITH …, effect AS (…) SELECT … FROM effect``) that also notifies.

    ``pg_notify`` runs in a CTE of the same statement, once, and only when the
    ``changed`` CTE has rows (a write that changed nothing wakes nobody). Its
    channel is the statement's last parameter: the final ``SELECT`` has none. A
    CTE runs only if referenced, hence the join; it has no column the final
    ``SELECT`` names.
    """
    head, final = statement.rsplit(" SELECT ", 1)
    notified = f"notified AS (SELECT pg_notify(%s, '') WHERE EXISTS (SELECT FROM {changed}))"
    return f"{head}, {notified} SELECT {final} LEFT JOIN notified ON true"


STATEMENTS.update(
    {
        "put+notify": _with_notify(f"WITH effect AS ({_PUT} RETURNING 1) SELECT 1 FROM effect"),
        "update+notify": _with_notify(f"WITH effect AS ({_UPDATE}) SELECT value FROM effect"),
        "claim+notify": _with_notify(
            f"WITH picked AS MATERIALIZED ({_PICK}), effect AS ({_CLAIM}) "
            "SELECT key, value::text, claim_order FROM effect"
        ),
        "seed+notify": _with_notify(STATEMENTS["seed"], changed="inserted"),
        "upsert+notify": _with_notify(
            f"WITH effect AS ({_UPSERT}) SELECT value, inserted FROM effect"
        ),
        "seed+receipt+notify": _with_notify(STATEMENTS["seed+receipt"], changed="inserted"),
        **{
            f"{kind}+receipt+notify": _with_notify(STATEMENTS[f"{kind}+receipt"])
            for kind in ("update", "claim", "upsert")
        },
    }
)


class StatementCompiler:
    """One store's statements: templates filled and cached, ``where`` compiled.

    :param table_name: the storage table (validated).
    :param notify: the write families that ``pg_notify`` their table's channel.
    """

    def __init__(self, table_name: str, notify: frozenset[str]) -> None:
        self._table_name = table_name
        self._table = sql.Identifier(table_name).as_string(None)
        self._receipts = receipts.receipts_table(table_name)
        self._notify = notify
        self.where = WhereCompiler(PostgresWhere())
        self.statement = lru_cache(maxsize=512)(self._build)

    def _build(
        self,
        kind: str,
        where_sql: str = "",
        ordering: Ordering | None = None,
        apply: str = "",
        limit: int | None = None,
        table_filter: str = "r.table_id = %s",
    ) -> bytes:
        return (
            STATEMENTS[kind]
            .format(
                table=self._table,
                where=where_sql,
                order=order_sql(ordering) if ordering else "",
                order_column=ordering.column if ordering else "",
                apply=apply,
                limit=sql.Literal(limit).as_string(None) if limit is not None else "",
                table_filter=table_filter,
                receipts=self._receipts,
                direction=ordering.direction.upper() if ordering else "",
            )
            .encode()
        )

    def compile(
        self,
        kind: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering | None = None,
        apply: str = "",
        limit: int | None = None,
    ) -> tuple[bytes, list[Any]]:
        where_sql, params = self.where.compile(where, match)
        return self.statement(kind, where_sql, ordering, apply, limit), params

    def compile_pick(
        self,
        kind: str,
        table_id: int | None,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        chosen: ChosenSet | None,
        apply: str = "",
    ) -> tuple[bytes, list[Any]]:
        """A claim's statement and the parameters of its selection.

        With a claimable set, the table id and the conditions the set covers
        are literals, so the planner proves the set's index predicate from the
        text, for custom and generic plans alike. A ``table_id`` None (a read of
        a table nothing wrote to) matches no row.
        """
        if chosen is None:
            where_sql, params = self.where.compile(where, match)
            statement = self.statement(kind, where_sql, ordering, apply, limit)
            return statement, [table_id, *params]
        conditions, inline = chosen.claim_filter(where)
        where_sql, params = self.where.compile(conditions, match, inline)
        table_filter = f"r.table_id = {literal(table_id)}"
        return self.statement(kind, where_sql, ordering, apply, limit, table_filter), params

    def notifying(self, family: str, kind: str, table: str) -> tuple[str, tuple[str, ...]]:
        """The statement kind that also notifies ``table``'s channel (if this family
        notifies), and the parameters to append: the channel is the last one (see
        ``_with_notify``)."""
        if family not in self._notify:
            return kind, ()
        return f"{kind}+notify", (channel_for(self._table_name, table),)
