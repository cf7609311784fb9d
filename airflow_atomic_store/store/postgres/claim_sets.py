"""PostgreSQL claimable sets: one partial index per filter, built and dropped concurrently.

Each set's index holds only the rows its predicate matches, on
``(table_id, order column, key)``: every logical table whose claims use the
filter shares it, and a claim (its table id bound) walks its own table's
claimable rows in claim order, never the consumed ones. Indexes are built
``CONCURRENTLY`` (writers are never blocked), one at a time across processes
(``set_locks``); the catalog is ``set_catalog``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import psycopg
from psycopg import sql

from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.store.backend import is_set_index
from airflow_atomic_store.store.claim_set_types import BuildRequest, StoredSet
from airflow_atomic_store.store.compiler import WhereCompiler
from airflow_atomic_store.store.postgres import schema, session, set_catalog
from airflow_atomic_store.store.postgres.set_catalog import (
    INDEX_VALID,
    load,
    record_index_gave_up,
    record_index_given_up,
)
from airflow_atomic_store.store.postgres.set_locks import (
    BUILD_LOCK_ID,
    build_in_progress,
    build_lock,
    set_build_lock,
)

__all__ = [
    "BUILD_LOCK_ID",
    "build",
    "build_concurrently",
    "build_in_progress",
    "build_lock",
    "drop",
    "drop_idle",
    "load",
    "record_index_gave_up",
    "record_index_given_up",
]

#: Longest an automatic build (or a cleanup's drop) waits for transactions that hold
#: the table (writers whose transactions are still open): then it stands aside without
#: a trace and is tried again later, so a claim never waits long behind one.
AUTOMATIC_LOCK_WAIT = "2s"
#: Whether this session may build an index on the table: only its owner (or a member
#: of the owning role, or a superuser) may. Asked first, so an automatic build that is
#: not allowed leaves no "must be owner" error in the server's log for every process.
_MAY_BUILD = (
    "SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class AS c "
    "WHERE c.relname = %s AND c.relkind IN ('r', 'p') AND pg_table_is_visible(c.oid)"
)

Outcome = Literal["ready", "busy", "too slow", "not allowed"]
#: What an automatic build's failure means; any other error is raised.
_AUTOMATIC_OUTCOMES: dict[type[psycopg.Error], Outcome] = {
    psycopg.errors.QueryCanceled: "too slow",  # past the build's statement_timeout
    psycopg.errors.LockNotAvailable: "busy",  # past AUTOMATIC_LOCK_WAIT
    psycopg.errors.InsufficientPrivilege: "not allowed",  # only the table's owner may
}
#: What a failed drop of an (invalid or idle) index means: its wait for open
#: transactions ran out, so it is tried again later (never "too slow", for good).
_DROP_OUTCOMES: dict[type[psycopg.Error], Outcome] = {
    psycopg.errors.QueryCanceled: "busy",
    psycopg.errors.LockNotAvailable: "busy",
    psycopg.errors.InsufficientPrivilege: "not allowed",
}
#: Why an automatic build gave up for good, as the catalog lists it ("busy" is tried again).
_PROBLEMS = {
    "too slow": (
        "the automatic build took longer than {timeout:g} s; declare the set "
        "with ensure_claim_index(), which waits for the build"
    ),
    "not allowed": (
        "the store's role may not build indexes (PostgreSQL lets only the table's owner "
        "create one); declare the set with ensure_claim_index() as the owner"
    ),
}


def predicate(where: WhereCompiler, claim_set: ClaimSet) -> str:
    """A set's index predicate: the same literal SQL a claim the set covers contains."""
    return where.literal_predicate(claim_set.conditions, claim_set.match, "value")


def create_index(
    storage_table: str, name: str, claim_set: ClaimSet, predicate: str, *, concurrently: bool = True
) -> sql.Composed:
    """The set's ``CREATE INDEX``: ``(table_id, order column, key)`` where its predicate holds.

    The predicate is in psycopg's placeholder grammar (its literals' ``%`` doubled,
    as in the claims that use the set): run the statement with an empty parameter
    tuple, and psycopg itself turns ``%%`` back into ``%`` (:func:`run_ddl`).
    """
    how = "CONCURRENTLY " if concurrently else ""
    return sql.SQL(
        "CREATE INDEX {how}IF NOT EXISTS {name} ON {table} ({columns}) WHERE {where}"
    ).format(
        how=sql.SQL(how),
        name=sql.Identifier(name),
        table=sql.Identifier(storage_table),
        columns=sql.SQL(", ").join(map(sql.Identifier, ("table_id", claim_set.column, "key"))),
        where=sql.SQL(predicate),
    )


