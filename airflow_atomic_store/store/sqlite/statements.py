"""The SQLite driver's statements: named queries, the ``where`` dialect, ``json_set`` mutations.

Every statement's parameters are named where its text is written (``:name``),
so no two places agree on an order. ``{holes}`` are filled once per shape (the
validated storage table, compiled ``where`` SQL, a ``json_set`` mutation, an
``INDEXED BY`` source); values are always bound.

SQLite's ``json_extract`` folds JSON ``true`` into ``1`` and JSON null into SQL
NULL, so every comparison checks ``json_type`` first; equality is chosen per
value kind at compile time (the kind is part of the cached shape). Objects and
arrays are compared by :func:`json_equal_sql` (the reference deep equality),
registered on each connection as ``atomic_store_json_equal``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from airflow_atomic_store.spec import Condition, Mutation
from airflow_atomic_store.spec.paths import Segment
from airflow_atomic_store.spec.values import dumps, json_equal, json_type
from airflow_atomic_store.store.contract import Selection
from airflow_atomic_store.store.sql import (
    Bind,
    OperatorSQL,
    Params,
    PathSQL,
    WhereCompiler,
    literal_sql,
    named_queries,
    order_sql,
)

NUMERIC_TYPES = "('integer', 'real')"
CONTAINER_TYPES = "('object', 'array')"

_quoter = sqlite3.connect(":memory:", check_same_thread=False)


@lru_cache(maxsize=4096)
def literal(value: str | int | None) -> str:
    """A string, integer or NULL as an SQL literal, quoted by SQLite's own ``quote()``."""
    quoted: str = _quoter.execute("SELECT quote(:value)", {"value": value}).fetchone()[0]
    return quoted


def json_path(segments: tuple[Segment, ...]) -> str:
    """A SQLite JSON path. Labels are written as their JSON-escaped text.

    SQLite compares a path label with the key's raw text in the stored
    document; values are stored with :func:`dumps`, so the same escaping
    makes keys with quotes, backslashes or non-ASCII characters reachable.
    """
    path = "$"
    for segment in segments:
        if isinstance(segment, int):
            path += f"[{segment}]"
        else:
            path += "." + json.dumps(segment, ensure_ascii=False)[1:-1]
    return path


def path_sql(segments: tuple[Segment, ...], root: str = "r.value") -> PathSQL:
    # ``r`` is the rows table's alias in every statement: json_each has a
    # ``value`` column of its own that would otherwise shadow ours.
    path = literal(json_path(segments))
    extract = f"json_extract({root}, {path})"
    return PathSQL(json=extract, text=extract, type=f"json_type({root}, {path})", literal=path)


def json_equal_sql(left: object, right: object) -> bool:
    """The ``atomic_store_json_equal`` SQL function: deep equality of JSON texts.

    SQLite may evaluate it before the ``json_type`` guard beside it, on a
    scalar that ``json_extract`` already unwrapped (a string such as
    ``[draft`` is not JSON); only texts of containers can be equal here, so
    anything else is simply not equal, and the guard decides the rest.
    """
    if not isinstance(left, str) or not isinstance(right, str):
        return False
    if left[:1] not in ("{", "[") or right[:1] not in ("{", "["):
        return False
    try:
        return json_equal(json.loads(left), json.loads(right))
    except ValueError:
        return False


def register_functions(connection: sqlite3.Connection) -> None:
    connection.create_function("atomic_store_json_equal", 2, json_equal_sql, deterministic=True)


def _identity(value: Any) -> Any:
    return value


def _as_json_text(value: Any) -> str:
    return dumps(value)


