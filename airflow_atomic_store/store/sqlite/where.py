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
from airflow_atomic_store.store.compiler import Fragment, OperatorSQL, PathSQL, inline_parameters

NUMERIC_TYPES = "('integer', 'real')"
CONTAINER_TYPES = "('object', 'array')"

_quoter = sqlite3.connect(":memory:", check_same_thread=False)


@lru_cache(maxsize=4096)
def literal(value: str | int | None) -> str:
    """A string, integer or NULL as an SQL literal, quoted by SQLite's own ``quote()``."""
    quoted: str = _quoter.execute("SELECT quote(?)", (value,)).fetchone()[0]
    return quoted


def substitute_literals(statement: str, values: list[Any]) -> str:
    """``?`` placeholders outside string literals replaced, in order, by quoted values.

    Quoted path literals may hold a ``?`` of their own, so the scan skips
    ``'…'`` literals (``''`` is an escaped quote inside one).
    """
    remaining = iter(values)
    out: list[str] = []
    quoted = False
    for char in statement:
        if char == "'":
            quoted = not quoted
        if char == "?" and not quoted:
            out.append(literal(next(remaining)))
        else:
            out.append(char)
    return "".join(out)


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


def equal_to_operand(type_sql: str, value_sql: str, kind: str) -> Fragment:
    """``json_type``/value expressions equal to a bound operand of ``kind``."""
    if kind == "string":
        return Fragment(f"({type_sql} = 'text' AND {value_sql} = ?)", (_identity,))
    if kind == "number":
        return Fragment(f"({type_sql} IN {NUMERIC_TYPES} AND {value_sql} = ?)", (_identity,))
    if kind == "boolean":
        return Fragment(f"({type_sql} = CASE WHEN ? THEN 'true' ELSE 'false' END)", (_identity,))
    if kind == "null":
        return Fragment(f"({type_sql} = 'null')")
    return Fragment(
        f"({type_sql} IN {CONTAINER_TYPES} AND atomic_store_json_equal({value_sql}, ?))",
        (_as_json_text,),
    )


def _equals(path: PathSQL, kind: str) -> Fragment:
    return equal_to_operand(path.type, path.json, kind)


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
    return inline_parameters(_equals(path, json_type(value)), value, substitute_literals)


def _ordered(symbol: str) -> OperatorSQL:
    def compile_(path: PathSQL, kind: str) -> Fragment:
        types = NUMERIC_TYPES if kind == "number" else "('text')"
        return Fragment(f"({path.type} IN {types} AND {path.json} {symbol} ?)", (_identity,))

    return compile_


def _in(path: PathSQL, kind: str) -> Fragment:
    # The list's items may be of any kind, so each is matched by its own type.
    return Fragment(
        "EXISTS (SELECT 1 FROM json_each(?) AS e WHERE CASE "
        f"WHEN e.type IN {NUMERIC_TYPES} THEN {path.type} IN {NUMERIC_TYPES} "
        f"AND {path.json} = e.value "
        f"WHEN e.type = 'text' THEN {path.type} = 'text' AND {path.json} = e.value "
        f"WHEN e.type IN ('true', 'false', 'null') THEN {path.type} = e.type "
        f"ELSE {path.type} IN {CONTAINER_TYPES} "
        f"AND atomic_store_json_equal({path.json}, e.value) END)",
        (_as_json_text,),
    )


def _contains(path: PathSQL, kind: str) -> Fragment:
    member = equal_to_operand("e.type", "e.value", kind)
    # json_each over the path walks an array's elements; guarded by the type
    # check because over an object it would walk the members instead.
    membership = (
        f"({path.type} = 'array' AND EXISTS (SELECT 1 FROM json_each(r.value, {path.literal}) "
        f"AS e WHERE {member.sql}))"
    )
    if kind == "string":
        return Fragment(
            f"(CASE {path.type} WHEN 'text' THEN instr({path.text}, ?) > 0 "
            f"WHEN 'array' THEN {membership} END)",
            (_identity, *member.params),
        )
    return Fragment(membership, member.params)


def _starts_with(path: PathSQL, kind: str) -> Fragment:
    return Fragment(
        f"({path.type} = 'text' AND substr({path.text}, 1, length(?)) = ?)",
        (_identity, _identity),
    )


def _ends_with(path: PathSQL, kind: str) -> Fragment:
    return Fragment(
        f"({path.type} = 'text' AND length({path.text}) >= length(?) "
        f"AND substr({path.text}, length({path.text}) - length(?) + 1) = ?)",
        (_identity, _identity, _identity),
    )


def _exists(path: PathSQL, kind: str) -> Fragment:
    return Fragment(f"({path.type} IS NOT NULL)")


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
        return inline_parameters(OPERATORS[positive](path, kind), value, substitute_literals)

    @staticmethod
    def negate(condition: str) -> str:
        return f"(NOT COALESCE({condition}, 0))"
