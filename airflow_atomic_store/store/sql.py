"""The SQL both drivers share, spelled per backend: ``where`` compiling, rows, inspection.

The ``where`` compiler walks the parsed spec once and produces SQL text with
*named* placeholders (``w0``, ``w1``… in the order the text holds them) plus
one parameter maker per placeholder. Each operator writes its values through a
:data:`Bind`, which the compiler answers with a placeholder (noting the maker)
or with the value as a literal, so a value's place is chosen when the text is
written, never searched for afterwards. The SQL depends only on the spec's
*shape* (paths, operators, value kinds, match mode), never on its values, so it
is cached and a hot loop binds new values into an already-built statement.

Paths enter the text as literals quoted by the driver, so PostgreSQL can match
an expression index such as ``(value -> 'status')``. Values are bound, except
the conditions a claimable set covers (``spec/claim_sets.py``): those are
written as the driver's own literals, so the planner can prove the set's
partial-index predicate from the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from importlib import resources
from operator import itemgetter
from typing import Any, Protocol

from airflow_atomic_store.spec import Condition, Ordering
from airflow_atomic_store.spec.paths import Segment
from airflow_atomic_store.spec.values import json_type
from airflow_atomic_store.store.contract import (
    Activity,
    Claim,
    Row,
    RowFilter,
    StoredReceipt,
    StoredRow,
)

ParamMaker = Callable[[Any], Any]

Bind = Callable[[ParamMaker], str]
"""Where an operator's SQL takes the condition value: given how to turn the value into
a parameter, the text to write there, a placeholder or the value as a literal. The
operator calls it in the order its text holds the values."""

OperatorSQL = Callable[["PathSQL", str, Bind], str]
"""``(path expressions, value kind, bind) -> SQL`` for one positive operator."""

#: A statement's parameters, by name.
Params = dict[str, Any]


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
    #: A named placeholder, ``{}`` standing for the name: ``%({})s`` or ``:{}``.
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
    """A compiled ``where``: SQL text and, per condition, its parameters' names and makers."""

    sql: str
    params: tuple[tuple[tuple[str, ParamMaker], ...], ...]

    def bind(self, conditions: Sequence[Condition]) -> Params:
        return {
            name: make(condition.value)
            for condition, makers in zip(conditions, self.params, strict=True)
            for name, make in makers
        }


#: Compiled ``where`` objects a compiler keeps by identity (``WhereCompiler.compile``).
_MAX_RECENT = 256


@dataclass(frozen=True)
class _Compiled:
    conditions: Sequence[Condition]
    sql: str
    params: Params


class WhereCompiler:
    """Compiles ``where`` specs for one dialect, caching by shape."""

    def __init__(self, dialect: WhereDialect) -> None:
        self._dialect = dialect
        self.compile_shape = lru_cache(maxsize=1024)(self._compile_shape)
        self._recent: dict[tuple[int, str, Collection[int]], _Compiled] = {}

    def compile(
        self, conditions: Sequence[Condition], match: str, inline: Collection[int] = ()
    ) -> tuple[str, Params]:
        """SQL for the conditions and their bound parameters (``w0``, ``w1``…; do not
        change the mapping: it is shared with later calls).

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
            return known.sql, known.params
        compiled = self.compile_shape(where_shape(conditions, match, inline))
        params = compiled.bind(conditions)
        if len(self._recent) >= _MAX_RECENT:
            self._recent.clear()
        self._recent[key] = _Compiled(conditions, compiled.sql, params)
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
        params: list[tuple[tuple[str, ParamMaker], ...]] = []
        names = (f"w{number}" for number in range(1_000_000))
        for segments, positive, negated, kind, literal in conditions:
            path = dialect.path_sql(segments) if root is None else dialect.path_sql(segments, root)
            if literal is None:
                condition_sql, makers = _bound(dialect, positive, path, kind, names)
            else:
                condition_sql = dialect.literal_condition(path, positive, kind, json.loads(literal))
                makers = ()
            parts.append(dialect.negate(condition_sql) if negated else condition_sql)
            params.append(makers)
        joiner = dialect.match_all if match == "all" else dialect.match_any
        return CompiledWhere("(" + joiner.join(parts) + ")", tuple(params))


def _bound(
    dialect: WhereDialect, positive: str, path: PathSQL, kind: str, names: Iterator[str]
) -> tuple[str, tuple[tuple[str, ParamMaker], ...]]:
    """The operator's SQL with a fresh named placeholder for each value, and their makers."""
    makers: list[tuple[str, ParamMaker]] = []

    def bind(make: ParamMaker) -> str:
        name = next(names)
        makers.append((name, make))
        return dialect.placeholder.format(name)

    return dialect.operators[positive](path, kind, bind), tuple(makers)


