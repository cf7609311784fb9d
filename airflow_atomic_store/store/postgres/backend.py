"""The PostgreSQL backend: every primitive is one statement in autocommit.

Update is ``UPDATE … WHERE guard RETURNING``: PostgreSQL re-checks the guard
against the newest row version when it had to wait for a concurrent writer,
so a guard can never pass on a stale read. Claim selects its batch in a
materialised CTE with ``FOR UPDATE SKIP LOCKED`` (losers step past rows
another claimer holds) and marks them in the same statement. Upsert is
``INSERT … ON CONFLICT DO UPDATE``; ``xmax = 0`` on the returned row tells an
insert from an update.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from airflow_atomic_store.exceptions import (
    AccessDeniedError,
    AtomicStoreError,
    MutationError,
    StoreUnavailableError,
)
from airflow_atomic_store.spec import Condition, Mutation, Ordering
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.store.backend import Row, check_storage_table
from airflow_atomic_store.store.claim_sets import ChosenSet, Origin, StoredSet
from airflow_atomic_store.store.compiler import WhereCompiler, order_sql
from airflow_atomic_store.store.notify import DEFAULT_NOTIFY, NOTIFY_MODES, channel_for
from airflow_atomic_store.store.postgres import claim_sets, receipts, schema
from airflow_atomic_store.store.postgres.jsonb import jsonb
from airflow_atomic_store.store.postgres.where import (
    PostgresWhere,
    literal,
    path_sql,
    substitute_literals,
    substitute_positional,
    without_placeholders,
)
from airflow_atomic_store.store.receipts import Receipt
from airflow_atomic_store.store.snapshot import Snapshot
from airflow_atomic_store.store.urls import scrub

Connect = Callable[[], psycopg.Connection[Any]]

#: SQLSTATE classes that mean "try again later": connection trouble,
#: lock/statement timeouts, serialisation failures, server shutdown.
_TRANSIENT_PREFIXES = ("08", "40", "53", "55P03", "57")
#: SQLSTATEs of a refusal for good: invalid authorization (28000, 28P01), a missing
#: privilege (42501), an unknown database (3D000).
_ACCESS_DENIED_PREFIXES = ("28", "42501", "3D000")
#: The same refusals when connecting, where libpq gives the server's text but no SQLSTATE.
_ACCESS_DENIED_TEXT = re.compile(
    r"authentication failed"  # password (28P01), ident, peer, GSSAPI, LDAP, cert…
    r"|no password supplied"
    r"|pg_hba\.conf rejects connection|no pg_hba\.conf entry"  # 28000
    r"|is not permitted to log in"  # 28000
    r"|permission denied for database"  # 42501: no CONNECT privilege
    r'|(?:role|database) ".*" does not exist'  # 28000, 3D000
)


class PostgresBackend:
    """Runs each primitive as one statement on a single lazily-opened connection."""

    def __init__(
        self,
        connect: Connect,
        *,
        storage_table: str,
        lock_timeout: float | None = None,
        statement_timeout: float | None = None,
        secrets: tuple[str, ...] = (),
        notify: frozenset[str] = NOTIFY_MODES[DEFAULT_NOTIFY],
    ) -> None:
        self._connect = connect
        self._notify = notify  # the write families that pg_notify their table's channel
        self._secrets = secrets  # the password: scrubbed from every message
        self._table_name = check_storage_table(storage_table)
        self._table = sql.Identifier(self._table_name).as_string(None)
        self._receipts = receipts.receipts_table(self._table_name)
        self._settings = {
            "lock_timeout": lock_timeout,
            "statement_timeout": statement_timeout,
        }
        self._connection: psycopg.Connection[Any] | None = None
        # One cursor for the connection's life: creating one per call was a
        # tenth of a guarded update's client time. Calls are serialised by the lock.
        self._reused_cursor: psycopg.Cursor[Any]
        self._lock = threading.RLock()
        self._where = WhereCompiler(PostgresWhere())
        self._statement = lru_cache(maxsize=512)(self._build_statement)

    # -- connection ---------------------------------------------------------

    def _open(self) -> psycopg.Connection[Any]:
        """Connect and set up; a connection whose set-up fails is closed at once.

        Left to the garbage collector, it stays open as long as anything holds
        the error's traceback (a retry loop logging it, a test's ``raises``).
        """
        connection = self._connect()
        try:
            connection.autocommit = True
            # A factory may hand out connections configured for dict rows (e.g. the
            # Postgres provider's "cursor" extra); the statements here read tuples.
            connection.row_factory = tuple_row
            for name, seconds in self._settings.items():
                if seconds is not None:
                    connection.execute(
                        sql.SQL("SELECT set_config({}, {}, false)").format(
                            sql.Literal(name), sql.Literal(f"{int(seconds * 1000)}ms")
                        )
                    )
            self._ensure_schema(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _ensure_schema(self, connection: psycopg.Connection[Any]) -> None:
        """Create what is missing, checking again (afresh) under the schema lock.

        A process that queued behind the creator must not then run ``CREATE INDEX
        IF NOT EXISTS`` on the existing table: its share lock waits for a ``CREATE
        INDEX CONCURRENTLY`` in progress, which waits for the sessions queued on the
        schema lock, a deadlock.
        """
        tables = schema.schema_tables(self._table_name)
        missing_tables, functions_missing = self._schema_missing(connection, list(tables))
        if not missing_tables and not functions_missing:
            return
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (schema.SCHEMA_LOCK_ID,))
            missing_tables, functions_missing = self._schema_missing(connection, list(tables))
            for name in tables:  # in order: the rows table first
                if name in missing_tables:
                    connection.execute(tables[name])
            if functions_missing:
                connection.execute(schema.FUNCTIONS_DDL.encode())

    def _schema_missing(
        self, connection: psycopg.Connection[Any], tables: list[str]
    ) -> tuple[list[str], bool]:
        """(the tables missing, whether a mutation function is), as of this statement."""
        row = connection.execute(
            schema.SCHEMA_PROBE, {"tables": tables, "functions": list(schema.FUNCTION_NAMES)}
        ).fetchone()
        assert row is not None
        return list(row[0]), bool(row[1])

    @contextmanager
    def _cursor(self, *, many_rows: bool = False) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor on the live connection, with driver errors translated once, here.

        A cursor keeps its last result until the next statement, so a statement
        that may return many rows gets a cursor of its own, closed afterwards:
        on the reused one a large claimed batch stayed resident (about the
        batch's size again) until the store's next call.
        """
        with self._lock:
            try:
                if self._connection is None or self._connection.closed:
                    self._connection = self._open()
                    self._reused_cursor = self._connection.cursor()
                if many_rows:
                    with self._connection.cursor() as own:
                        yield own
                else:
                    yield self._reused_cursor
            except psycopg.Error as exc:
                error = self._translate(exc)
                if scrub(str(exc), self._secrets) != str(exc):
                    raise error from None  # the driver's own text, in a traceback, would show it
                raise error from exc

    def _translate(self, exc: psycopg.Error) -> AtomicStoreError:
        state = getattr(exc, "sqlstate", None) or ""
        text = scrub(str(exc), self._secrets)
        if state == schema.MUTATION_ERROR_SQLSTATE:
            diag = exc.diag
            return MutationError(diag.message_detail or "mutations", diag.message_primary or "")
        self._discard_broken_connection()
        if state.startswith(_ACCESS_DENIED_PREFIXES) or (
            not state and _ACCESS_DENIED_TEXT.search(text)
        ):
            return AccessDeniedError(
                f"PostgreSQL store access denied: {text}".strip()
                + " (check the connection's user, password and database, the server's "
                "pg_hba.conf and the role's grants; retrying cannot fix it)"
            )
        if state:  # the server said why: only some classes are worth a retry
            transient = state.startswith(_TRANSIENT_PREFIXES)
        else:  # no SQLSTATE: connecting failed, or the connection broke
            transient = isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))
        if transient:
            return StoreUnavailableError(f"PostgreSQL store unavailable: {text}".strip())
        return AtomicStoreError(f"PostgreSQL store error: {text}".strip())

    def _discard_broken_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and connection.broken:
            connection.close()
        elif connection is not None:
            self._connection = connection

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """Read-only inspection queries in one transaction (``inspect.py``)."""
        from airflow_atomic_store.store.postgres.inspect import snapshot

        return snapshot(self._cursor(many_rows=True), self._table, self._where)

    # -- claimable sets -----------------------------------------------------

    def load_claim_sets(self, table: str | None) -> list[StoredSet]:
        with self._cursor(many_rows=True) as cur:
            return claim_sets.load(cur, schema.sets_table(self._table_name), table)

    def build_claim_set(
        self,
        claim_set: ClaimSet,
        origin: Origin,
        *,
        timeout: float | None,
        automatic_limit: int,
    ) -> StoredSet | None:
        predicate = self._set_predicate(claim_set)
        with self._cursor() as cur:
            return claim_sets.build(
                cur,
                storage_table=self._table_name,
                predicate=predicate,
                claim_set=claim_set,
                origin=origin,
                timeout=timeout,
                automatic_limit=automatic_limit,
                restore=self._configured_timeouts(),
            )

    def ensure_record_index(self, *, timeout: float) -> bool:
        """The ``record_timestamp`` index, built the first time something orders by it."""
        name, create = schema.record_index(self._table_name)
        with self._cursor() as cur, claim_sets.build_lock(cur, wait=False) as held:
            if not held:
                return False
            outcome = claim_sets.build_concurrently(
                cur, name, create.decode(), timeout=timeout, restore=self._configured_timeouts()
            )
        return outcome == "ready"

    def _configured_timeouts(self) -> tuple[str, str]:
        """This store's statement and lock timeouts, as ``set_config`` takes them."""
        statement, lock = (
            f"{int(seconds * 1000)}ms" if seconds else "0"
            for seconds in (self._settings["statement_timeout"], self._settings["lock_timeout"])
        )
        return statement, lock

    def drop_claim_set(self, name: str) -> bool:
        with self._cursor() as cur:
            return claim_sets.drop(cur, self._table_name, name)

    def _set_predicate(self, claim_set: ClaimSet) -> str:
        """The partial index's predicate: the same literal SQL a covered claim contains."""
        where = self._where.literal_predicate(claim_set.conditions, claim_set.match, "value")
        return f"table_name = {literal(claim_set.table)} AND {where}"

    # -- statements ---------------------------------------------------------

    def _build_statement(
        self,
        kind: str,
        where_sql: str = "",
        ordering: Ordering | None = None,
        apply: str = "",
        limit: int | None = None,
        table_filter: str = "r.table_name = %s",
    ) -> bytes:
        return (
            _STATEMENTS[kind]
            .format(
                table=self._table,
                where=where_sql,
                order=order_sql(ordering) if ordering else "",
                order_column=ordering.column if ordering else "",
                apply=apply,
                limit=sql.Literal(limit).as_string(None) if limit is not None else "",
                table_filter=table_filter,
                receipts=self._receipts,
                direction=ordering.direction.upper() if ordering else "",
            )
            .encode()
        )

    def _compile(
        self,
        kind: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering | None = None,
        apply: str = "",
        limit: int | None = None,
    ) -> tuple[bytes, list[Any]]:
        where_sql, params = self._where.compile(where, match)
        return self._statement(kind, where_sql, ordering, apply, limit), params

    def _compile_pick(
        self,
        kind: str,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        chosen: ChosenSet | None,
        apply: str = "",
    ) -> tuple[bytes, list[Any]]:
        """A claim's statement and the parameters of its selection.

        With a claimable set, the table name and the conditions the set covers
        are literals, so the planner proves the set's index predicate from the
        text, for custom and generic plans alike.
        """
        if chosen is None:
            where_sql, params = self._where.compile(where, match)
            statement = self._statement(kind, where_sql, ordering, apply, limit)
            return statement, [table, *params]
        where_sql, params = self._where.compile(where, match, chosen.inline)
        table_filter = f"r.table_name = {literal(table)}"
        return self._statement(kind, where_sql, ordering, apply, limit, table_filter), params

    def _notifying(self, family: str, kind: str, table: str) -> tuple[str, tuple[str, ...]]:
        """The statement kind that also notifies ``table``'s channel (if this family
        notifies), and the parameters to append: the channel is the last one (see
        ``_with_notify``)."""
        if family not in self._notify:
            return kind, ()
        return f"{kind}+notify", (channel_for(self._table_name, table),)

    # -- primitives ---------------------------------------------------------

    def put(self, table: str, key: str, value: dict[str, Any]) -> None:
        kind, channel = self._notifying("put", "put", table)
        with self._cursor() as cur:
            cur.execute(self._statement(kind), (table, key, jsonb(value), *channel))

    def get(self, table: str, key: str) -> dict[str, Any] | None:
        with self._cursor() as cur:
            row = cur.execute(self._statement("get"), (table, key)).fetchone()
        return None if row is None else row[0]

    def delete(self, table: str, key: str) -> bool:
        with self._cursor() as cur:
            return cur.execute(self._statement("delete"), (table, key)).fetchone() is not None

    def query(
        self, table: str, where: Sequence[Condition], match: str, ordering: Ordering, limit: int
    ) -> list[Row]:
        statement, params = self._compile("query", where, match, ordering)
        with self._cursor(many_rows=limit > 1) as cur:
            return [(k, v) for k, v in cur.execute(statement, (table, *params, limit)).fetchall()]

    def count(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        claim_set: ChosenSet | None = None,
    ) -> tuple[int, str | None]:
        statement, params = self._compile_pick(
            "count", table, where, match, ordering, limit, claim_set
        )
        with self._cursor() as cur:
            row = cur.execute(statement, params).fetchone()
        return (int(row[0]), row[1]) if row else (0, None)

    def update(
        self,
        table: str,
        key: str,
        where: Sequence[Condition],
        match: str,
        mutations: Sequence[Mutation],
        receipt: Receipt | None = None,
    ) -> tuple[dict[str, Any] | None, bool]:
        apply, mutation_params = _mutations_sql(mutations, "r.value")
        kind, channel = self._notifying(
            "update", "update" if receipt is None else "update+receipt", table
        )
        statement, params = self._compile(kind, where, match, apply=apply)
        args = (*mutation_params, table, key, *params)
        if receipt is None:
            with self._cursor() as cur:
                row = cur.execute(statement, (*args, *channel)).fetchone()
            return (None if row is None else row[0]), False
        outcome = self._keyed(statement, args, receipt, many_rows=False, last=channel)
        if outcome.recorded is not _NOTHING:
            return outcome.recorded[0], True
        return (outcome.rows[0][0] if outcome.rows else None), False

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
        apply, mutation_params = _mutations_sql(mutations, "t.value")
        kind, channel = self._notifying(
            "claim", "claim" if receipt is None else "claim+receipt", table
        )
        statement, params = self._compile_pick(
            kind, table, where, match, ordering, limit, claim_set, apply
        )
        args = (*params, *mutation_params, table)
        if receipt is None:
            with self._cursor(many_rows=limit > 1) as cur:
                rows = cur.execute(statement, (*args, *channel)).fetchall()
        else:
            outcome = self._keyed(statement, args, receipt, many_rows=limit > 1, last=channel)
            if outcome.recorded is not _NOTHING:
                return [(key, value) for key, value in outcome.recorded], True
            rows = outcome.rows
        return _in_claim_order(rows, ordering), False

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
        """The selection's plan; ``generic`` asks for the plan a prepared claim settles on.

        A generic plan is planned without the parameters' values, as PostgreSQL
        does for a statement it has run five times: it shows whether the index
        is chosen from the statement text alone.
        """
        statement, params = self._compile_pick(
            "pick", table, where, match, ordering, limit, claim_set
        )
        with self._cursor(many_rows=True) as cur:
            if not generic:
                rows = cur.execute(b"EXPLAIN " + statement, params).fetchall()
                return "\n".join(row[0] for row in rows)
            # EXPLAIN EXECUTE takes no bound parameters: its arguments are literals.
            arguments = f"({', '.join(['%s'] * len(params))})" if params else ""
            execute = substitute_literals(f"EXPLAIN EXECUTE {_EXPLAINED}{arguments}", params)
            try:
                with cur.connection.transaction():
                    cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                    prepared = substitute_positional(statement.decode())
                    cur.execute(f"PREPARE {_EXPLAINED} AS {prepared}".encode())
                    rows = cur.execute(without_placeholders(execute).encode()).fetchall()
            finally:
                if cur.execute(_PREPARED, (_EXPLAINED,)).fetchone() is not None:
                    cur.execute(f"DEALLOCATE PREPARE {_EXPLAINED}")
        return "\n".join(row[0] for row in rows)

    def upsert(
        self,
        table: str,
        key: str,
        insert_value: dict[str, Any],
        mutations: Sequence[Mutation],
        receipt: Receipt | None = None,
    ) -> tuple[tuple[bool, dict[str, Any]], bool]:
        """``((inserted, value), replayed)``.

        Without mutations it is a seed: insert if absent, else read the row, so a
        duplicate delivery writes nothing. The seed finds no row only when the
        conflicting row was committed after its snapshot was taken (``DO NOTHING``
        waited for that insert), or was deleted since; the next statement settles it.
        """
        if mutations:
            apply, mutation_params = _mutations_sql(mutations, "t.value")
            args: tuple[Any, ...] = (table, key, jsonb(insert_value), *mutation_params)
            kind = "upsert"
        else:
            apply, args, kind = "", (table, key, jsonb(insert_value), table, key), "seed"
        if receipt is not None:
            kind += "+receipt"
        kind, channel = self._notifying("upsert", kind, table)
        statement = self._statement(kind, "", None, apply)
        for _ in range(_SEED_ATTEMPTS):
            if receipt is None:
                with self._cursor() as cur:
                    rows = cur.execute(statement, (*args, *channel)).fetchall()
            else:
                outcome = self._keyed(statement, args, receipt, many_rows=False, last=channel)
                if outcome.recorded is not _NOTHING:
                    inserted, value = outcome.recorded
                    return (bool(inserted), value), True
                rows = outcome.rows
            if rows:
                value, inserted = rows[0]
                return (bool(inserted), value), False
        raise StoreUnavailableError(
            f"seed of {key!r} kept meeting a row inserted and deleted by others; try again"
        )

    # -- receipts -----------------------------------------------------------

    def _keyed(
        self,
        statement: bytes,
        args: tuple[Any, ...],
        receipt: Receipt,
        *,
        many_rows: bool,
        last: tuple[Any, ...] = (),
    ) -> _Keyed:
        """Run a keyed statement; on a receipt conflict, read the recorded result instead.

        An expired receipt is removed and the statement runs again: after its
        retention a key is new. ``last``: parameters after the receipt's (a channel).
        """
        arguments = (*args, *receipts.parameters(receipt), *last)
        while True:
            with self._cursor(many_rows=many_rows) as cur:
                try:
                    return _Keyed(cur.execute(statement, arguments).fetchall(), _NOTHING)
                except psycopg.Error as exc:
                    if not receipts.is_conflict(exc, self._table_name):
                        raise
                recorded = receipts.recorded(cur, self._table_name, receipt)
                if recorded is not None:
                    return _Keyed([], recorded)

    def purge_receipts(self, limit: int) -> int:
        with self._cursor() as cur:
            return receipts.purge(cur, self._table_name, limit)


