"""What a backend offers for inspection: counts and pages read in one read-only snapshot.

``airflow_atomic_store.inspection`` shapes these answers for people and
scripts; the backends only count, group and page in SQL (a queue may hold
hundreds of thousands of rows, none of which should cross into Python to be
counted). A snapshot is one read-only transaction, so the figures of one
``stats`` call agree with each other, and no statement in it can write.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from airflow_atomic_store.spec import Condition

if TYPE_CHECKING:
    from airflow_atomic_store.store.compiler import WhereCompiler


@dataclass(frozen=True)
class StoredRow:
    """One row as stored, with the timestamps the store keeps (aware, UTC)."""

    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class StoredReceipt:
    """An idempotency receipt as stored (``store/receipts.py``): the key, its one use, the
    result it replays, and when it was written (aware, UTC)."""

    key: str
    primitive: str
    table: str
    target: str
    result: (
        Any  # as the backends record it: ``[value]``, ``[[key, value], …]``, ``[inserted, value]``
    )
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class Activity:
    """Counts per minute after a moment (minute 0 starts at it): a queue's arrivals and ends."""

    created: dict[int, int]
    finished: dict[int, int]


@dataclass(frozen=True)
class RowFilter:
    """Which rows of one logical table a snapshot query reads: one request object,
    so a new way to narrow a query is a field, not a parameter of every method.

    ``where``/``match`` are parsed specs. The positions in ``inline`` are
    conditions the caller fixed (``status equals pending``), written as
    literals so that a claimable set's partial index can serve them.
    """

    table: str
    where: Sequence[Condition] = ()
    match: str = "all"
    inline: Collection[int] = ()


@dataclass(frozen=True)
class Claim:
    """An in-flight row's claim fields: each a string in the row, else None."""

    key: str
    claimed_at: str | None
    claimed_by: str | None


class Snapshot(Protocol):
    """Read-only queries over one consistent view of the store (rows as :class:`RowFilter`)."""

    def table_counts(self) -> list[tuple[str, int]]:
        """Every logical table and its row count."""
        ...

    def status_counts(self, table: str) -> list[tuple[str | None, int]]:
        """Rows per string ``status``; rows without one are counted under None."""
        ...

    def count(self, rows: RowFilter) -> int: ...

    def oldest_created(self, rows: RowFilter) -> datetime | None:
        """The earliest ``created_at`` among the matching rows."""
        ...

    def claims(self, rows: RowFilter, limit: int) -> list[Claim]:
        """Matching rows' claim fields, oldest ``claimedAt`` first (rows without one last)."""
        ...

    def rows(self, rows: RowFilter, limit: int, offset: int) -> list[StoredRow]:
        """Matching rows in queue order (``created_at``, then key)."""
        ...

    def receipts(self, key: str, limit: int) -> list[StoredReceipt]:
        """The receipts of ``key`` and of its steps (keys ``key/…``), oldest first: what
        one task instance's keyed calls recorded (``templating.task_instance_key``)."""
        ...

    def activity(self, table: str, since: str, unfinished: Sequence[str]) -> Activity:
        """Rows with a string ``status`` per whole minute after ``since`` (canonical UTC):
        created then (``created_at``), and last written then with a status not in
        ``unfinished`` (``record_timestamp``)."""
        ...


@dataclass(frozen=True)
class SnapshotDialect:
    """What the backends' snapshots differ in: the same statements, spelled per backend.

    :param placeholder: the driver's positional placeholder (``%s`` or ``?``).
    :param string_type: the name the backend's JSON type test gives a string.
    :param byte_order: appended to text that must sort by bytes, as Python does.
    :param path_sql: the backend's compiled field path (``.type`` and ``.text``).
    :param literal: the backend's SQL literal for a value (driver quoting).
    :param execute: ``execute(handle, statement, params)`` -> every row; ``params``
        None means a statement without placeholders (run as it is).
    :param parse_time: a stored timestamp as an aware ``datetime``.
    :param parse_value: a stored value as a dict.
    :param table_column: the rows table's column that says which logical table a
        row is in (the name on SQLite, the table's id on PostgreSQL).
    :param table_counts: rows per logical table name; ``{table}`` is the rows table,
        ``{tables}`` the catalog of logical tables (where the backend has one).
    :param time_param: a placeholder for a canonical timestamp, compared with the
        timestamp columns.
    :param minutes_since: whole minutes from ``{mark}`` (a ``time_param``) to ``{column}``.
    """

    placeholder: str
    string_type: str
    byte_order: str
    path_sql: Callable[[tuple[str, ...]], Any]
    literal: Callable[[Any], str]
    execute: Callable[[Any, str, Sequence[Any] | None], list[Any]]
    parse_time: Callable[[Any], datetime]
    parse_value: Callable[[Any], dict[str, Any]]
    table_column: str
    table_counts: str
    time_param: str
    minutes_since: str