# -- rows as the drivers hand them back ----------------------------------------------

_COLUMN_THEN_KEY = itemgetter(2, 0)


def decoded(rows: Sequence[tuple[str, str]]) -> list[Row]:
    """``(key, JSON text)`` rows with their values decoded, in one ``json.loads``.

    Every stored value is one JSON document, so a batch joined into one array
    decodes to the same values in one call instead of one per row.
    """
    if len(rows) < 2:
        return [(key, json.loads(value)) for key, value in rows]
    values = json.loads("[" + ",".join([value for _, value in rows]) + "]")
    return [(row[0], value) for row, value in zip(rows, values, strict=True)]


def in_claim_order(rows: Sequence[tuple[str, str, Any]], ordering: Ordering) -> list[Row]:
    """``(key, value text, order column)`` rows as decoded ``(key, value)`` in claim order.

    ``RETURNING`` gives no order, so it is restored here as ``order_sql``
    orders: keys are unique in a table, so ``(column, key)`` is a total order, and
    Python compares ``str`` by code point, which is SQLite's ``BINARY`` order and
    PostgreSQL's ``"C"`` order on UTF-8 text (a keyed PostgreSQL claim's receipt
    records its rows in this same order, in SQL).
    """
    ordered = sorted(rows, key=_COLUMN_THEN_KEY, reverse=ordering.direction == "desc")
    return decoded([(key, value) for key, value, _ in ordered])


# -- inspection: the same statements on both backends --------------------------------


@dataclass(frozen=True)
class SnapshotDialect:
    """What the backends' snapshots differ in: the same statements, spelled per backend.

    :param placeholder: the driver's named placeholder, ``{}`` standing for the name.
    :param string_type: the name the backend's JSON type test gives a string.
    :param byte_order: appended to text that must sort by bytes, as Python does.
    :param path_sql: the backend's compiled field path (``.type`` and ``.text``).
    :param literal: the backend's SQL literal for a value (driver quoting).
    :param execute: ``execute(handle, statement, params)`` -> every row.
    :param parse_time: a stored timestamp as an aware ``datetime``.
    :param parse_value: a stored value as a dict.
    :param table_column: the rows table's column that says which logical table a
        row is in (the name on SQLite, the table's id on PostgreSQL).
    :param table_counts: rows per logical table name; ``{table}`` is the rows table,
        ``{tables}`` the catalog of logical tables (where the backend has one).
    :param time_cast: appended to the ``since`` placeholder (compared with timestamps).
    :param minutes_since: whole minutes from ``{mark}`` to ``{column}``.
    """

    placeholder: str
    string_type: str
    byte_order: str
    path_sql: Callable[[tuple[str, ...]], Any]
    literal: Callable[[Any], str]
    execute: Callable[[Any, str, Params], list[Any]]
    parse_time: Callable[[Any], datetime]
    parse_value: Callable[[Any], dict[str, Any]]
    table_column: str
    table_counts: str
    time_cast: str
    minutes_since: str