def equal_to_operand(type_sql: str, value_sql: str, kind: str, bind: Bind) -> str:
    """``json_type``/value expressions equal to a bound operand of ``kind``."""
    if kind == "string":
        return f"({type_sql} = 'text' AND {value_sql} = {bind(_identity)})"
    if kind == "number":
        return f"({type_sql} IN {NUMERIC_TYPES} AND {value_sql} = {bind(_identity)})"
    if kind == "boolean":
        return f"({type_sql} = CASE WHEN {bind(_identity)} THEN 'true' ELSE 'false' END)"
    if kind == "null":
        return f"({type_sql} = 'null')"
    return (
        f"({type_sql} IN {CONTAINER_TYPES} "
        f"AND atomic_store_json_equal({value_sql}, {bind(_as_json_text)}))"
    )


def _equals(path: PathSQL, kind: str, bind: Bind) -> str:
    return equal_to_operand(path.type, path.json, kind, bind)


def _equals_literal(path: PathSQL, value: Any) -> str:
    """Equality to a literal value, with one JSON parse per row where one is enough.

    ``json_extract`` gives a JSON string as SQL text, a number, boolean or null
    as an SQL number or NULL (never equal to text), and an object or array as
    its JSON text, which starts with ``[`` or ``{``. So against a string that
    starts with neither, ``json_extract(...) = 'text'`` holds for that JSON
    string only, and the ``json_type`` check beside it is redundant. Dropping
    it halves the JSON parsing of a set's predicate: in its index build and on
    every row a claim through it reads.
    """
    if isinstance(value, str) and not value.startswith(("[", "{")):
        return f"({path.json} = {literal(value)})"
    return literal_sql(_equals, path, json_type(value), value, literal)


def _ordered(symbol: str) -> OperatorSQL:
    def compile_(path: PathSQL, kind: str, bind: Bind) -> str:
        types = NUMERIC_TYPES if kind == "number" else "('text')"
        return f"({path.type} IN {types} AND {path.json} {symbol} {bind(_identity)})"

    return compile_


def _in(path: PathSQL, kind: str, bind: Bind) -> str:
    # The list's items may be of any kind, so each is matched by its own type.
    return (
        f"EXISTS (SELECT 1 FROM json_each({bind(_as_json_text)}) AS e WHERE CASE "
        f"WHEN e.type IN {NUMERIC_TYPES} THEN {path.type} IN {NUMERIC_TYPES} "
        f"AND {path.json} = e.value "
        f"WHEN e.type = 'text' THEN {path.type} = 'text' AND {path.json} = e.value "
        f"WHEN e.type IN ('true', 'false', 'null') THEN {path.type} = e.type "
        f"ELSE {path.type} IN {CONTAINER_TYPES} "
        f"AND atomic_store_json_equal({path.json}, e.value) END)"
    )


def _membership(path: PathSQL, kind: str, bind: Bind) -> str:
    # json_each over the path walks an array's elements; guarded by the type
    # check because over an object it would walk the members instead.
    member = equal_to_operand("e.type", "e.value", kind, bind)
    return (
        f"({path.type} = 'array' AND EXISTS (SELECT 1 FROM json_each(r.value, {path.literal}) "
        f"AS e WHERE {member}))"
    )


def _contains(path: PathSQL, kind: str, bind: Bind) -> str:
    if kind == "string":
        needle = bind(_identity)  # first: the values are bound in the order the text holds them
        return (
            f"(CASE {path.type} WHEN 'text' THEN instr({path.text}, {needle}) > 0 "
            f"WHEN 'array' THEN {_membership(path, kind, bind)} END)"
        )
    return _membership(path, kind, bind)


def _starts_with(path: PathSQL, kind: str, bind: Bind) -> str:
    return (
        f"({path.type} = 'text' "
        f"AND substr({path.text}, 1, length({bind(_identity)})) = {bind(_identity)})"
    )


def _ends_with(path: PathSQL, kind: str, bind: Bind) -> str:
    return (
        f"({path.type} = 'text' AND length({path.text}) >= length({bind(_identity)}) "
        f"AND substr({path.text}, length({path.text}) - length({bind(_identity)}) + 1) "
        f"= {bind(_identity)})"
    )


def _exists(path: PathSQL, kind: str, bind: Bind) -> str:
    return f"({path.type} IS NOT NULL)"


