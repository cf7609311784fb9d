"""PostgreSQL schema: the store's tables, the mutation functions, and claimable sets.

Mutations run inside PL/pgSQL functions so that every primitive stays a single
statement: they walk the path with the same rules as the reference ``apply``,
create missing parent objects for ``set``, and raise SQLSTATE ``AS001`` when a
mutation cannot apply, which aborts the statement so nothing is written. The
``_v1`` suffix lets a later release change a function without breaking running
workers. The static SQL lives in ``.sql`` files beside this module (package data).

A claimable set is one partial index per filter on ``(table_id, order column,
key)``, holding only the rows its predicate matches: every logical table whose
claims use that filter shares it, and a claim (its table bound) walks its own
table's claimable rows in claim order, never the consumed ones. Sets are built
when the schema is created (the queue's pending set, :data:`DEFAULT_SET`) or
when the owner declares one, ``CONCURRENTLY`` (writers are never blocked) and
one at a time across processes (the build lock); never by a claim.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from airflow_atomic_store.exceptions import StoreUnavailableError
from airflow_atomic_store.spec.claim_sets import DEFAULT_SET, ClaimSet
from airflow_atomic_store.store import migrations
from airflow_atomic_store.store.contract import StoredSet, is_set_index, stored_set
from airflow_atomic_store.store.postgres.statements import (
    ADD_FUNCTION,
    APPLY_FUNCTION,
    PostgresWhere,
)
from airflow_atomic_store.store.sql import WhereCompiler, named_queries


def sql_file(name: str) -> str:
    """A static statement shipped beside this module (package data)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


#: Serialises concurrent first use across processes (an arbitrary constant).
SCHEMA_LOCK_ID = 0x41544F4D  # "ATOM"
#: Serialises set builds and drops across processes: two ``CONCURRENTLY`` builds on
#: one table wait for each other's transactions, and a drop of a set being built
#: deadlocks with the build.
BUILD_LOCK_ID = SCHEMA_LOCK_ID + 1

TABLE_DDL = sql_file("rows_table.sql")
#: The logical tables' ids: the rows table keys its rows by them.
TABLES_DDL = sql_file("tables_catalog.sql")
#: Idempotency receipts; the expiry index serves the purge.
RECEIPTS_DDL = sql_file("receipts_table.sql")
#: The catalog of claimable sets: one row per partial index.
SETS_DDL = sql_file("claim_sets_table.sql")
FUNCTIONS_DDL = sql_file("functions.sql")
#: The versions a store reached (``store/migrations.py``), and the steps past version 1.
MIGRATIONS_DDL = sql_file("migrations_table.sql")
MIGRATIONS = migrations.load(__package__)
#: Reading and recording the version, and what the schema lock's holder checks first.
VERSION_QUERIES = named_queries(__package__, "schema_versions.sql")
#: The rows table's column that marks version 1's layout (a table id, not a name).
KEY_COLUMN = "table_id"

#: Every function FUNCTIONS_DDL installs: a schema lacking any of them is incomplete.
FUNCTION_NAMES = (
    "atomic_store_fail_v1",
    "atomic_store_set_v1",
    "atomic_store_get_v1",
    "atomic_store_exact_v1",
    "atomic_store_receipt_v1",
    ADD_FUNCTION,
    APPLY_FUNCTION,
)

#: Which parts of this release's schema are missing, read from the catalogs with the
#: statement's own snapshot: ``to_regclass``'s cache would repeat a "missing" seen
#: before the schema lock was taken (``PostgresConnection._ensure_schema`` says why
#: that deadlocks).
SCHEMA_PROBE = sql_file("schema_probe.sql")

_WHERE = WhereCompiler(PostgresWhere())


def ident(name: str) -> str:
    return sql.Identifier(name).as_string(None)


def schema_tables(table_name: str) -> dict[str, bytes]:
    """Each table of one store (the tables catalog, the rows, the sets catalog, the
    receipts, the schema versions) and its DDL, in the order they are created."""
    receipts = f"{table_name}_receipts"
    ids = ident(f"{table_name}_table_ids")
    return {
        tables_catalog_name(table_name): TABLES_DDL.format(
            tables=ident(tables_catalog_name(table_name)),
            ids=ids,
            ids_literal=sql.Literal(ids).as_string(None),
            start=random.randrange(1, 2**30),  # tables_catalog.sql says why
        ).encode(),
        table_name: TABLE_DDL.format(
            table=ident(table_name), created_index=ident(f"{table_name}_created_idx")
        ).encode(),
        f"{table_name}_claim_sets": SETS_DDL.format(sets=sets_table(table_name)).encode(),
        receipts: RECEIPTS_DDL.format(
            receipts=ident(receipts),
            receipts_key=ident(f"{receipts}_pkey"),
            expiry_index=ident(f"{receipts}_expiry_idx"),
        ).encode(),
        migrations_table_name(table_name): MIGRATIONS_DDL.format(
            migrations=migrations_table(table_name)
        ).encode(),
    }


