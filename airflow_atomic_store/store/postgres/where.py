"""PostgreSQL ``jsonb`` SQL for each positive ``where`` operator.

Each entry receives the path expressions, the kind of the condition value and
a ``bind`` that writes the value (a ``%s`` placeholder, or the value as a literal
for a claimable set's condition), and returns SQL. A positive form may yield SQL NULL
for "false" (NULL behaves as false under AND/OR in a WHERE); negations wrap it
in ``COALESCE(…, false)`` first, so ``not_*`` is always the exact negation.

``CASE WHEN jsonb_typeof(...)`` guards every cast: PostgreSQL does not promise
the evaluation order of ``AND``, and casting a jsonb string to numeric raises.
"""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from airflow_atomic_store.spec.paths import Segment
from airflow_atomic_store.store.compiler import Bind, OperatorSQL, PathSQL, literal_sql
from airflow_atomic_store.store.postgres.jsonb import exact_numeric, jsonb


def literal(value: Any) -> str:
    """A value (a path segment, a set's constant) as an SQL literal quoted by psycopg.

    ``%`` is doubled because the statement later goes through psycopg's
    placeholder parser, which does not know about string literals. Strings and
    integers (path segments, a set's constants, the table id: every claim through a
    set writes them) are remembered, by type as well as value: quoting without a
    connection depends on the value alone (a microsecond a claim saved).
    """
    if type(value) in _REMEMBERED:
        return _remembered_literal(value)
    return _quoted(value)


def _quoted(value: Any) -> str:
    return sql.Literal(value).as_string(None).replace("%", "%%")


_REMEMBERED = (str, int)  # exact types: a bool is an int, and True == 1
_remembered_literal = lru_cache(maxsize=1024, typed=True)(_quoted)


def jsonpath_literal(segments: tuple[Segment, ...]) -> str:
    """A strict SQL/JSON path for segments that include an array index."""
    path = "strict $"
    for segment in segments:
        if isinstance(segment, int):
            path += f"[{segment}]"
        else:
            path += '."' + segment.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return literal(path)


@lru_cache(maxsize=1024)
def path_sql(segments: tuple[Segment, ...], root: str = "r.value") -> PathSQL:
    """SQL for the value at a path; ``root`` names the rows table's ``value`` column.

    Cached: quoting through psycopg is a visible share of a primitive's client
    time, and a DAG uses the same few fields over and over.

    Key-only paths are a plain ``->`` chain, the form an expression index
    such as ``(value -> 'status')`` matches. ``->`` with an integer is not
    usable for array indexes: on a scalar, ``-> 0`` returns the scalar itself.
    Paths with an index therefore use a strict SQL/JSON path evaluated
    silently, which yields NULL whenever a step does not exist.
    """
    if all(isinstance(segment, str) for segment in segments):
        hops = [literal(segment) for segment in segments]
        parent = root + "".join(f" -> {hop}" for hop in hops[:-1])
        json_expr = f"({parent} -> {hops[-1]})"
        text_expr = f"({parent} ->> {hops[-1]})"
    else:
        json_expr = (
            f"jsonb_path_query_first({root}, {jsonpath_literal(segments)}::jsonpath, "
            "'{}'::jsonb, true)"
        )
        text_expr = f"({json_expr} #>> '{{}}')"
    return PathSQL(
        json=json_expr,
        text=text_expr,
        type=f"jsonb_typeof({json_expr})",
        literal=json_expr,
    )


def as_jsonb(value: Any) -> Jsonb:
    """A condition value as ``jsonb``, floats by their exact value as rows store them."""
    return jsonb(value)


def as_numeric(value: Any) -> Decimal | int:
    """A number as ``numeric``, a float by its exact value: ``numeric`` compares
    decimals, and only the exact one compares with an integer as Python does."""
    return exact_numeric(value)


def as_jsonb_array(values: Any) -> list[Jsonb]:
    return [jsonb(item) for item in values]


def as_text(value: Any) -> str:
    return str(value)


def _equals(path: PathSQL, kind: str, bind: Bind) -> str:
    # jsonb equality is deep and compares numbers by value; booleans and
    # numbers never equal each other. Written as a bare comparison so an
    # expression index on the path can serve it.
    return f"({path.json} = {bind(as_jsonb)}::jsonb)"


def _ordered(symbol: str) -> OperatorSQL:
    def compile_(path: PathSQL, kind: str, bind: Bind) -> str:
        if kind == "number":
            return (
                f"(CASE WHEN {path.type} = 'number' "
                f"THEN {path.json}::numeric {symbol} {bind(as_numeric)}::numeric END)"
            )
        return (
            f"(CASE WHEN {path.type} = 'string' "
            f'THEN {path.text} COLLATE "C" {symbol} {bind(as_text)}::text COLLATE "C" END)'
        )

    return compile_


def _in(path: PathSQL, kind: str, bind: Bind) -> str:
    return f"({path.json} = ANY({bind(as_jsonb_array)}::jsonb[]))"


def _element_equals(path: PathSQL, bind: Bind) -> str:
    return (
        f"EXISTS (SELECT 1 FROM jsonb_array_elements({path.json}) AS e(v) "
        f"WHERE e.v = {bind(as_jsonb)}::jsonb)"
    )


def _contains(path: PathSQL, kind: str, bind: Bind) -> str:
    if kind == "string":
        needle = bind(as_text)  # first: the values are bound in the order the text holds them
        return (
            f"(CASE {path.type} WHEN 'string' THEN strpos({path.text}, {needle}::text) > 0 "
            f"WHEN 'array' THEN {_element_equals(path, bind)} END)"
        )
    return f"(CASE WHEN {path.type} = 'array' THEN {_element_equals(path, bind)} END)"


def _starts_with(path: PathSQL, kind: str, bind: Bind) -> str:
    return (
        f"(CASE WHEN {path.type} = 'string' "
        f"THEN starts_with({path.text}, {bind(as_text)}::text) END)"
    )


def _ends_with(path: PathSQL, kind: str, bind: Bind) -> str:
    return (
        f"(CASE WHEN {path.type} = 'string' "
        f"THEN right({path.text}, char_length({bind(as_text)}::text)) = {bind(as_text)}::text END)"
    )


def _exists(path: PathSQL, kind: str, bind: Bind) -> str:
    return f"({path.json} IS NOT NULL)"


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


class PostgresWhere:
    operators = OPERATORS
    placeholder = "%s"
    match_all = " AND "
    match_any = " OR "
    always_true = "TRUE"

    @staticmethod
    def path_sql(segments: tuple[Segment, ...], root: str = "r.value") -> PathSQL:
        return path_sql(segments, root)

    @staticmethod
    def literal_condition(path: PathSQL, positive: str, kind: str, value: Any) -> str:
        return literal_sql(OPERATORS[positive], path, kind, value, literal)

    @staticmethod
    def negate(condition: str) -> str:
        return f"(NOT COALESCE({condition}, false))"
