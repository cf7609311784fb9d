"""The SQLite backend: each primitive is one ``BEGIN IMMEDIATE`` transaction.

``BEGIN IMMEDIATE`` takes SQLite's single write lock before reading, so the
read, the guard and the write cannot interleave with another writer in any
process; concurrent writers wait on the busy timeout instead of failing with
"database is locked". Inside that lock the guard and claim filter run as
compiled SQL and mutations run through the reference ``apply``, so SQLite's
mutation semantics are the oracle's by construction; the exception is a list
of top-level ``set``s, which ``json_set`` computes exactly, so that claim or
update is one ``UPDATE … RETURNING`` (``mutations.py``).
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

from airflow_atomic_store import timestamps
from airflow_atomic_store.exceptions import AtomicStoreError, StoreUnavailableError
from airflow_atomic_store.spec import Condition, Mutation, Ordering, apply
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store.backend import ClaimSetGone, Row, check_storage_table
from airflow_atomic_store.store.claim_sets import ChosenSet, Origin, StoredSet, stored_set
from airflow_atomic_store.store.compiler import WhereCompiler, order_sql
from airflow_atomic_store.store.receipts import Receipt
from airflow_atomic_store.store.snapshot import Snapshot
from airflow_atomic_store.store.sqlite.mutations import (
    in_claim_order,
    json_set_params,
    json_set_sql,
    plain_fields,
)
from airflow_atomic_store.store.sqlite.where import (
    SqliteWhere,
    literal,
    register_functions,
)

DEFAULT_BUSY_TIMEOUT = 60.0
#: Compiled selections a backend keeps (``SqliteBackend._compile_select``).
_MAX_COMPILED = 256
_NOTHING: Any = object()

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {table} (
    table_name TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    created_at TEXT NOT NULL,
    record_timestamp TEXT NOT NULL,
    PRIMARY KEY (table_name, key)
);
CREATE INDEX IF NOT EXISTS {table}_created_idx ON {table} (table_name, created_at, key);
CREATE TABLE IF NOT EXISTS {table}_claim_sets (
    name TEXT PRIMARY KEY,
    table_name TEXT NOT NULL,
    spec TEXT NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('declared', 'automatic')),
    problem TEXT,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS {table}_receipts (
    idempotency_key TEXT PRIMARY KEY,
    primitive TEXT NOT NULL,
    table_name TEXT NOT NULL,
    target TEXT NOT NULL,
    result TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS {table}_receipts_expiry_idx ON {table}_receipts (expires_at);
"""

#: ``{source}`` is the table, and with a claimable set ``INDEXED BY`` its index:
#: SQLite's planner prefers the ``created_at`` index over a partial one even
#: after ``ANALYZE``, and walks every consumed row in it.
_SELECT = (
    "SELECT r.key, r.value FROM {source} WHERE {table_filter} AND {where} ORDER BY {order} LIMIT ?"
)
_PICK = "SELECT r.rowid FROM {source} WHERE {table_filter} AND {where} ORDER BY {order} LIMIT ?"