def migrations_table_name(table_name: str) -> str:
    """The name of the table that records a store's schema versions."""
    return f"{table_name}_migrations"


def migrations_table(table_name: str) -> str:
    """Its quoted name."""
    return sql.Identifier(migrations_table_name(table_name)).as_string(None)


def migration_holes(table_name: str) -> dict[str, str]:
    """A migration's ``{table}`` and ``{table_<suffix>}``, quoted by psycopg."""
    return migrations.holes(table_name, lambda name: sql.Identifier(name).as_string(None))


def tables_catalog_name(table_name: str) -> str:
    """The name of the catalog of a rows table's logical tables and their ids."""
    return f"{table_name}_tables"


def sets_table(table_name: str) -> str:
    """The quoted name of the claimable-set catalog that belongs to a rows table."""
    return ident(f"{table_name}_claim_sets")


def create_default_set(connection: psycopg.Connection[Any], table_name: str) -> None:
    """The queue's pending set (``DEFAULT_SET``), built with a new (empty) rows table in the schema's
    transaction: an index on an empty table is built at once, so not concurrently."""
    name = DEFAULT_SET.index_name(table_name)
    create = create_index(table_name, name, DEFAULT_SET, concurrently=False)
    run_ddl(connection.cursor(), create)
    _record(connection.cursor(), table_name, name, DEFAULT_SET)


# -- claimable sets -------------------------------------------------------------------

INDEX_VALID = (
    "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
    "WHERE c.relname = %(name)s AND pg_table_is_visible(c.oid)"
)
#: Old stores may hold a row remembering a give-up on an automatic ``record_timestamp``
#: index (``{"record_index": true}``): it is no set, and ``load`` leaves it out.
_LOAD = (
    "SELECT s.name, s.spec, s.origin, s.problem, i.indisvalid FROM {sets} AS s "
    "LEFT JOIN pg_class AS c "
    "ON c.relname = s.name AND c.relkind = 'i' AND pg_table_is_visible(c.oid) "
    "LEFT JOIN pg_index AS i ON i.indexrelid = c.oid "
    "WHERE NOT s.spec ? 'record_index' ORDER BY s.name"
)
_RECORD = (
    "INSERT INTO {sets} (name, spec, origin) VALUES (%(name)s, %(spec)s, 'declared') "
    "ON CONFLICT (name) DO UPDATE SET origin = 'declared', problem = NULL"
)
_PROBLEM = "UPDATE {sets} SET problem = %(problem)s WHERE name = %(name)s"
_FORGET = "DELETE FROM {sets} WHERE name = %(name)s RETURNING 1"
_TRY_LOCK = "SELECT pg_try_advisory_lock(%(lock)s)"
_UNLOCK = "SELECT pg_advisory_unlock(%(lock)s)"
#: The session's own bound on a wait: the smaller of its non-zero timeouts, in seconds.
_SESSION_BOUND = (
    "SELECT min(t) FROM (VALUES "
    "(extract(epoch FROM current_setting('statement_timeout')::interval)), "
    "(extract(epoch FROM current_setting('lock_timeout')::interval))) AS v(t) WHERE t > 0"
)
_POLL_SECONDS = 0.05


def load_sets(cursor: psycopg.Cursor[Any], table_name: str) -> list[StoredSet]:
    """Every set of the store, with its index's state."""
    rows = cursor.execute(_LOAD.format(sets=sets_table(table_name)).encode()).fetchall()
    return [
        stored_set(name, spec, origin, problem, bool(valid))
        for name, spec, origin, problem, valid in rows
    ]


def create_index(
    table_name: str, name: str, claim_set: ClaimSet, *, concurrently: bool = True
) -> sql.Composed:
    """The set's ``CREATE INDEX``: ``(table_id, order column, key)`` where its predicate holds.

    The predicate is the literal SQL a claim the set covers contains, in psycopg's
    placeholder grammar (its literals' ``%`` doubled): run it with :func:`run_ddl`.
    """
    predicate = _WHERE.literal_predicate(claim_set.conditions, claim_set.match, "value")
    return sql.SQL(
        "CREATE INDEX {how}IF NOT EXISTS {name} ON {table} ({columns}) WHERE {where}"
    ).format(
        how=sql.SQL("CONCURRENTLY " if concurrently else ""),
        name=sql.Identifier(name),
        table=sql.Identifier(table_name),
        columns=sql.SQL(", ").join(map(sql.Identifier, ("table_id", claim_set.column, "key"))),
        where=sql.SQL(predicate),
    )