_NOTHING: Any = object()


def _in_claim_order(rows: list[Any], ordering: Ordering) -> list[Row]:
    """``(key, value, claim order)`` rows as ``(key, value)`` in claim order, ties by key.

    ``RETURNING`` gives no order guarantee, so the order is restored here (the
    receipt of a keyed claim records its rows in this same order, in SQL).
    """
    rows = sorted(rows, key=lambda row: (row[2], row[0]), reverse=ordering.direction == "desc")
    return [(key, value) for key, value, _ in rows]


@dataclass(frozen=True)
class _Keyed:
    """A keyed statement's rows, or (``recorded`` set) the result a receipt holds."""

    rows: list[Any]
    recorded: Any


def _mutations_sql(mutations: Sequence[Mutation], row: str) -> tuple[str, list[Any]]:
    """SQL for the ``row`` value after ``mutations``, and its parameters in order.

    The PL/pgSQL apply function handles every mutation, but calling it costs a
    primitive about half again its time (docs/benchmarks.md: a guarded
    decrement at 1.5x the hand-written statement, a hot counter at 0.67x), so
    the common shapes stay in plain SQL. Row values are always objects, so
    top-level fields merge into them with ``jsonb_concat`` (the function
    behind ``||``):

    - only ``set``s: one object, a later ``set`` of a field winning as in the
      reference ``apply``;
    - ``set``s and ``increment``s of distinct fields (no mutation sees
      another's result): ``jsonb_build_object`` with each increment inline
      (see ``_increment_sql``).

    Anything else (nested paths, a field mutated twice) runs the function.
    """
    top_level = all(
        len(m.path.segments) == 1 and isinstance(m.path.segments[0], str) for m in mutations
    )
    if top_level and all(m.operation == "set" for m in mutations):
        merged = {m.path.segments[0]: m.value for m in mutations}
        return f"jsonb_concat({row}, %s)", [jsonb(merged)]
    if top_level and len({m.path.segments for m in mutations}) == len(mutations):
        pairs: list[str] = []
        params: list[Any] = []
        for mutation in mutations:
            pairs.append("%s::text")
            params.append(mutation.path.segments[0])
            if mutation.operation == "set":
                pairs.append("%s::jsonb")
                params.append(jsonb(mutation.value))
            else:
                expression, increment_params = _increment_sql(row, mutation)
                pairs.append(expression)
                params.extend(increment_params)
        return f"jsonb_concat({row}, jsonb_build_object({', '.join(pairs)}))", params
    return (
        f"{schema.APPLY_FUNCTION}({row}, %s)",
        [jsonb([mutation.to_json() for mutation in mutations])],
    )