def run_ddl(cursor: psycopg.Cursor[Any], statement: sql.Composed | str) -> None:
    """Run a statement written in psycopg's placeholder grammar that takes no parameters.

    The empty tuple makes psycopg parse the placeholders (so ``%%`` is ``%``) and,
    with no parameter to send, still use the simple query protocol, where
    ``CREATE INDEX CONCURRENTLY`` runs; never prepared, since an index is built once.
    """
    cursor.execute(statement, (), prepare=False)


def build(
    cursor: psycopg.Cursor[Any], storage_table: str, where: WhereCompiler, request: BuildRequest
) -> StoredSet | None:
    """Record the set and build its index; see ``SetStorage.build_claim_set``.

    The set's lock comes first and stays held through the build: a claim that
    wants this set waits while it is held, and builds at once when it is not.
    """
    automatic = request.timeout is not None
    with set_build_lock(cursor, request.claim_set, wait=not automatic) as mine:
        if not mine:
            return None  # another process builds this set: the caller waits for it
        with build_lock(cursor, wait=not automatic) as held:
            if not held:
                return None  # another set's build (or a drop) runs: not waited for
            return _build_locked(cursor, storage_table, where, request)


def _build_locked(
    cursor: psycopg.Cursor[Any], storage_table: str, where: WhereCompiler, request: BuildRequest
) -> StoredSet | None:
    """``build`` under both locks: nobody else chooses a name or builds now."""
    claim_set, origin, timeout = request.claim_set, request.origin, request.timeout
    automatic = timeout is not None
    sets_table = schema.sets_table(storage_table)
    listed = set_catalog.load(cursor, sets_table)
    known = set_catalog.find(listed, claim_set)
    if automatic and not _may_add(cursor, storage_table, known, request):
        return None
    name = set_catalog.choose_name(cursor, storage_table, listed, claim_set)
    try:
        set_catalog.record(cursor, sets_table, name, claim_set, origin)
    except psycopg.errors.InsufficientPrivilege:
        if automatic:
            return None  # a role that may not even list a set: claims go on unindexed
        raise
    create = create_index(storage_table, name, claim_set, predicate(where, claim_set))
    try:
        outcome = build_concurrently(cursor, storage_table, name, create, timeout=timeout)
    except psycopg.Error as exc:  # a declared build: listed as failed, and raised
        with contextlib.suppress(psycopg.Error):
            set_catalog.record_problem(cursor, sets_table, name, f"the build failed: {exc}".strip())
        raise
    problem = _PROBLEMS.get(outcome)
    if problem is not None:
        set_catalog.record_problem(cursor, sets_table, name, problem.format(timeout=timeout))
    return set_catalog.load_one(cursor, sets_table, name) if outcome == "ready" else None


def _may_add(
    cursor: psycopg.Cursor[Any],
    storage_table: str,
    known: StoredSet | None,
    request: BuildRequest,
) -> bool:
    """Not given up on, and listed already or room under the store's bound (idle sets go)."""
    if known is not None:
        return known.state != "failed"
    sets_table = schema.sets_table(storage_table)
    limit = request.automatic_limit
    if set_catalog.automatic_count(cursor, sets_table) < limit:
        return True
    idle = set_catalog.idle_names(cursor, sets_table, request.idle_seconds)
    _drop_each(cursor, storage_table, idle)
    return set_catalog.automatic_count(cursor, sets_table) < limit


def may_build_index(cursor: psycopg.Cursor[Any], table: str) -> bool:
    """Whether ``CREATE INDEX`` on the (visible) table is allowed to this session's role."""
    row = cursor.execute(_MAY_BUILD, (table,)).fetchone()
    return row is None or bool(row[0])  # a missing table: let the build say what is wrong