def run_ddl(cursor: psycopg.Cursor[Any], statement: sql.Composed | str) -> None:
    """Run a statement written in psycopg's placeholder grammar that takes no parameters.

    The empty mapping makes psycopg parse the placeholders (so ``%%`` is ``%``) and,
    with no parameter to send, still use the simple query protocol, where
    ``CREATE INDEX CONCURRENTLY`` runs; never prepared, since an index is built once.
    """
    cursor.execute(statement, {}, prepare=False)


def build_set(cursor: psycopg.Cursor[Any], table_name: str, claim_set: ClaimSet) -> StoredSet:
    """Record the set and build its index ``CONCURRENTLY``, however long that takes.

    Under the build lock, with the session's ``statement_timeout`` and
    ``lock_timeout`` lifted for the build (its own come back afterwards). An invalid
    index left by an interrupted build is dropped and built again; a failed build
    drops the invalid index it leaves (writers would go on maintaining it and no
    claim could use it), is listed with its problem, and raises.
    """
    from airflow_atomic_store.store.postgres.connection import bounded

    with _build_lock(cursor, bounded=False):
        name = claim_set.index_name(table_name)
        _record(cursor, table_name, name, claim_set)
        with bounded(cursor, "0", "0"):
            valid = cursor.execute(INDEX_VALID, {"name": name}).fetchone()
            if valid is None or not valid[0]:
                if valid is not None:  # an earlier build died and left an invalid index
                    cursor.execute(_drop_statement(name))
                try:
                    run_ddl(cursor, create_index(table_name, name, claim_set))
                except psycopg.Error as exc:
                    with contextlib.suppress(psycopg.Error):
                        cursor.execute(_drop_statement(name))
                        cursor.execute(
                            _PROBLEM.format(sets=sets_table(table_name)).encode(),
                            {"problem": f"the build failed: {exc}".strip(), "name": name},
                        )
                    raise
    return next(s for s in load_sets(cursor, table_name) if s.name == name)


def _record(cursor: psycopg.Cursor[Any], table_name: str, name: str, claim_set: ClaimSet) -> None:
    """List the set as declared; declaring it again clears a past failure."""
    statement = _RECORD.format(sets=sets_table(table_name)).encode()
    cursor.execute(statement, {"name": name, "spec": Jsonb(claim_set.to_json())})


def drop_set(cursor: psycopg.Cursor[Any], table_name: str, name: str) -> bool:
    """Drop a set's index, then its catalog row (a failed drop leaves it listed).

    Under the build lock, so it waits for a build in progress instead of
    deadlocking with it; that wait, like the drop, ends at the store's
    ``statement_timeout``/``lock_timeout``. Only a set index's name is ever dropped.
    """
    with _build_lock(cursor, bounded=True):
        exists = cursor.execute(INDEX_VALID, {"name": name}).fetchone()
        if exists is not None and is_set_index(table_name, name):
            cursor.execute(_drop_statement(name))
        forget = _FORGET.format(sets=sets_table(table_name)).encode()
        known = cursor.execute(forget, {"name": name}).fetchone() is not None
        return known or (exists is not None and is_set_index(table_name, name))


def _drop_statement(name: str) -> bytes:
    return f"DROP INDEX CONCURRENTLY IF EXISTS {ident(name)}".encode()


@contextlib.contextmanager
def _build_lock(cursor: psycopg.Cursor[Any], *, bounded: bool) -> Iterator[None]:
    """The cross-process build lock, polled: a blocking wait would hold a snapshot
    that ``CREATE INDEX CONCURRENTLY`` in the other session waits for.

    With ``bounded`` the wait ends at the session's ``statement_timeout`` or
    ``lock_timeout`` (the smaller) with a retryable error: a drop behind a
    declared build is a statement of the store's like any other.
    """
    deadline = None
    if bounded:
        row = cursor.execute(_SESSION_BOUND).fetchone()
        if row is not None and row[0] is not None:
            deadline = (time.monotonic() + float(row[0]), float(row[0]))
    params = {"lock": BUILD_LOCK_ID}
    while not cursor.execute(_TRY_LOCK, params).fetchone()[0]:  # type: ignore[index]
        if deadline is not None and time.monotonic() >= deadline[0]:
            raise StoreUnavailableError(
                "PostgreSQL store unavailable: another process is building a claimable "
                f"set (its build waits for open transactions), and the store's timeout "
                f"({deadline[1]:g} s) ran out first; try again"
            )
        time.sleep(_POLL_SECONDS)
    try:
        yield
    finally:
        cursor.execute(_UNLOCK, params)