@lru_cache(maxsize=4)
def _statements(dialect: SnapshotDialect) -> dict[str, str]:
    def string_at(field: str) -> str:
        """The top-level ``field`` when it holds a JSON string, else NULL."""
        path = dialect.path_sql((field,))
        text = f"(CASE WHEN {path.type} = '{dialect.string_type}' THEN {path.text} END)"
        return text + dialect.byte_order

    status, claimed_at, claimed_by = map(string_at, ("status", "claimedAt", "claimedBy"))
    mark = dialect.placeholder

    def per_minute(column: str, condition: str) -> str:
        minute = dialect.minutes_since.format(column=f"r.{column}", mark=dialect.time_param)
        return (
            f"SELECT {minute}, count(*) FROM {{table}} AS r "
            f"WHERE r.{dialect.table_column} = {mark} AND {condition} "
            f"AND r.{column} >= {dialect.time_param} GROUP BY 1"
        )

    return {
        "tables": dialect.table_counts,
        "statuses": (
            f"SELECT {status}, count(*) FROM {{table}} AS r "
            f"WHERE r.{dialect.table_column} = {mark} GROUP BY 1"
        ),
        "count": "SELECT count(*) FROM {table} AS r WHERE {table_filter} AND {where}",
        "oldest": "SELECT min(r.created_at) FROM {table} AS r WHERE {table_filter} AND {where}",
        "claims": (
            f"SELECT r.key, {claimed_at}, {claimed_by} FROM {{table}} AS r "
            "WHERE {table_filter} AND {where} "
            f"ORDER BY {claimed_at} IS NULL, {claimed_at}, r.key{dialect.byte_order} "
            f"LIMIT {mark}"
        ),
        # ``{unfinished}``: the statuses of items still queued, as the driver's literals.
        "created": per_minute("created_at", f"{status} IS NOT NULL"),
        "finished": per_minute("record_timestamp", f"{status} NOT IN ({{unfinished}})"),
        "rows": (
            "SELECT r.key, r.value, r.created_at, r.record_timestamp FROM {table} AS r "
            "WHERE {table_filter} AND {where} "
            f"ORDER BY r.created_at, r.key LIMIT {mark} OFFSET {mark}"
        ),
        # A key and its steps: ``key/…`` sorts between ``key/`` and ``key0`` in byte
        # order (``/`` + 1 is ``0``), a range the primary key serves; no LIKE to escape.
        "receipts": (
            "SELECT idempotency_key, primitive, table_name, target, result, created_at, "
            f"expires_at FROM {{receipts}} WHERE idempotency_key = {mark} OR "
            f"(idempotency_key > {mark} AND idempotency_key < {mark}) "
            f"ORDER BY created_at, idempotency_key LIMIT {mark}"
        ),
    }


class SqlSnapshot:
    """:class:`Snapshot` over one backend's open read-only transaction.

    :param storage_table: the rows table, quoted as an identifier by the backend.
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

    def _execute(self, statement: str, params: Sequence[Any] | None = None) -> list[Any]:
        return self._dialect.execute(self._handle, statement, params)

    def _run(self, kind: str, rows: RowFilter, tail: Sequence[Any] = ()) -> list[Any]:
        where_sql, params = self._where.compile(rows.where, rows.match, rows.inline)
        column, ref = self._dialect.table_column, self._table_ref(rows.table)
        if rows.inline:  # a literal table too, so a claimable set's predicate is provable
            table_filter, head = f"r.{column} = {self._dialect.literal(ref)}", []
        else:
            table_filter, head = f"r.{column} = {self._dialect.placeholder}", [ref]
        statement = self._statements[kind].format(
            table=self._table, table_filter=table_filter, where=where_sql
        )
        return self._execute(statement, (*head, *params, *tail))

    def table_counts(self) -> list[tuple[str, int]]:
        statement = self._statements["tables"].format(
            table=self._table, tables=self._tables_catalog
        )
        return [(name, count) for name, count in self._execute(statement)]

    def status_counts(self, table: str) -> list[tuple[str | None, int]]:
        statement = self._statements["statuses"].format(table=self._table)
        rows = self._execute(statement, (self._table_ref(table),))
        return [(status, count) for status, count in rows]

    def count(self, rows: RowFilter) -> int:
        return int(self._run("count", rows)[0][0])

    def oldest_created(self, rows: RowFilter) -> datetime | None:
        (oldest,) = self._run("oldest", rows)[0]
        return None if oldest is None else self._dialect.parse_time(oldest)

    def claims(self, rows: RowFilter, limit: int) -> list[Claim]:
        return [Claim(key, at, by) for key, at, by in self._run("claims", rows, (limit,))]

    def activity(self, table: str, since: str, unfinished: Sequence[str]) -> Activity:
        ref = self._table_ref(table)
        statuses = ", ".join(self._dialect.literal(status) for status in unfinished)
        counts = []
        for kind in ("created", "finished"):
            statement = self._statements[kind].format(table=self._table, unfinished=statuses)
            rows = self._execute(statement, (since, ref, since))
            counts.append({int(minute): int(count) for minute, count in rows})
        return Activity(*counts)

    def rows(self, rows: RowFilter, limit: int, offset: int) -> list[StoredRow]:
        parse_time, parse_value = self._dialect.parse_time, self._dialect.parse_value
        return [
            StoredRow(key, parse_value(value), parse_time(created), parse_time(updated))
            for key, value, created, updated in self._run("rows", rows, (limit, offset))
        ]

    def receipts(self, key: str, limit: int) -> list[StoredReceipt]:
        parse_time, parse_value = self._dialect.parse_time, self._dialect.parse_value
        statement = self._statements["receipts"].format(receipts=self._receipts)
        found = self._execute(statement, (key, f"{key}/", f"{key}0", limit))
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
