"""One compiler for ``where`` clauses; each backend supplies the SQL per operator.

The compiler walks the parsed spec once and produces SQL text with the
dialect's placeholders plus one parameter maker per placeholder: each
operator writes its values through a :data:`Bind`, which the compiler
answers with a placeholder (noting the maker) or with the value as a literal,
so a value's place is chosen when the text is written, never searched for in
it afterwards. The SQL depends only on the spec's *shape* (paths, operators,
value kinds, match mode), never on its values, so it is cached and a hot
loop binds new values into an already-built statement.

Paths enter the text as literals quoted by the driver (see each dialect), so
PostgreSQL can match an expression index such as ``(value -> 'status')``.
Values are bound parameters, except the conditions a claimable set covers
(``spec/claim_sets.py``): those are written as the driver's own literals, so
the planner can prove the set's partial-index predicate from the text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from airflow_atomic_store.spec import Condition, Ordering
from airflow_atomic_store.spec.paths import Segment
from airflow_atomic_store.spec.values import json_type

ParamMaker = Callable[[Any], Any]

Bind = Callable[[ParamMaker], str]
"""Where an operator's SQL takes the condition value: given how to turn the value into
a parameter, the text to write there, a placeholder or the value as a literal. The
operator calls it in the order its text holds the values."""

OperatorSQL = Callable[["PathSQL", str, Bind], str]
"""``(path expressions, value kind, bind) -> SQL`` for one positive operator."""


def bound(
    operator: OperatorSQL, path: PathSQL, kind: str, placeholder: str
) -> tuple[str, tuple[ParamMaker, ...]]:
    """The operator's SQL with ``placeholder`` for each value, and the values' makers."""
    makers: list[ParamMaker] = []

    def bind(make: ParamMaker) -> str:
        makers.append(make)
        return placeholder

    sql = operator(path, kind, bind)
    return sql, tuple(makers)


def literal_sql(
    operator: OperatorSQL, path: PathSQL, kind: str, value: Any, quote: Callable[[Any], str]
) -> str:
    """The operator's SQL with each value written as a literal, quoted by ``quote``."""
    return operator(path, kind, lambda make: quote(make(value)))


@dataclass(frozen=True)
class PathSQL:
    """The SQL expressions a dialect derives from one validated path."""

    json: str  # the JSON value at the path (SQL NULL when missing)
    text: str  # the same value as SQL text when it is a JSON string
    type: str  # the JSON type name of the value at the path (SQL NULL when missing)
    literal: str  # the path as the dialect's quoted literal(s)


class WhereDialect(Protocol):
    operators: dict[str, OperatorSQL]
    placeholder: str

    def path_sql(self, segments: tuple[Segment, ...], root: str = ...) -> PathSQL: ...

    def negate(self, sql: str) -> str: ...

    def literal_condition(self, path: PathSQL, positive: str, kind: str, value: Any) -> str:
        """The positive condition with ``value`` written as literals (no placeholders)."""
        ...

    match_all: str
    match_any: str
    always_true: str


#: ``(segments, positive operator, negated, value kind, literal JSON text or None)``.
ConditionShape = tuple[tuple[Segment, ...], str, bool, str, str | None]


def condition_shape(condition: Condition, literal: bool = False) -> ConditionShape:
    op = condition.operator
    return (
        condition.path.segments,
        op.positive,
        op.negates is not None,
        json_type(condition.value),
        json.dumps(condition.value) if literal else None,
    )


def where_shape(
    conditions: Sequence[Condition], match: str, inline: Collection[int] = ()
) -> tuple[tuple[ConditionShape, ...], str]:
    return tuple(condition_shape(c, i in inline) for i, c in enumerate(conditions)), match


def order_sql(ordering: Ordering) -> str:
    """``ORDER BY`` terms: the column, then the key in the same direction (ties)."""
    direction = ordering.direction.upper()
    return f"r.{ordering.column} {direction}, r.key {direction}"


@dataclass(frozen=True)
class CompiledWhere:
    """A compiled ``where``: SQL text and, per condition, its parameter makers."""

    sql: str
    params: tuple[tuple[ParamMaker, ...], ...]

    def bind(self, conditions: Sequence[Condition]) -> list[Any]:
        return [
            make(condition.value)
            for condition, makers in zip(conditions, self.params, strict=True)
            for make in makers
        ]


#: Compiled ``where`` objects a compiler keeps by identity (``WhereCompiler.compile``).
_MAX_RECENT = 256


@dataclass(frozen=True)
class _Compiled:
    conditions: Sequence[Condition]
    sql: str
    params: tuple[Any, ...]


class WhereCompiler:
    """Compiles ``where`` specs for one dialect, caching by shape."""

    def __init__(self, dialect: WhereDialect) -> None:
        self._dialect = dialect
        self.compile_shape = lru_cache(maxsize=1024)(self._compile_shape)
        self._recent: dict[tuple[int, str, Collection[int]], _Compiled] = {}

    def compile(
        self, conditions: Sequence[Condition], match: str, inline: Collection[int] = ()
    ) -> tuple[str, list[Any]]:
        """SQL for the conditions and the bound parameters for their values.

        The conditions at the positions in ``inline`` are written as literals.
        An equal ``where`` spec parses to the same tuple (``spec/memo.py``), so
        a repeated call finds its SQL and parameters by that object without
        computing the shape again; the entry holds the object, so its id is not
        reused while the entry lives.
        """
        if not isinstance(inline, (frozenset, tuple)):
            inline = frozenset(inline)
        key = (id(conditions), match, inline)
        known = self._recent.get(key)
        if known is not None and known.conditions is conditions:
            return known.sql, list(known.params)
        compiled = self.compile_shape(where_shape(conditions, match, inline))
        params = compiled.bind(conditions)
        if len(self._recent) >= _MAX_RECENT:
            self._recent.clear()
        self._recent[key] = _Compiled(conditions, compiled.sql, tuple(params))
        return compiled.sql, params

    def literal_predicate(self, conditions: Sequence[Condition], match: str, root: str) -> str:
        """Every condition as literals over the ``root`` column: a partial index's predicate."""
        shape = where_shape(conditions, match, range(len(conditions)))
        return self._compile_shape(shape, root).sql

    def _compile_shape(
        self, shape: tuple[tuple[ConditionShape, ...], str], root: str | None = None
    ) -> CompiledWhere:
        conditions, match = shape
        dialect = self._dialect
        if not conditions:
            return CompiledWhere(dialect.always_true, ())
        parts: list[str] = []
        params: list[tuple[ParamMaker, ...]] = []
        for segments, positive, negated, kind, literal in conditions:
            path = dialect.path_sql(segments) if root is None else dialect.path_sql(segments, root)
            if literal is None:
                operator = dialect.operators[positive]
                condition_sql, makers = bound(operator, path, kind, dialect.placeholder)
            else:
                condition_sql = dialect.literal_condition(path, positive, kind, json.loads(literal))
                makers = ()
            parts.append(dialect.negate(condition_sql) if negated else condition_sql)
            params.append(makers)
        joiner = dialect.match_all if match == "all" else dialect.match_any
        return CompiledWhere("(" + joiner.join(parts) + ")", tuple(params))
