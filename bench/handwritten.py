"""The baselines: what a careful engineer would write by hand with psycopg 3 or sqlite3.

Each method runs the same kind of single statement the store runs, on the
same table and indexes, with the same filter expressions (so the same
indexes apply), but with the JSON edits written inline (``||``,
``jsonb_set``/``json_set``) instead of the store's general mutation function,
and with no spec parsing in Python: what the store's design costs beyond the
statement itself. (It is not a bound: on PostgreSQL these statements are planned
on every call, where the store's claim settles on a cached generic plan, so the
store's claim can beat them; bench/analysis.md, ninth pass.) The claim writes
its table and status as literals, as the store writes a claimable set's
conditions, so a partial index serves it whenever one serves the store.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from airflow_atomic_store.timestamps import now as timestamp_now

_PG_CLAIM = """
WITH picked AS MATERIALIZED (
    SELECT r.key, r.created_at AS claim_order FROM atomic_store_rows AS r
    WHERE {filter}
    ORDER BY r.created_at ASC, r.key ASC LIMIT %s FOR UPDATE SKIP LOCKED)
UPDATE atomic_store_rows AS t
SET value = t.value || jsonb_build_object('status', 'in_flight',
                                         'claimedAt', %s::text, 'claimedBy', %s::text),
    record_timestamp = clock_timestamp()
FROM picked WHERE t.table_id = %s AND t.key = picked.key
RETURNING t.key, t.value, picked.claim_order
"""

#: The filter as the store writes a claimable set's conditions: literals, so the
#: set's partial index serves this statement too when the set exists.
SET_FILTER = "r.table_id = {table} AND (r.value -> 'status') = '\"pending\"'::jsonb"
#: The filter of :data:`PG_PARTIAL_INDEX`: the physical limit on the store's table.
TEXT_FILTER = "r.table_id = {table} AND r.value ->> 'status' = 'pending'"
#: A hand-made partial index holding only one queue's pending rows (``{table}``: its id).
_PG_PARTIAL_INDEX = (
    "CREATE INDEX IF NOT EXISTS bench_pending_partial ON atomic_store_rows (created_at, key) "
    "WHERE table_id = {table} AND value ->> 'status' = 'pending'"
)

#: A logical table's id in the store's catalog (``<storage table>_tables``), added if
#: missing: the rows table keys rows by it, so every statement here binds the integer.
_PG_TABLE_ID = (
    "WITH added AS (INSERT INTO atomic_store_rows_tables (name) VALUES (%s) "
    "ON CONFLICT (name) DO NOTHING RETURNING id) "
    "SELECT id FROM added UNION ALL SELECT id FROM atomic_store_rows_tables WHERE name = %s"
)


def pg_table_id(conn: psycopg.Connection[Any], table: str) -> int:
    """The id the store's catalog gives ``table`` (one loader at a time: no race to settle)."""
    row = conn.execute(_PG_TABLE_ID, (table, table)).fetchone()
    assert row is not None
    return int(row[0])


def pg_partial_index(table_id: int) -> str:
    """The hand-made partial index of one queue, its table id a literal."""
    return _PG_PARTIAL_INDEX.format(table=sql.Literal(table_id).as_string(None))


def pg_filter(form: str, table_id: int) -> str:
    """``form`` with the table id as a literal quoted by psycopg."""
    return form.format(table=sql.Literal(table_id).as_string(None))


_PG_GUARDED_DECREMENT = """
UPDATE atomic_store_rows AS r
SET value = jsonb_set(r.value, '{tokens}', to_jsonb((r.value ->> 'tokens')::bigint - 1)),
    record_timestamp = clock_timestamp()
WHERE r.table_id = %s AND r.key = %s
  AND (CASE WHEN jsonb_typeof(r.value -> 'tokens') = 'number'
            THEN (r.value -> 'tokens')::numeric > 0 END)
RETURNING r.value
"""

_PG_INCREMENT = """
UPDATE atomic_store_rows AS r
SET value = jsonb_set(r.value, '{n}', to_jsonb(COALESCE((r.value ->> 'n')::bigint, 0) + 1)),
    record_timestamp = clock_timestamp()
WHERE r.table_id = %s AND r.key = %s
RETURNING r.value
"""

_PG_SEED = """
INSERT INTO atomic_store_rows AS t (table_id, key, value) VALUES (%s, %s, %s)
ON CONFLICT (table_id, key) DO UPDATE SET value = t.value
RETURNING t.value, (t.xmax = 0) AS inserted
"""

_PG_UPSERT_INCREMENT = """
INSERT INTO atomic_store_rows AS t (table_id, key, value) VALUES (%s, %s, %s)
ON CONFLICT (table_id, key) DO UPDATE
SET value = jsonb_set(t.value, '{n}', to_jsonb(COALESCE((t.value ->> 'n')::bigint, 0) + 1)),
    record_timestamp = clock_timestamp()
RETURNING t.value, (t.xmax = 0) AS inserted
"""


