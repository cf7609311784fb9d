"""SQLite JSON-function SQL for each positive ``where`` operator.

SQLite's ``json_extract`` folds JSON ``true`` into ``1`` and JSON null into
SQL NULL, so every comparison checks ``json_type`` first; equality is chosen
per value kind at compile time (the kind is part of the cached shape).
Objects and arrays are compared by :func:`json_equal` (the reference deep
equality), registered on each connection as ``atomic_store_json_equal``.
"""

from __future__ import annotations

import json
import sqlite3
from functools import lru_cache
from typing import Any

from airflow_atomic_store.spec.paths import Segment
from airflow_atomic_store.spec.values import dumps, json_equal, json_type
from airflow_atomic_store.store.compiler import Bind, OperatorSQL, PathSQL, literal_sql

NUMERIC_TYPES = "('integer', 'real')"
CONTAINER_TYPES = "('object', 'array')"

_quoter = sqlite3.connect(":memory:", check_same_thread=False)


@lru_cache(maxsize=4096)
def literal(value: str | int | None) -> str:
    """A string, integer or NULL as an SQL literal, quoted by SQLite's own ``quote()``."""
    quoted: str = _quoter.execute("SELECT quote(?)", (value,)).fetchone()[0]
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
    placeholder = "?"
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