#: The 64-bit range an integer increment's result must stay in (as in the reference).
_INT64_RANGE = "BETWEEN -9223372036854775808 AND 9223372036854775807"


def _increment_sql(row: str, mutation: Mutation) -> tuple[str, list[Any]]:
    """An increment of a top-level field, and its parameters in order.

    An integer field plus an integer delta whose sum fits 64 bits (a counter, a
    token bucket) is summed in SQL. Every other case — a missing or null field,
    a float on either side, a non-number, an overflow — goes to
    ``atomic_store_add_v1``, which owns those rules and their errors; the SQL
    branch computes exactly what that function's integer branch would. ``CASE``
    tests the type before the numeric cast sees the value, and ``COALESCE``
    calls the function only when that branch gave nothing.
    """
    current = path_sql(mutation.path.segments, root=row).json
    delta = mutation.value
    if isinstance(delta, bool) or not isinstance(delta, int):
        return f"{schema.ADD_FUNCTION}({current}, %s, %s)", [jsonb(delta), mutation.path.text]
    return _integer_increment_sql(current), [delta, delta, delta, mutation.path.text]


@lru_cache(maxsize=256)
def _integer_increment_sql(current: str) -> str:
    total = f"({current}::numeric + %s::numeric)"
    return (
        f"COALESCE(CASE WHEN jsonb_typeof({current}) = 'number' THEN "
        f"CASE WHEN scale({current}::numeric) = 0 AND {total} {_INT64_RANGE} "
        f"THEN to_jsonb({total}) END END, "
        f"{schema.ADD_FUNCTION}({current}, to_jsonb(%s::numeric), %s))"
    )