@lru_cache(maxsize=4)
def _statements(dialect: SnapshotDialect) -> dict[str, str]:
    def string_at(field: str) -> str:
        """The top-level ``field`` when it holds a JSON string, else NULL."""
        path = dialect.path_sql((field,))
        text = f"(CASE WHEN {path.type} = '{dialect.string_type}' THEN {path.text} END)"
        return text + dialect.byte_order

    status, claimed_at, claimed_by = map(string_at, ("status", "claimedAt", "claimedBy"))
    named = dialect.placeholder.format
    since = named("since") + dialect.time_cast

    def per_minute(column: str, condition: str) -> str:
        minute = dialect.minutes_since.format(column=f"r.{column}", mark=since)
        return (
            f"SELECT {minute}, count(*) FROM {{table}} AS r "
            f"WHERE r.{dialect.table_column} = {named('table')} AND {condition} "
            f"AND r.{column} >= {since} GROUP BY 1"
        )

    return {
        "tables": dialect.table_counts,
        "statuses": (
            f"SELECT {status}, count(*) FROM {{table}} AS r "
            f"WHERE r.{dialect.table_column} = {named('table')} GROUP BY 1"
        ),
        "count": "SELECT count(*) FROM {table} AS r WHERE {table_filter} AND {where}",
        "oldest": "SELECT min(r.created_at) FROM {table} AS r WHERE {table_filter} AND {where}",
        "claims": (
            f"SELECT r.key, {claimed_at}, {claimed_by} FROM {{table}} AS r "
            "WHERE {table_filter} AND {where} "
            f"ORDER BY {claimed_at} IS NULL, {claimed_at}, r.key{dialect.byte_order} "
            f"LIMIT {named('limit')}"
        ),
        # ``{unfinished}``: the statuses of items still queued, as the driver's literals.
        "created": per_minute("created_at", f"{status} IS NOT NULL"),
        "finished": per_minute("record_timestamp", f"{status} NOT IN ({{unfinished}})"),
        "rows": (
            "SELECT r.key, r.value, r.created_at, r.record_timestamp FROM {table} AS r "
            "WHERE {table_filter} AND {where} "
            f"ORDER BY r.created_at, r.key LIMIT {named('limit')} OFFSET {named('offset')}"
        ),
        # A key and its steps: ``key/…`` sorts between ``key/`` and ``key0`` in byte
        # order (``/`` + 1 is ``0``), a range the primary key serves; no LIKE to escape.
        "receipts": (
            "SELECT idempotency_key, primitive, table_name, target, result, created_at, "
            f"expires_at FROM {{receipts}} WHERE idempotency_key = {named('key')} OR "
            f"(idempotency_key > {named('after')} AND idempotency_key < {named('before')}) "
            f"ORDER BY created_at, idempotency_key LIMIT {named('limit')}"
        ),
    }