_STATEMENTS = {
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


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_TRANSIENT_MESSAGES = ("locked", "busy", "unable to open", "disk i/o")


def _is_transient(exc: sqlite3.OperationalError) -> bool:
    """Lock waits that outlasted the busy timeout and I/O trouble: a retry may succeed."""
    return any(text in str(exc).lower() for text in _TRANSIENT_MESSAGES)


def _decoded(rows: Sequence[tuple[str, str]]) -> list[Row]:
    """``(key, JSON text)`` rows with their values decoded, in one ``json.loads``.

    Every stored value is one JSON document the store wrote, so a batch joined
    into one array decodes to the same values; one call instead of one per row
    was about a third of the decoding time of a claim of 10.
    """
    if len(rows) < 2:
        return [(key, json.loads(value)) for key, value in rows]
    values = json.loads("[" + ",".join([value for _, value in rows]) + "]")
    return [(row[0], value) for row, value in zip(rows, values, strict=True)]


def path_from_url(url: str) -> str:
    """``sqlite:////abs/path.db`` → ``/abs/path.db``; ``sqlite:///rel.db`` → ``rel.db``."""
    path = url.split("://", 1)[1]
    return path[1:] if path.startswith("/") else path


class SqliteBackend:
    def __init__(
        self,
        path: str,
        *,
        storage_table: str,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    ) -> None:
        self._path = path
        self._table = check_storage_table(storage_table)
        self._busy_timeout = busy_timeout
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._where = WhereCompiler(SqliteWhere())
        self._statement = lru_cache(maxsize=512)(self._build_statement)
        #: ``_compile_select``'s results by the parsed ``where`` object (see there).
        self._compiled: dict[tuple[Any, ...], tuple[Sequence[Condition], str, tuple[Any, ...]]] = {}

    def _open(self) -> sqlite3.Connection:
        parent = Path(self._path).parent
        parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(
            self._path,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:  # a connection whose set-up fails is closed, not left to the collector
            register_functions(connection)
            self._use_wal(connection)
            connection.execute("PRAGMA synchronous=NORMAL")
            self._ensure_schema(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _ensure_schema(self, connection: sqlite3.Connection) -> None:
        """Create the table and its indexes unless they exist; only then take the write lock.

        Every store opens a connection (every Airflow task does), and a read-only
        task should not queue behind the writers just to learn the schema exists.
        """
        names = {
            self._table,
            f"{self._table}_created_idx",
            f"{self._table}_claim_sets",
            f"{self._table}_receipts",
            f"{self._table}_receipts_expiry_idx",
        }
        present = {
            name
            for (name,) in connection.execute(
                f"SELECT name FROM sqlite_master WHERE name IN ({', '.join('?' * len(names))})",
                tuple(sorted(names)),
            )
        }
        if present == names:
            return
        connection.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA.format(table=self._table).split(";"):
                if statement.strip():
                    connection.execute(statement)
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise

    def _use_wal(self, connection: sqlite3.Connection) -> None:
        """Switch a new database to WAL (persistent, so only its first user does).

        Changing the journal mode needs an exclusive lock and SQLite reports
        "database is locked" at once, without the busy handler, while another
        process is opening the same fresh file; so retry until the busy timeout.
        """
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                if connection.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    connection.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _is_transient(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.005, 0.05))

    @contextmanager
    def _transaction(
        self, *, write: bool = True, alone: bool = False
    ) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` (or, to only read, ``BEGIN``) … ``COMMIT``.

        Any exception rolls back, so a primitive never half-applies. ``alone``:
        the caller runs one write statement, which SQLite runs as a transaction
        of its own that takes the write lock (waiting on the busy timeout) before
        it reads, as ``BEGIN IMMEDIATE`` does; the explicit pair would only add
        two round trips (about a tenth of a claim of 10).
        """
        with self._lock:
            try:
                if self._connection is None:
                    self._connection = self._open()
                connection = self._connection
                if alone:
                    yield connection
                    return
                connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield connection
                except BaseException:
                    connection.execute("ROLLBACK")
                    raise
                connection.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                if _is_transient(exc):
                    raise StoreUnavailableError(f"SQLite store unavailable: {exc}") from exc
                raise AtomicStoreError(f"SQLite store error: {exc}") from exc
            except sqlite3.Error as exc:
                raise AtomicStoreError(f"SQLite store error: {exc}") from exc
            except OSError as exc:  # the store file's directory cannot be created
                raise StoreUnavailableError(f"SQLite store unavailable: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """Read-only inspection queries in one read transaction (``inspect.py``)."""
        from airflow_atomic_store.store.sqlite.inspect import snapshot

        return snapshot(self._transaction(write=False), self._table, self._where)

    # -- claimable sets -----------------------------------------------------

    def load_claim_sets(self, table: str | None) -> list[StoredSet]:
        with self._transaction(write=False) as connection:
            rows = connection.execute(self._statement("load_sets"), (table, table)).fetchall()
        return [
            stored_set(name, json.loads(spec), origin, problem, bool(present))
            for name, spec, origin, problem, present in rows
        ]

    def build_claim_set(
        self,
        claim_set: ClaimSet,
        origin: Origin,
        *,
        timeout: float | None,
        automatic_limit: int,
    ) -> StoredSet | None:
        """Record the set and build its partial index in one write transaction.

        SQLite has one writer at a time, so the build holds up other writers for
        as long as it takes (about a second per million rows); ``timeout`` is
        not applied.
        """
        name = claim_set.index_name(self._table)
        where = self._where.literal_predicate(claim_set.conditions, claim_set.match, "value")
        with self._transaction() as connection:
            if origin == "automatic":
                count = connection.execute(
                    self._statement("count_automatic_sets"), (claim_set.table, name)
                ).fetchone()[0]
                if count >= automatic_limit:
                    return None
            connection.execute(
                self._statement("record_set"),
                (name, claim_set.table, dumps(claim_set.to_json()), origin, timestamps.now()),
            )
            connection.execute(
                f"CREATE INDEX IF NOT EXISTS {name} ON {self._table} "
                f"({claim_set.column}, key) "
                f"WHERE table_name = {literal(claim_set.table)} AND {where}"
            )
        return next(s for s in self.load_claim_sets(claim_set.table) if s.name == name)

    def ensure_record_index(self, *, timeout: float) -> bool:
        """One write transaction, like a set's build (``timeout`` is not applied)."""
        with self._transaction() as connection:
            connection.execute(
                f"CREATE INDEX IF NOT EXISTS {self._table}_record_idx "
                f"ON {self._table} (table_name, record_timestamp, key)"
            )
        return True

    def drop_claim_set(self, name: str) -> bool:
        with self._transaction() as connection:
            known = connection.execute(self._statement("forget_set"), (name,)).rowcount > 0
            if name.startswith(f"{self._table}_set_") and _IDENTIFIER.fullmatch(name):
                present = connection.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)
                ).fetchone()
                connection.execute(f"DROP INDEX IF EXISTS {name}")
                return known or present is not None
        return known

    def _build_statement(
        self,
        kind: str,
        where_sql: str = "",
        order_sql: str = "",
        source: str = "",
        table_filter: str = "r.table_name = ?",
        mutation: str = "",
    ) -> str:
        return _STATEMENTS[kind].format(
            table=self._table,
            where=where_sql,
            order=order_sql,
            source=source or f"{self._table} AS r",
            table_filter=table_filter,
            mutation=mutation,
        )

    def _compile_select(
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
        statement, params = self._compile_select_anew(
            kind, table, where, match, ordering, claim_set, mutation
        )
        if len(self._compiled) >= _MAX_COMPILED:
            self._compiled.clear()
        self._compiled[key] = (where, statement, tuple(params))
        return statement, params

    def _compile_select_anew(
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
            where_sql, params = self._where.compile(where, match)
            statement = self._statement(kind, where_sql, order_sql(ordering), mutation=mutation)
            return statement, [table, *params]
        where_sql, params = self._where.compile(where, match, claim_set.inline)
        statement = self._statement(
            kind,
            where_sql,
            order_sql(ordering),
            f"{self._table} AS r INDEXED BY {claim_set.name}",
            f"r.table_name = {literal(table)}",
            mutation,
        )
        return statement, params

    @staticmethod
    def _fetch(
        connection: sqlite3.Connection,
        statement: str,
        params: Sequence[Any],
        claim_set: ChosenSet | None,
    ) -> list[Any]:
        """All rows of a statement that may name a claimable set's index, which may be gone."""
        try:
            return connection.execute(statement, params).fetchall()
        except sqlite3.OperationalError as exc:
            if claim_set is not None and "no such index" in str(exc):
                raise ClaimSetGone(claim_set.name) from exc
            raise

    def _select(
        self,
        connection: sqlite3.Connection,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        claim_set: ChosenSet | None = None,
    ) -> list[Row]:
        statement, params = self._compile_select("select", table, where, match, ordering, claim_set)
        rows = self._fetch(connection, statement, (*params, limit), claim_set)
        return _decoded(rows)

    def count(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        claim_set: ChosenSet | None = None,
    ) -> tuple[int, str | None]:
        statement, params = self._compile_select("count", table, where, match, ordering, claim_set)
        with self._transaction(write=False) as connection:
            rows = self._fetch(connection, statement, (*params, limit), claim_set)
        return (int(rows[0][0]), rows[0][1]) if rows else (0, None)

    def explain_claim(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        claim_set: ChosenSet | None = None,
        *,
        generic: bool = False,
    ) -> str:
        """SQLite plans a statement without its parameters' values: every plan is generic."""
        statement, params = self._compile_select(
            "explain_claim", table, where, match, ordering, claim_set
        )
        with self._transaction(write=False) as connection:
            rows = self._fetch(connection, statement, (*params, limit), claim_set)
        return "\n".join(str(row[-1]) for row in rows)

    # -- primitives ---------------------------------------------------------

    def put(self, table: str, key: str, value: dict[str, Any]) -> None:
        now = timestamps.now()
        with self._transaction() as connection:
            connection.execute(self._statement("put"), (table, key, dumps(value), now, now))

    def get(self, table: str, key: str) -> dict[str, Any] | None:
        with self._transaction(write=False) as connection:
            row = connection.execute(self._statement("get"), (table, key)).fetchone()
        return None if row is None else json.loads(row[0])

    def delete(self, table: str, key: str) -> bool:
        with self._transaction() as connection:
            return connection.execute(self._statement("delete"), (table, key)).rowcount > 0

    def query(
        self, table: str, where: Sequence[Condition], match: str, ordering: Ordering, limit: int
    ) -> list[Row]:
        with self._transaction(write=False) as connection:
            return self._select(connection, table, where, match, ordering, limit)

    def update(
        self,
        table: str,
        key: str,
        where: Sequence[Condition],
        match: str,
        mutations: Sequence[Mutation],
        receipt: Receipt | None = None,
    ) -> tuple[dict[str, Any] | None, bool]:
        where_sql, params = self._where.compile(where, match)
        fields = plain_fields(mutations)
        with self._transaction(alone=fields is not None and receipt is None) as connection:
            recorded = self._recorded(connection, receipt)
            if recorded is not _NOTHING:
                return recorded[0], True
            if fields is not None:  # one UPDATE … RETURNING: no read, no Python apply
                row = connection.execute(
                    self._statement("guarded_update", where_sql, mutation=json_set_sql(fields)),
                    (*json_set_params(mutations), timestamps.now(), table, key, *params),
                ).fetchone()
                new_value = None if row is None else json.loads(row[0])
            else:
                row = connection.execute(
                    self._statement("guarded", where_sql), (table, key, *params)
                ).fetchone()
                new_value = None if row is None else apply(mutations, json.loads(row[0]))
                if new_value is not None:
                    connection.execute(
                        self._statement("write"), (dumps(new_value), timestamps.now(), table, key)
                    )
            self._record(connection, receipt, [new_value])
        return new_value, False

    def claim(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        mutations: Sequence[Mutation],
        claim_set: ChosenSet | None = None,
        receipt: Receipt | None = None,
    ) -> tuple[list[Row], bool]:
        fields = plain_fields(mutations)
        # Ordered by created_at and without a receipt the claim is one statement.
        alone = fields is not None and receipt is None and ordering.column == "created_at"
        with self._transaction(alone=alone) as connection:
            recorded = self._recorded(connection, receipt)
            if recorded is not _NOTHING:
                return [(key, value) for key, value in recorded], True
            if fields is not None:
                claimed = self._claim_in_sql(
                    connection, table, where, match, ordering, limit, mutations, fields, claim_set
                )
            else:
                picked = self._select(connection, table, where, match, ordering, limit, claim_set)
                claimed = [(key, apply(mutations, value)) for key, value in picked]
                now = timestamps.now()
                connection.executemany(
                    self._statement("write"),
                    [(dumps(value), now, table, key) for key, value in claimed],
                )
            self._record(connection, receipt, [list(row) for row in claimed])
        return claimed, False

    def _claim_in_sql(
        self,
        connection: sqlite3.Connection,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        mutations: Sequence[Mutation],
        fields: tuple[str, ...],
        claim_set: ChosenSet | None,
    ) -> list[Row]:
        """The claim as ``UPDATE … WHERE rowid IN (the selection) RETURNING``, re-sorted.

        Ordered by ``record_timestamp`` the old value is needed for the order
        and RETURNING shows only the new one, so the rows are picked first.
        """
        mutation = json_set_sql(fields)
        head = (*json_set_params(mutations), timestamps.now())
        if ordering.column == "created_at":
            statement, params = self._compile_select(
                "claim_update", table, where, match, ordering, claim_set, mutation
            )
            rows = self._fetch(connection, statement, (*head, *params, limit), claim_set)
            return _decoded(in_claim_order(rows, ordering))
        statement, params = self._compile_select("pick", table, where, match, ordering, claim_set)
        picked = [row[0] for row in self._fetch(connection, statement, (*params, limit), claim_set)]
        if not picked:
            return []
        position = {rowid: number for number, rowid in enumerate(picked)}
        rows = connection.execute(
            self._statement("update_picked", mutation=mutation), (*head, dumps(picked))
        ).fetchall()
        rows.sort(key=lambda row: position[row[0]])
        return _decoded([(key, value) for _, key, value in rows])

    def upsert(
        self,
        table: str,
        key: str,
        insert_value: dict[str, Any],
        mutations: Sequence[Mutation],
        receipt: Receipt | None = None,
    ) -> tuple[tuple[bool, dict[str, Any]], bool]:
        with self._transaction() as connection:
            recorded = self._recorded(connection, receipt)
            if recorded is not _NOTHING:
                inserted, value = recorded
                return (bool(inserted), value), True
            row = connection.execute(self._statement("get"), (table, key)).fetchone()
            now = timestamps.now()
            if row is None:
                connection.execute(
                    self._statement("insert"), (table, key, dumps(insert_value), now, now)
                )
                inserted, value = True, insert_value
            else:
                inserted, value = False, json.loads(row[0])
                if mutations:
                    value = apply(mutations, value)
                    connection.execute(self._statement("write"), (dumps(value), now, table, key))
            self._record(connection, receipt, [inserted, value])
        return (inserted, value), False

    # -- receipts -----------------------------------------------------------

    def _recorded(self, connection: sqlite3.Connection, receipt: Receipt | None) -> Any:
        """The result recorded under the receipt's key, inside the write transaction.

        The transaction holds SQLite's write lock, so a concurrent call with the
        same key waits and then finds this call's receipt. An expired receipt is
        removed: after its retention a key is new.
        """
        if receipt is None:
            return _NOTHING
        row = connection.execute(
            self._statement("read_receipt"), (timestamps.now(), receipt.key)
        ).fetchone()
        if row is None:
            return _NOTHING
        primitive, table, target, result, expired = row
        if expired:
            connection.execute(self._statement("forget_receipt"), (receipt.key,))
            return _NOTHING
        receipt.check_reuse(primitive, table, target)
        return json.loads(result)

    def _record(self, connection: sqlite3.Connection, receipt: Receipt | None, result: Any) -> None:
        if receipt is None:
            return
        connection.execute(
            self._statement("record_receipt"),
            (
                receipt.key,
                receipt.primitive,
                receipt.table,
                receipt.target,
                dumps(result),
                timestamps.now(),
                timestamps.shifted(timedelta(seconds=receipt.retention)),
            ),
        )

    def purge_receipts(self, limit: int) -> int:
        with self._transaction() as connection:
            return connection.execute(
                self._statement("purge_receipts"), (timestamps.now(), limit)
            ).rowcount