_EXPLAINED = "atomic_store_explain_claim"
#: Seed statements a seed may take while other sessions insert and delete its row.
_SEED_ATTEMPTS = 100
_PREPARED = "SELECT 1 FROM pg_prepared_statements WHERE name = %s"

#: The claim's selection: shared by the claim itself and ``explain_claim``.
#: The limit (validated, 1..1000) is a literal: with ``LIMIT $n`` PostgreSQL's
#: generic plan assumes a tenth of the table is wanted, is never preferred, and
#: every claim pays for planning again; with the number in the text, a prepared
#: claim is planned once per connection.
_PICK = (
    "SELECT r.key, r.{order_column} AS claim_order "
    "FROM {table} AS r WHERE {table_filter} AND {where} "
    "ORDER BY {order} LIMIT {limit} FOR UPDATE SKIP LOCKED"
)

_UPDATE = (
    "UPDATE {table} AS r SET value = {apply}, "
    "record_timestamp = clock_timestamp() "
    "WHERE r.table_name = %s AND r.key = %s AND {where} RETURNING r.value"
)
_CLAIM = (
    "UPDATE {table} AS t SET value = {apply}, "
    "record_timestamp = clock_timestamp() "
    "FROM picked WHERE t.table_name = %s AND t.key = picked.key "
    "RETURNING t.key, t.value, picked.claim_order"
)
_SEED = (
    "inserted AS (INSERT INTO {table} (table_name, key, value) VALUES (%s, %s, %s) "
    "ON CONFLICT (table_name, key) DO NOTHING RETURNING value), "
    "effect AS (SELECT value, true AS inserted FROM inserted UNION ALL "
    "SELECT value, false FROM {table} WHERE table_name = %s AND key = %s "
    "AND NOT EXISTS (SELECT FROM inserted))"
)
_UPSERT = (
    "INSERT INTO {table} AS t (table_name, key, value) VALUES (%s, %s, %s) "
    "ON CONFLICT (table_name, key) DO UPDATE "
    "SET value = {apply}, record_timestamp = clock_timestamp() "
    "RETURNING t.value, (t.xmax = 0) AS inserted"
)
#: With an idempotency key, the receipt is written by the same statement as the effect;
#: a receipt already under that key aborts the statement (``receipts.RECEIPT_CONFLICT``).
_RECEIPT = (
    "receipt AS (INSERT INTO {receipts} "
    "(idempotency_key, primitive, table_name, target, result, expires_at) "
    "SELECT %s, %s, %s, %s, {result}, clock_timestamp() + make_interval(secs => %s) {source})"
)