class SqlSnapshot:
    """:class:`~airflow_atomic_store.store.contract.Snapshot` over one driver's open
    read-only transaction.

    :param storage_table: the rows table, quoted as an identifier by the driver.
    :param table_ref: what a logical table's rows hold in ``dialect.table_column``
        (None when no row can be in it).
    :param tables_catalog: the quoted catalog of logical tables, where there is one.
    :param receipts_table: the quoted table of idempotency receipts.
    """

    def __init__(
        self,
        dialect: SnapshotDialect,
        handle: Any,
        storage_table: str,
        where: WhereCompiler,
        table_ref: Callable[[str], Any],
        tables_catalog: str = "",
        receipts_table: str = "",
    ) -> None:
        self._dialect = dialect
        self._statements = _statements(dialect)
        self._handle = handle  # a psycopg cursor or a sqlite3 connection
        self._table = storage_table
        self._where = where
        self._table_ref = table_ref
        self._tables_catalog = tables_catalog
        self._receipts = receipts_table

    def _execute(self, statement: str, params: Params) -> list[Any]:
        return self._dialect.execute(self._handle, statement, params)

    def _run(self, kind: str, rows: RowFilter, **extra: Any) -> list[Any]:
        where_sql, params = self._where.compile(rows.where, rows.match, rows.inline)
        column, ref = self._dialect.table_column, self._table_ref(rows.table)
        if rows.inline:  # a literal table too, so a claimable set's predicate is provable
            table_filter = f"r.{column} = {self._dialect.literal(ref)}"
        else:
            table_filter = f"r.{column} = {self._dialect.placeholder.format('table')}"
        statement = self._statements[kind].format(
            table=self._table, table_filter=table_filter, where=where_sql
        )
        return self._execute(statement, {**params, "table": ref, **extra})

    def table_counts(self) -> list[tuple[str, int]]:
        statement = self._statements["tables"].format(
            table=self._table, tables=self._tables_catalog
        )
        return [(name, count) for name, count in self._execute(statement, {})]

    def status_counts(self, table: str) -> list[tuple[str | None, int]]:
        statement = self._statements["statuses"].format(table=self._table)
        rows = self._execute(statement, {"table": self._table_ref(table)})
        return [(status, count) for status, count in rows]

    def count(self, rows: RowFilter) -> int:
        return int(self._run("count", rows)[0][0])

    def oldest_created(self, rows: RowFilter) -> datetime | None:
        (oldest,) = self._run("oldest", rows)[0]
        return None if oldest is None else self._dialect.parse_time(oldest)

    def claims(self, rows: RowFilter, limit: int) -> list[Claim]:
        return [Claim(key, at, by) for key, at, by in self._run("claims", rows, limit=limit)]

    def activity(self, table: str, since: str, unfinished: Sequence[str]) -> Activity:
        ref = self._table_ref(table)
        statuses = ", ".join(self._dialect.literal(status) for status in unfinished)
        counts = []
        for kind in ("created", "finished"):
            statement = self._statements[kind].format(table=self._table, unfinished=statuses)
            rows = self._execute(statement, {"since": since, "table": ref})
            counts.append({int(minute): int(count) for minute, count in rows})
        return Activity(*counts)

    def receipts(self, key: str, limit: int) -> list[StoredReceipt]:
        parse_time, parse_value = self._dialect.parse_time, self._dialect.parse_value
        statement = self._statements["receipts"].format(receipts=self._receipts)
        found = self._execute(
            statement, {"key": key, "after": f"{key}/", "before": f"{key}0", "limit": limit}
        )
        return [
            StoredReceipt(
                name,
                primitive,
                table,
                target,
                parse_value(result),
                parse_time(at),
                parse_time(ends),
            )
            for name, primitive, table, target, result, at, ends in found
        ]

    def rows(self, rows: RowFilter, limit: int, offset: int) -> list[StoredRow]:
        parse_time, parse_value = self._dialect.parse_time, self._dialect.parse_value
        return [
            StoredRow(key, parse_value(value), parse_time(created), parse_time(updated))
            for key, value, created, updated in self._run("rows", rows, limit=limit, offset=offset)
        ]


# -- named static statements ---------------------------------------------------------

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def named_queries(package: str, file_name: str = "queries.sql") -> dict[str, str]:
    """``{name: statement}`` from a package's ``.sql`` file (the ``-- name: x`` sections,
    as procrastinate keeps its ``queries.sql``); comment lines are dropped."""
    return named_sections(resources.files(package).joinpath(file_name).read_text(encoding="utf-8"))


def named_sections(text: str) -> dict[str, str]:
    """``{name: statement}`` from ``.sql`` text (a SQLite migration's statements)."""
    sections = _NAME.split(text)[1:]
    queries: dict[str, str] = {}
    for name, body in zip(sections[::2], sections[1::2], strict=True):
        lines = [line.strip() for line in body.splitlines()]
        queries[name] = " ".join(line for line in lines if line and not line.startswith("--"))
    return queries
