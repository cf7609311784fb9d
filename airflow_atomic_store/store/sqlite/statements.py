"""The SQLite backend's statement templates.

``{holes}`` are filled by the backend (the validated storage table, compiled
``where`` SQL, a ``json_set`` mutation, an ``INDEXED BY`` source); values are
always bound parameters (``?``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from airflow_atomic_store.spec import Condition, Ordering
from airflow_atomic_store.store.claim_sets import ChosenSet
from airflow_atomic_store.store.compiler import WhereCompiler, order_sql
from airflow_atomic_store.store.sqlite.where import SqliteWhere

#: Compiled selections a backend keeps (``StatementCompiler.compile_select``).
_MAX_COMPILED = 256

#: ``{source}`` is the table, and with a claimable set ``INDEXED BY`` its index:
#: SQLite's planner prefers the ``created_at`` index over a partial one even
#: after ``ANALYZE``, and walks every consumed row in it.
_SELECT = (
    "SELECT r.key, r.value FROM {source} WHERE {table_filter} AND {where} ORDER BY {order} LIMIT ?"
)
_PICK = "SELECT r.rowid FROM {source} WHERE {table_filter} AND {where} ORDER BY {order} LIMIT ?"

STATEMENTS = {
    "get": "SELECT value FROM {table} WHERE table_name = ? AND key = ?",
    "put": (
        "INSERT INTO {table} (table_name, key, value, created_at, record_timestamp) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (table_name, key) DO UPDATE "
        "SET value = excluded.value, record_timestamp = excluded.record_timestamp"
    ),
    "insert": (
        "INSERT INTO {table} (table_name, key, value, created_at, record_timestamp) "
        "VALUES (?, ?, ?, ?, ?)"
    ),
    "write": (
        "UPDATE {table} SET value = ?, record_timestamp = ? WHERE table_name = ? AND key = ?"
    ),
    "delete": "DELETE FROM {table} WHERE table_name = ? AND key = ?",
    "guarded": (
        "SELECT r.value FROM {table} AS r WHERE r.table_name = ? AND r.key = ? AND {where}"
    ),
    "select": _SELECT,
    # Capped: a trigger asks whether work is there, it never claims it.
    "count": (
        "SELECT count(*), min(CASE WHEN n = 1 THEN key END) FROM (SELECT r.key, "
        "row_number() OVER (ORDER BY {order}) AS n FROM {source} "
        "WHERE {table_filter} AND {where} ORDER BY {order} LIMIT ?)"
    ),
    # The fast paths (store/sqlite/mutations.py): ``{mutation}`` is a json_set.
    "claim_update": (
        "UPDATE {table} SET value = {mutation}, record_timestamp = ? "
        f"WHERE rowid IN ({_PICK}) RETURNING key, value, created_at"
    ),
    # RETURNING shows the new record_timestamp only, so a claim ordered by the old
    # one picks its rows (in order) first, then updates them.
    "pick": _PICK,
    "update_picked": (
        "UPDATE {table} SET value = {mutation}, record_timestamp = ? "
        "WHERE rowid IN (SELECT j.value FROM json_each(?) AS j) RETURNING rowid, key, value"
    ),
    "guarded_update": (
        "UPDATE {table} AS r SET value = {mutation}, record_timestamp = ? "
        "WHERE r.table_name = ? AND r.key = ? AND {where} RETURNING value"
    ),
    "explain_claim": f"EXPLAIN QUERY PLAN {_SELECT}",
    "read_receipt": (
        "SELECT primitive, table_name, target, result, expires_at < ? "
        "FROM {table}_receipts WHERE idempotency_key = ?"
    ),
    "forget_receipt": "DELETE FROM {table}_receipts WHERE idempotency_key = ?",
    "record_receipt": (
        "INSERT INTO {table}_receipts (idempotency_key, primitive, table_name, target, result, "
        "created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
    ),
    "purge_receipts": (
        "DELETE FROM {table}_receipts WHERE idempotency_key IN (SELECT idempotency_key "
        "FROM {table}_receipts WHERE expires_at < ? ORDER BY expires_at LIMIT ?)"
    ),
}


class StatementCompiler:
    """One store's statements: templates filled and cached, selections compiled once.

    :param table: the storage table (validated).
    """

    def __init__(self, table: str) -> None:
        self._table = table
        self.where = WhereCompiler(SqliteWhere())
        self.statement = lru_cache(maxsize=512)(self._build)
        #: ``compile_select``'s results by the parsed ``where`` object (see there).
        self._compiled: dict[tuple[Any, ...], tuple[Sequence[Condition], str, tuple[Any, ...]]] = {}

    def _build(
        self,
        kind: str,
        where_sql: str = "",
        order_sql: str = "",
        source: str = "",
        table_filter: str = "r.table_name = ?",
        mutation: str = "",
    ) -> str:
        return STATEMENTS[kind].format(
            table=self._table,
            where=where_sql,
            order=order_sql,
            source=source or f"{self._table} AS r",
            table_filter=table_filter,
            mutation=mutation,
        )

    def compile_select(
        self,
        kind: str,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        claim_set: ChosenSet | None,
        mutation: str = "",
    ) -> tuple[str, list[Any]]:
        """The selection and its parameters but the limit; with a set, through its index.

        ``mutation`` (a json_set) fills the claim statements that select in a subquery.
        A parsed ``where`` is one object per equal spec (``spec/memo.py``), so a
        repeated claim finds its statement and parameters by that object: the
        entry holds it, so its id cannot be reused while the entry lives, and
        everything else the statement depends on (the table, the chosen set and
        its inlined conditions, the order, the mutation) is in the key.
        """
        key = (kind, table, id(where), match, ordering, claim_set, mutation)
        known = self._compiled.get(key)
        if known is not None and known[0] is where:
            return known[1], list(known[2])
        statement, params = self._compile_anew(
            kind, table, where, match, ordering, claim_set, mutation
        )
        if len(self._compiled) >= _MAX_COMPILED:
            self._compiled.clear()
        self._compiled[key] = (where, statement, tuple(params))
        return statement, params

    def _compile_anew(
        self,
        kind: str,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        claim_set: ChosenSet | None,
        mutation: str,
    ) -> tuple[str, list[Any]]:
        if claim_set is None:
            where_sql, params = self.where.compile(where, match)
            statement = self.statement(kind, where_sql, order_sql(ordering), mutation=mutation)
            return statement, [table, *params]
        conditions, inline = claim_set.claim_filter(where)
        where_sql, params = self.where.compile(conditions, match, inline)
        statement = self.statement(
            kind,
            where_sql,
            order_sql(ordering),
            f"{self._table} AS r INDEXED BY {claim_set.name}",
            mutation=mutation,
        )
        return statement, [table, *params]