class HandwrittenPostgres:
    """One autocommit psycopg 3 connection, one statement per operation."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self._claims: dict[tuple[str, str], bytes] = {}
        self._ids: dict[str, int] = {}

    def _id(self, table: str) -> int:
        if table not in self._ids:
            self._ids[table] = pg_table_id(self.conn, table)
        return self._ids[table]

    def claim(
        self, table: str, limit: int, claimer: str, form: str = SET_FILTER
    ) -> list[tuple[str, Any]]:
        """Claim ``limit`` pending rows; ``form`` is :data:`SET_FILTER` or :data:`TEXT_FILTER`."""
        statement = self._claims.get((form, table))
        if statement is None:
            statement = _PG_CLAIM.format(filter=pg_filter(form, self._id(table))).encode()
            self._claims[(form, table)] = statement
        args = (limit, timestamp_now(), claimer, self._id(table))
        rows = self.conn.execute(statement, args).fetchall()
        rows.sort(key=lambda row: (row[2], row[0]))  # RETURNING has no order
        return [(key, value) for key, value, _ in rows]

    def guarded_decrement(self, table: str, key: str) -> Any:
        row = self.conn.execute(_PG_GUARDED_DECREMENT, (self._id(table), key)).fetchone()
        return None if row is None else row[0]

    def increment(self, table: str, key: str) -> Any:
        row = self.conn.execute(_PG_INCREMENT, (self._id(table), key)).fetchone()
        return None if row is None else row[0]

    def seed(self, table: str, key: str, value: dict[str, Any]) -> tuple[Any, bool]:
        row = self.conn.execute(_PG_SEED, (self._id(table), key, Jsonb(value))).fetchone()
        assert row is not None
        return row[0], bool(row[1])

    def upsert_increment(self, table: str, key: str, value: dict[str, Any]) -> tuple[Any, bool]:
        row = self.conn.execute(
            _PG_UPSERT_INCREMENT, (self._id(table), key, Jsonb(value))
        ).fetchone()
        assert row is not None
        return row[0], bool(row[1])

    def close(self) -> None:
        self.conn.close()


_SQLITE_INCREMENT = """
UPDATE atomic_store_rows
SET value = json_set(value, '$.n', coalesce(json_extract(value, '$.n'), 0) + 1),
    record_timestamp = ?
WHERE table_name = ? AND key = ?
RETURNING value
"""

_SQLITE_CLAIM = """
UPDATE atomic_store_rows
SET value = json_set(value, '$.status', 'in_flight', '$.claimedAt', ?, '$.claimedBy', ?),
    record_timestamp = ?
WHERE table_name = ? AND key IN (
    SELECT r.key FROM atomic_store_rows AS r
    WHERE r.table_name = ? AND json_extract(r.value, '$.status') = 'pending'
    ORDER BY r.created_at ASC, r.key ASC LIMIT ?)
RETURNING key, value
"""


#: The same claim through a hand-made partial index of the bench queue's pending
#: rows, named with ``INDEXED BY`` (SQLite's planner prefers the ``created_at`` index).
_SQLITE_CLAIM_PARTIAL = """
UPDATE atomic_store_rows
SET value = json_set(value, '$.status', 'in_flight', '$.claimedAt', ?, '$.claimedBy', ?),
    record_timestamp = ?
WHERE table_name = 'jobs' AND key IN (
    SELECT r.key FROM atomic_store_rows AS r INDEXED BY bench_pending_partial
    WHERE r.table_name = 'jobs' AND json_extract(r.value, '$.status') = 'pending'
    ORDER BY r.created_at ASC, r.key ASC LIMIT ?)
RETURNING key, value
"""

SQLITE_PARTIAL_INDEX = (
    "CREATE INDEX IF NOT EXISTS bench_pending_partial ON atomic_store_rows (created_at, key) "
    "WHERE table_name = 'jobs' AND json_extract(value, '$.status') = 'pending'"
)


class HandwrittenSqlite:
    """sqlite3 in autocommit with the store's pragmas; each operation is one statement."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")

    def increment(self, table: str, key: str) -> Any:
        row = self.conn.execute(_SQLITE_INCREMENT, (timestamp_now(), table, key)).fetchone()
        return None if row is None else row[0]

    def claim(self, table: str, limit: int, claimer: str) -> list[tuple[str, Any]]:
        stamp = timestamp_now()
        return self.conn.execute(
            _SQLITE_CLAIM, (stamp, claimer, stamp, table, table, limit)
        ).fetchall()

    def claim_partial(
        self, limit: int, claimer: str, *, decode: bool = False
    ) -> list[tuple[str, Any]]:
        """Claim from the ``jobs`` queue through :data:`SQLITE_PARTIAL_INDEX`.

        ``decode``: values as Python objects (``json.loads`` per row), as the
        store returns them and psycopg returns ``jsonb``; else their JSON text.
        """
        stamp = timestamp_now()
        rows = self.conn.execute(_SQLITE_CLAIM_PARTIAL, (stamp, claimer, stamp, limit)).fetchall()
        return [(key, json.loads(value)) for key, value in rows] if decode else rows

    def close(self) -> None:
        self.conn.close()