_PUT = (
    "INSERT INTO {table} AS t (table_name, key, value) VALUES (%s, %s, %s) "
    "ON CONFLICT (table_name, key) DO UPDATE "
    "SET value = EXCLUDED.value, record_timestamp = clock_timestamp()"
)

_STATEMENTS = {
    "put": _PUT,
    "get": "SELECT value FROM {table} WHERE table_name = %s AND key = %s",
    "delete": "DELETE FROM {table} WHERE table_name = %s AND key = %s RETURNING 1",
    "query": (
        "SELECT r.key, r.value FROM {table} AS r WHERE r.table_name = %s AND {where} "
        "ORDER BY {order} LIMIT %s"
    ),
    "update": _UPDATE,
    "claim": f"WITH picked AS MATERIALIZED ({_PICK}) {_CLAIM}",
    "pick": _PICK,
    # Capped and unlocked: a trigger asks whether work is there, it never claims it.
    "count": (
        "SELECT count(*), min(CASE WHEN n = 1 THEN key END) FROM (SELECT r.key, "
        "row_number() OVER (ORDER BY {order}) AS n FROM {table} AS r "
        "WHERE {table_filter} AND {where} ORDER BY {order} LIMIT {limit}) AS matching"
    ),
    "seed": f"WITH {_SEED} SELECT value, inserted FROM effect",
    "upsert": _UPSERT,
    "update+receipt": (
        f"WITH effect AS ({_UPDATE}), "
        + _RECEIPT.replace("{result}", "jsonb_build_array((SELECT value FROM effect))").replace(
            "{source}", ""
        )
        + " SELECT value FROM effect"
    ),
    "claim+receipt": (
        f"WITH picked AS MATERIALIZED ({_PICK}), effect AS ({_CLAIM}), "
        + _RECEIPT.replace(
            "{result}",
            # In claim order as this call returns it (``_in_claim_order``: ties by key in
            # code point order, which is "C" collation's order for UTF-8), so a replay,
            # whatever direction it asks for, returns the first call's batch as it was.
            "COALESCE((SELECT jsonb_agg(jsonb_build_array(key, value) "
            'ORDER BY claim_order {direction}, key COLLATE "C" {direction}) FROM effect), '
            "'[]'::jsonb)",
        ).replace("{source}", "")
        + " SELECT key, value, claim_order FROM effect"
    ),
    "seed+receipt": (
        f"WITH {_SEED}, "
        + _RECEIPT.replace("{result}", "jsonb_build_array(inserted, value)").replace(
            "{source}", "FROM effect"
        )
        + " SELECT value, inserted FROM effect"
    ),
    "upsert+receipt": (
        f"WITH effect AS ({_UPSERT}), "
        + _RECEIPT.replace("{result}", "jsonb_build_array(inserted, value)").replace(
            "{source}", "FROM effect"
        )
        + " SELECT value, inserted FROM effect"
    ),
}