OPERATORS: dict[str, OperatorSQL] = {
    "equals": _equals,
    "gt": _ordered(">"),
    "gte": _ordered(">="),
    "lt": _ordered("<"),
    "lte": _ordered("<="),
    "in": _in,
    "contains": _contains,
    "starts_with": _starts_with,
    "ends_with": _ends_with,
    "exists": _exists,
}


class SqliteWhere:
    operators = OPERATORS
    placeholder = ":{}"
    match_all = " AND "
    match_any = " OR "
    always_true = "1"

    @staticmethod
    def path_sql(segments: tuple[Segment, ...], root: str = "r.value") -> PathSQL:
        return path_sql(segments, root)

    @staticmethod
    def literal_condition(path: PathSQL, positive: str, kind: str, value: Any) -> str:
        """Literal SQL for a claimable set's condition (``spec/claim_sets.py``).

        ``in`` is bound as one JSON list walked by ``json_each``, a subquery that a
        partial index predicate cannot hold; as literals it is one equality per item.
        """
        if positive == "in":
            return "(" + " OR ".join(_equals_literal(path, item) for item in value) + ")"
        if positive == "equals":
            return _equals_literal(path, value)
        return literal_sql(OPERATORS[positive], path, kind, value, literal)

    @staticmethod
    def negate(condition: str) -> str:
        return f"(NOT COALESCE({condition}, 0))"


# -- top-level ``set`` mutations as one ``json_set`` ------------------------------------
#
# The driver applies mutations through the reference ``apply`` in Python, which costs
# a read, a deep copy, a JSON round trip and a write per row. The mutations almost
# every claim and "mark done" update carries (``set`` of a top-level field with a
# plain name) have one meaning that ``json_set`` computes exactly: a row value is
# always an object, so such a ``set`` cannot fail; it replaces the member in place or
# appends it, left to right, as ``apply`` does. SQLite (3.40 here) keeps the text of
# every number and string it does not touch, so the stored JSON is the text ``apply``
# and ``dumps`` would have stored (``tests/integration/test_sqlite_json_set.py``).

_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def plain_fields(mutations: Sequence[Mutation]) -> tuple[str, ...] | None:
    """The fields set, in order, when every mutation sets a top-level plain-named field.

    Decided once per shape (operations and paths): a claim's default mutations
    differ in their values only.
    """
    return _plain_fields(tuple((m.operation, m.path.segments) for m in mutations))


@lru_cache(maxsize=1024)
def _plain_fields(shape: tuple[tuple[str, tuple[Any, ...]], ...]) -> tuple[str, ...] | None:
    fields = []
    for operation, segments in shape:
        if operation != "set" or len(segments) != 1:
            return None
        (name,) = segments
        if not isinstance(name, str) or not _PLAIN_NAME.fullmatch(name):
            return None
        fields.append(name)
    return tuple(fields) if fields else None


@lru_cache(maxsize=256)
def json_set_sql(fields: tuple[str, ...]) -> str:
    """``json_set(value, '$.f1', json(:m0), …)``: each value bound as its JSON text.

    ``json(…)`` makes SQLite insert the bound text as JSON (object, array, number, …)
    rather than as a string; the paths go through ``literal()``.
    """
    pairs = ", ".join(
        f"{literal(json_path((name,)))}, json(:m{number})" for number, name in enumerate(fields)
    )
    return f"json_set(value, {pairs})"


def json_set_params(mutations: Sequence[Mutation]) -> Params:
    return {f"m{number}": dumps(mutation.value) for number, mutation in enumerate(mutations)}


# -- statements -----------------------------------------------------------------------

#: Compiled selections a driver keeps (``Statements.compile_select``).
_MAX_COMPILED = 256

