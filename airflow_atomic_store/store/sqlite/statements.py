"""The SQLite backend's statement templates.

``{holes}`` are filled by the backend (the validated storage table, compiled
``where`` SQL, a ``json_set`` mutation, an ``INDEXED BY`` source); values are
always bound parameters (``?``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from airflow_atomic_store.spec import Condition
from airflow_atomic_store.store.compiler import WhereCompiler, order_sql
from airflow_atomic_store.store.named_queries import named_queries
from airflow_atomic_store.store.requests import Selection
from airflow_atomic_store.store.sqlite.where import SqliteWhere, literal

#: Compiled selections a backend keeps (``StatementCompiler.compile_select``).
_MAX_COMPILED = 256

#: ``{source}`` is the table, and with a claimable set ``INDEXED BY`` its index:
#: SQLite's planner prefers the ``created_at`` index over a partial one even
#: after ``ANALYZE``, and walks every consumed row in it.
_SELECT = (
    "SELECT r.key, r.value FROM {source} WHERE {table_filter} AND {where} ORDER BY {order} LIMIT ?"
)
_PICK = "SELECT r.rowid FROM {source} WHERE {table_filter} AND {where} ORDER BY {order} LIMIT ?"

#: The statements with holes; the static ones are in ``queries.sql``.
STATEMENTS = {
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
    # A delete-claim: RETURNING shows the rows as they were, order column included.
    "delete_created_at": (
        f"DELETE FROM {{table}} WHERE rowid IN ({_PICK}) RETURNING key, value, created_at"
    ),
    "delete_record_timestamp": (
        f"DELETE FROM {{table}} WHERE rowid IN ({_PICK}) RETURNING key, value, record_timestamp"
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
    "load_sets": (
        "SELECT s.name, s.spec, s.origin, s.problem, "
        "EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = s.name) "
        "FROM {table}_claim_sets AS s WHERE ? IS NULL OR s.table_name = ? "
        "ORDER BY s.table_name, s.name"
    ),
    "count_automatic_sets": (
        "SELECT count(*) FROM {table}_claim_sets "
        "WHERE table_name = ? AND origin = 'automatic' AND name <> ?"
    ),
    "record_set": (
        "INSERT INTO {table}_claim_sets (name, table_name, spec, origin, created_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
        "origin = CASE WHEN excluded.origin = 'declared' THEN 'declared' ELSE origin END, "
        "problem = CASE WHEN excluded.origin = 'declared' THEN NULL ELSE problem END"
    ),
    "forget_set": "DELETE FROM {table}_claim_sets WHERE name = ?",
}


class StatementCompiler:
    """One store's statements: templates filled and cached, selections compiled once.

    :param table: the storage table (validated).
    """

    def __init__(self, table: str) -> None:
        self._table = table
        self.where = WhereCompiler(SqliteWhere())
        self._static = {
            name: statement.format(table=table)
            for name, statement in named_queries(__package__).items()
        }
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
        if kind in self._static:
            return self._static[kind]
        return STATEMENTS[kind].format(
            table=self._table,
            where=where_sql,
            order=order_sql,
            source=source or f"{self._table} AS r",
            table_filter=table_filter,
            mutation=mutation,
        )

    def compile_select(
        self, kind: str, selection: Selection, mutation: str = ""
    ) -> tuple[str, list[Any]]:
        """The selection and its parameters but the limit; with a set, through its index.

        ``mutation`` (a json_set) fills the claim statements that select in a subquery.
        A parsed ``where`` is one object per equal spec (``spec/memo.py``), so a
        repeated claim finds its statement and parameters by that object: the
        entry holds it, so its id cannot be reused while the entry lives, and
        everything else the statement depends on (the table, the chosen set and
        its inlined conditions, the order, the mutation) is in the key.
        """
        where = selection.where
        key = (
            kind,
            selection.table,
            id(where),
            selection.match,
            selection.ordering,
            selection.claim_set,
            mutation,
        )
        known = self._compiled.get(key)
        if known is not None and known[0] is where:
            return known[1], list(known[2])
        statement, params = self._compile_anew(kind, selection, mutation)
        if len(self._compiled) >= _MAX_COMPILED:
            self._compiled.clear()
        self._compiled[key] = (where, statement, tuple(params))
        return statement, params

    def _compile_anew(
        self, kind: str, selection: Selection, mutation: str
    ) -> tuple[str, list[Any]]:
        claim_set, order = selection.claim_set, order_sql(selection.ordering)
        if claim_set is None:
            where_sql, params = self.where.compile(selection.where, selection.match)
            statement = self.statement(kind, where_sql, order, mutation=mutation)
            return statement, [selection.table, *params]
        conditions, inline = claim_set.claim_filter(selection.where)
        where_sql, params = self.where.compile(conditions, selection.match, inline)
        statement = self.statement(
            kind,
            where_sql,
            order,
            f"{self._table} AS r INDEXED BY {claim_set.name}",
            f"r.table_name = {literal(selection.table)}",
            mutation,
        )
        return statement, params