def _with_notify(statement: str, *, changed: str = "effect") -> str:
    """``statement`` (``WITH …, effect AS (…) SELECT … FROM effect``) that also notifies.

    ``pg_notify`` runs in a CTE of the same statement, once, and only when the
    ``changed`` CTE has rows (a write that changed nothing wakes nobody). Its
    channel is the statement's last parameter: the final ``SELECT`` has none. A
    CTE runs only if referenced, hence the join; it has no column the final
    ``SELECT`` names.
    """
    head, final = statement.rsplit(" SELECT ", 1)
    notified = f"notified AS (SELECT pg_notify(%s, '') WHERE EXISTS (SELECT FROM {changed}))"
    return f"{head}, {notified} SELECT {final} LEFT JOIN notified ON true"


_STATEMENTS.update(
    {
        "put+notify": _with_notify(f"WITH effect AS ({_PUT} RETURNING 1) SELECT 1 FROM effect"),
        "update+notify": _with_notify(f"WITH effect AS ({_UPDATE}) SELECT value FROM effect"),
        "claim+notify": _with_notify(
            f"WITH picked AS MATERIALIZED ({_PICK}), effect AS ({_CLAIM}) "
            "SELECT key, value, claim_order FROM effect"
        ),
        "seed+notify": _with_notify(_STATEMENTS["seed"], changed="inserted"),
        "upsert+notify": _with_notify(
            f"WITH effect AS ({_UPSERT}) SELECT value, inserted FROM effect"
        ),
        "seed+receipt+notify": _with_notify(_STATEMENTS["seed+receipt"], changed="inserted"),
        **{
            f"{kind}+receipt+notify": _with_notify(_STATEMENTS[f"{kind}+receipt"])
            for kind in ("update", "claim", "upsert")
        },
    }
)