#: ``{source}`` is the table, and with a claimable set ``INDEXED BY`` its index:
#: SQLite's planner prefers the ``created_at`` index over a partial one even
#: after ``ANALYZE``, and walks every consumed row in it.
_SELECT = (
    "SELECT r.key, r.value FROM {source} WHERE r.table_name = :table AND {where} "
    "ORDER BY {order} LIMIT :limit"
)
_PICK = (
    "SELECT r.rowid FROM {source} WHERE r.table_name = :table AND {where} "
    "ORDER BY {order} LIMIT :limit"
)

#: The statements with holes; the static ones are in ``queries.sql``.
TEMPLATES = {
    "guarded": (
        "SELECT r.value FROM {table} AS r WHERE r.table_name = :table AND r.key = :key AND {where}"
    ),
    "select": _SELECT,
    # Capped: a trigger asks whether work is there, it never claims it.
    "count": (
        "SELECT count(*), min(CASE WHEN n = 1 THEN key END) FROM (SELECT r.key, "
        "row_number() OVER (ORDER BY {order}) AS n FROM {source} "
        "WHERE r.table_name = :table AND {where} ORDER BY {order} LIMIT :limit)"
    ),
    # The fast paths: ``{mutation}`` is a json_set.
    "claim_update": (
        "UPDATE {table} SET value = {mutation}, record_timestamp = :now "
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
        "UPDATE {table} SET value = {mutation}, record_timestamp = :now "
        "WHERE rowid IN (SELECT j.value FROM json_each(:picked) AS j) RETURNING rowid, key, value"
    ),
    "guarded_update": (
        "UPDATE {table} AS r SET value = {mutation}, record_timestamp = :now "
        "WHERE r.table_name = :table AND r.key = :key AND {where} RETURNING value"
    ),
    "explain_claim": f"EXPLAIN QUERY PLAN {_SELECT}",
    # A bulk update's guarded rows (its keys one JSON array), and its one-statement form
    # when the mutations are top-level ``set``s.
    "guarded_many": (
        "SELECT r.key, r.value FROM {table} AS r WHERE r.table_name = :table "
        "AND r.key IN (SELECT value FROM json_each(:keys)) AND {where}"
    ),
    "guarded_set_many": (
        "UPDATE {table} AS r SET value = {mutation}, record_timestamp = :now "
        "WHERE r.table_name = :table AND r.key IN (SELECT value FROM json_each(:keys)) "
        "AND {where} RETURNING key"
    ),
}


class Statements:
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
        self._compiled: dict[tuple[Any, ...], tuple[Sequence[Condition], str, Params]] = {}

    def _build(
        self,
        kind: str,
        where_sql: str = "",
        order_sql: str = "",
        source: str = "",
        mutation: str = "",
    ) -> str:
        if kind in self._static:
            return self._static[kind]
        return TEMPLATES[kind].format(
            table=self._table,
            where=where_sql,
            order=order_sql,
            source=source or f"{self._table} AS r",
            mutation=mutation,
        )

    def compile_select(
        self, kind: str, selection: Selection, mutation: str = ""
    ) -> tuple[str, Params]:
        """The selection's statement and its parameters but the limit (do not change the
        mapping: it is shared with later calls); with a set, through its index.

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
            return known[1], known[2]
        claim_set, order = selection.claim_set, order_sql(selection.ordering)
        if claim_set is None:
            where_sql, params = self.where.compile(selection.where, selection.match)
            statement = self.statement(kind, where_sql, order, mutation=mutation)
        else:
            if claim_set.predicate is None:
                conditions, inline = selection.where, claim_set.inline
            else:  # a disjunctive set: its own conditions, all literals (contract.ChosenSet)
                conditions, inline = claim_set.predicate, frozenset(range(len(claim_set.predicate)))
            where_sql, params = self.where.compile(conditions, selection.match, inline)
            source = f"{self._table} AS r INDEXED BY {claim_set.name}"
            statement = self.statement(kind, where_sql, order, source, mutation)
        params = {**params, "table": selection.table}
        if len(self._compiled) >= _MAX_COMPILED:
            self._compiled.clear()
        self._compiled[key] = (where, statement, params)
        return statement, params