def build_concurrently(
    cursor: psycopg.Cursor[Any],
    table: str,
    name: str,
    create: sql.Composed | str,
    *,
    timeout: float | None,
) -> Outcome:
    """Build one index ``CONCURRENTLY`` (under the build lock), bounded when ``timeout`` is set.

    An invalid index left by an interrupted build is rebuilt. With a timeout,
    waits for other sessions' open transactions end after
    ``AUTOMATIC_LOCK_WAIT`` ("busy": try again later), the build itself after
    ``timeout`` ("too slow"), and a role that does not own the table may not
    build at all ("not allowed"). Without one (a declared set) the session's
    ``statement_timeout`` and ``lock_timeout`` are lifted for the build, which
    waits however long it takes, and a failure is raised. Either way the
    invalid index a failed build leaves is dropped: writers would go on
    maintaining it and no claim could use it. The session's own timeouts come
    back afterwards.
    """
    valid = cursor.execute(INDEX_VALID, (name,)).fetchone()
    if valid is not None and valid[0]:
        return "ready"
    if timeout is not None and not may_build_index(cursor, table):
        return "not allowed"
    with session.bounded(cursor, *_build_bounds(timeout)):
        if valid is not None:  # an earlier build that gave up, or died, left an invalid index
            outcome = _drop_index(cursor, name, bounded=timeout is not None)
            if outcome is not None:
                return outcome
        try:
            run_ddl(cursor, create)
            return "ready"
        except psycopg.Error as exc:
            with contextlib.suppress(psycopg.Error):
                cursor.execute(_drop_statement(name))
            gave_up = None if timeout is None else _AUTOMATIC_OUTCOMES.get(type(exc))
            if gave_up is None:
                raise
            return gave_up


def _build_bounds(timeout: float | None) -> tuple[str, str]:
    """``(statement_timeout, lock_timeout)`` for a build: none for a declared one."""
    if timeout is None:
        return "0", "0"
    return f"{max(1, round(timeout * 1000))}ms", AUTOMATIC_LOCK_WAIT


def _drop_statement(name: str) -> bytes:
    return f"DROP INDEX CONCURRENTLY IF EXISTS {sql.Identifier(name).as_string(None)}".encode()


def _drop_index(cursor: psycopg.Cursor[Any], name: str, *, bounded: bool) -> Outcome | None:
    """Drop an index (under the caller's bounds); None: dropped. Bounded, a drop whose
    wait for open transactions ran out is "busy" (tried again later) instead of raised."""
    try:
        cursor.execute(_drop_statement(name))
    except psycopg.Error as exc:
        outcome = _DROP_OUTCOMES.get(type(exc)) if bounded else None
        if outcome is None:
            raise
        return outcome
    return None


def drop(cursor: psycopg.Cursor[Any], storage_table: str, name: str) -> bool:
    """Drop a set's index, then its catalog row (a failed drop leaves it listed).

    Under the build lock, so it waits for a build in progress instead of
    deadlocking with it, and a build never finds its set gone; that wait, like
    the drop, ends at the store's ``statement_timeout``/``lock_timeout``.
    """
    sets_table = schema.sets_table(storage_table)
    with build_lock(cursor, wait=True, bounded=True):
        known = cursor.execute(
            f"SELECT 1 FROM {sets_table} WHERE name = %s".encode(), (name,)
        ).fetchone()
        exists = cursor.execute(INDEX_VALID, (name,)).fetchone()
        if known is None and exists is None:
            return False
        if exists is not None and is_set_index(storage_table, name):
            cursor.execute(_drop_statement(name))
        elif known is None:
            return False  # never drop an index that is not one of this store's sets
        set_catalog.forget(cursor, sets_table, name)
        return True


def drop_idle(cursor: psycopg.Cursor[Any], storage_table: str, idle_seconds: float) -> list[str]:
    """Drop the automatic sets no claim used for ``idle_seconds``, unless a build runs now."""
    with build_lock(cursor, wait=False) as held:
        if not held:
            return []
        names = set_catalog.idle_names(cursor, schema.sets_table(storage_table), idle_seconds)
        return _drop_each(cursor, storage_table, names)


def _drop_each(cursor: psycopg.Cursor[Any], storage_table: str, names: list[str]) -> list[str]:
    """Drop these sets (under the build lock), each bounded as an automatic build; stop at
    the first that stands aside behind an open transaction (it stays listed)."""
    sets_table = schema.sets_table(storage_table)
    dropped: list[str] = []
    if not names or not may_build_index(cursor, storage_table):
        return dropped  # only the table's owner may drop its indexes: leave no error in the log
    with session.bounded(cursor, *_build_bounds(AUTOMATIC_DROP_SECONDS)):
        for name in names:
            if is_set_index(storage_table, name) and _drop_index(cursor, name, bounded=True):
                break
            set_catalog.forget(cursor, sets_table, name)
            dropped.append(name)
    return dropped


#: Longest a cleanup's drop of one idle set runs (its waits: ``AUTOMATIC_LOCK_WAIT``).
AUTOMATIC_DROP_SECONDS = 10.0
