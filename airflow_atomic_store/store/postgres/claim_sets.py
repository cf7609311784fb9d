"""PostgreSQL claimable sets: a catalog table and one partial index per set.

Each set's index holds only the rows its predicate matches, on
``(order column, key)``: a claim walks the claimable rows in claim order and
never the consumed ones. Indexes are built ``CONCURRENTLY`` (writers are never
blocked) one at a time across processes, on a session advisory lock polled
with ``pg_try_`` (a blocking wait would hold a snapshot the build waits for).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, Literal

import psycopg
from psycopg import sql

from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.store.backend import is_set_index
from airflow_atomic_store.store.claim_sets import Origin, StoredSet, stored_set
from airflow_atomic_store.store.compiler import WhereCompiler
from airflow_atomic_store.store.postgres import schema, session
from airflow_atomic_store.store.postgres.where import literal, without_placeholders

#: Serialises index builds across processes (next to the schema lock's id).
BUILD_LOCK_ID = schema.SCHEMA_LOCK_ID + 1
#: Longest an automatic build waits for transactions that hold the table (writers
#: whose transactions are still open): then it stands aside without a trace and
#: is tried again later, so a claim never waits long behind someone's transaction.
AUTOMATIC_LOCK_WAIT = "2s"

INDEX_VALID = schema.sql_file("index_valid.sql")
#: Whether this session may build an index on the table: only its owner (or a member
#: of the owning role, or a superuser) may. Asked first, so an automatic build that is
#: not allowed leaves no "must be owner" error in the server's log for every process.
_MAY_BUILD = (
    "SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class AS c "
    "WHERE c.relname = %s AND c.relkind IN ('r', 'p') AND pg_table_is_visible(c.oid)"
)

_LOAD = (
    "SELECT s.name, s.spec, s.origin, s.problem, i.indisvalid "
    "FROM {sets} AS s LEFT JOIN pg_class AS c "
    "ON c.relname = s.name AND c.relkind = 'i' AND pg_table_is_visible(c.oid) "
    "LEFT JOIN pg_index AS i ON i.indexrelid = c.oid "
    "WHERE NOT s.spec ? 'record_index' AND (%s::text IS NULL OR s.table_name = %s) "
    "ORDER BY s.table_name, s.name"
)

#: The ``record_timestamp`` index's give-up ("too slow", "not allowed") is a catalog row
#: under the index's name with this spec, so every process (each Airflow task is one)
#: sees it, not only the one that tried: an index that took longer than the bound is not
#: built again, bounded and dropped, by every task that orders by ``recordTimestamp``.
#: ``load`` skips it (it is no set); ``drop_claim_set(<index name>)`` deletes it.
RECORD_INDEX_SPEC = '{"record_index": true}'


def record_index_given_up(cursor: psycopg.Cursor[Any], sets_table: str, name: str) -> bool:
    row = cursor.execute(
        f"SELECT 1 FROM {sets_table} WHERE name = %s AND problem IS NOT NULL".encode(), (name,)
    ).fetchone()
    return row is not None


def record_index_gave_up(
    cursor: psycopg.Cursor[Any], sets_table: str, name: str, outcome: Outcome, timeout: float
) -> None:
    """Remember the record index's give-up for good; a role that may not write the catalog
    cannot, and goes on retrying in each process (``RETRY_SECONDS``)."""
    problem = _RECORD_PROBLEMS.get(outcome)
    if problem is None:
        return  # "busy": tried again later
    with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
        cursor.execute(
            f"INSERT INTO {sets_table} (name, table_name, spec, origin, problem) "
            "VALUES (%s, '', %s::jsonb, 'automatic', %s) "
            "ON CONFLICT (name) DO UPDATE SET problem = EXCLUDED.problem".encode(),
            (name, RECORD_INDEX_SPEC, problem.format(timeout=timeout)),
        )


def load(cursor: psycopg.Cursor[Any], sets_table: str, table: str | None) -> list[StoredSet]:
    rows = cursor.execute(_LOAD.format(sets=sets_table).encode(), (table, table)).fetchall()
    return [
        stored_set(name, spec, origin, problem, bool(valid))
        for name, spec, origin, problem, valid in rows
    ]


def build(
    cursor: psycopg.Cursor[Any],
    *,
    storage_table: str,
    predicate: str,
    claim_set: ClaimSet,
    origin: Origin,
    timeout: float | None,
    automatic_limit: int,
) -> StoredSet | None:
    """Record the set and build its index; see ``SetStorage.build_claim_set``."""
    name = claim_set.index_name(storage_table)
    sets_table = schema.sets_table(storage_table)
    create = create_index(storage_table, claim_set, predicate)
    with build_lock(cursor, wait=timeout is None) as held:
        if not held:
            return None  # another process is building: the catalog waits for it (bounded)
        with set_build_lock(cursor, name):
            if origin == "automatic" and not _may_add_automatic(
                cursor, sets_table, claim_set, name, automatic_limit
            ):
                return None
            try:
                _record(cursor, sets_table, name, claim_set, origin)
            except psycopg.errors.InsufficientPrivilege:
                if origin == "automatic":
                    return None  # a role that may not even list a set: claims go on unindexed
                raise
            try:
                outcome = build_concurrently(cursor, storage_table, name, create, timeout=timeout)
            except psycopg.Error as exc:  # a declared build: listed as failed, and raised
                with contextlib.suppress(psycopg.Error):
                    _record_problem(cursor, sets_table, name, f"the build failed: {exc}".strip())
                raise
            problem = _PROBLEMS.get(outcome)
            if problem is not None:
                _record_problem(cursor, sets_table, name, problem.format(timeout=timeout))
            return _load_one(cursor, sets_table, name) if outcome == "ready" else None


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


_RECORD_PROBLEMS = {
    "too slow": (
        "the automatic build took longer than {timeout:g} s; build it by hand "
        "(docs/backends.md), then drop_claim_set() this name to clear the give-up"
    ),
    "not allowed": (
        "the store's role may not build indexes (only the table's owner may); "
        "build it as the owner (docs/backends.md), then drop_claim_set() this name"
    ),
}


def _record_problem(cursor: psycopg.Cursor[Any], sets_table: str, name: str, problem: str) -> None:
    cursor.execute(
        f"UPDATE {sets_table} SET problem = %s WHERE name = %s".encode(), (problem, name)
    )


#: Whether some session holds the build lock (a bigint advisory lock shows in
#: ``pg_locks`` as its high and low 32 bits, ``objsubid`` 1), or one set's build lock
#: (two ``int4`` keys show as ``classid`` and ``objid``, ``objsubid`` 2). Read, not
#: tried: a ``pg_try_`` probe would hold the lock for an instant and make a real
#: builder stand aside.
_BUILDING = (
    "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND classid = %s::int4::oid AND objid = {objid} AND objsubid = {objsubid})"
)
_ANY_BUILD = _BUILDING.format(objid="%s::int8::oid", objsubid=1)
_SET_BUILD = _BUILDING.format(objid="hashtext(%s)::oid", objsubid=2)
#: The first key of a set's build lock (the second is ``hashtext`` of its index name):
#: held by the builder, under the build lock, from listing the set until its build
#: ends, so a claim waiting for "its" set can tell that build from another set's.
SET_BUILD_LOCK_CLASS = (BUILD_LOCK_ID & 0x7FFFFFFF) | 1


def build_in_progress(cursor: psycopg.Cursor[Any], name: str | None = None) -> bool:
    """Whether some session builds an index of this database's stores; with ``name``, that set's."""
    if name is None:
        row = cursor.execute(
            _ANY_BUILD, (BUILD_LOCK_ID >> 32, BUILD_LOCK_ID & 0xFFFFFFFF)
        ).fetchone()
    else:
        row = cursor.execute(_SET_BUILD, (SET_BUILD_LOCK_CLASS, name)).fetchone()
    return bool(row and row[0])


def predicate(where: WhereCompiler, claim_set: ClaimSet, table_id: int) -> str:
    """A set's index predicate: the same literal SQL a claim the set covers contains."""
    conditions = where.literal_predicate(claim_set.conditions, claim_set.match, "value")
    return f"table_id = {literal(table_id)} AND {conditions}"


def create_index(
    storage_table: str, claim_set: ClaimSet, predicate: str, *, concurrently: bool = True
) -> str:
    """The set's ``CREATE INDEX``: ``(order column, key)`` where its predicate holds."""
    index = sql.Identifier(claim_set.index_name(storage_table)).as_string(None)
    how = "CONCURRENTLY " if concurrently else ""
    return (
        f"CREATE INDEX {how}IF NOT EXISTS {index} ON "
        f"{sql.Identifier(storage_table).as_string(None)} ({claim_set.column}, key) "
        f"WHERE {without_placeholders(predicate)}"
    )


@contextlib.contextmanager
def set_build_lock(cursor: psycopg.Cursor[Any], name: str) -> Iterator[None]:
    """One set's build lock (see ``SET_BUILD_LOCK_CLASS``); only the build lock's holder takes it."""
    cursor.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (SET_BUILD_LOCK_CLASS, name))
    try:
        yield
    finally:
        cursor.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (SET_BUILD_LOCK_CLASS, name))


@contextlib.contextmanager
def build_lock(cursor: psycopg.Cursor[Any], *, wait: bool) -> Iterator[bool]:
    """The cross-process index-build lock: yields whether it is held (without ``wait``, maybe not).

    Drops take it too: a ``DROP INDEX CONCURRENTLY`` of a set being built
    deadlocks with the build (each waits for the other's transaction).
    """
    while not cursor.execute("SELECT pg_try_advisory_lock(%s)", (BUILD_LOCK_ID,)).fetchone()[0]:  # type: ignore[index]
        if not wait:
            yield False
            return
        time.sleep(0.05)
    try:
        yield True
    finally:
        cursor.execute("SELECT pg_advisory_unlock(%s)", (BUILD_LOCK_ID,))


Outcome = Literal["ready", "busy", "too slow", "not allowed"]
#: What an automatic build's failure means; any other error is raised.
_AUTOMATIC_OUTCOMES: dict[type[psycopg.Error], Outcome] = {
    psycopg.errors.QueryCanceled: "too slow",  # past the build's statement_timeout
    psycopg.errors.LockNotAvailable: "busy",  # past AUTOMATIC_LOCK_WAIT
    psycopg.errors.InsufficientPrivilege: "not allowed",  # only the table's owner may
}


def may_build_index(cursor: psycopg.Cursor[Any], table: str) -> bool:
    """Whether ``CREATE INDEX`` on the (visible) table is allowed to this session's role."""
    row = cursor.execute(_MAY_BUILD, (table,)).fetchone()
    return row is None or bool(row[0])  # a missing table: let the build say what is wrong


def build_concurrently(
    cursor: psycopg.Cursor[Any],
    table: str,
    name: str,
    create: str,
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
    drop_it = f"DROP INDEX CONCURRENTLY IF EXISTS {sql.Identifier(name).as_string(None)}"
    with session.bounded(cursor, *_build_bounds(timeout)):
        if valid is not None:  # an earlier build that gave up left an invalid index
            outcome = _drop_invalid(cursor, drop_it, automatic=timeout is not None)
            if outcome is not None:
                return outcome
        try:
            cursor.execute(create.encode())
            return "ready"
        except psycopg.Error as exc:
            with contextlib.suppress(psycopg.Error):
                cursor.execute(drop_it.encode())
            gave_up = None if timeout is None else _AUTOMATIC_OUTCOMES.get(type(exc))
            if gave_up is None:
                raise
            return gave_up


def _build_bounds(timeout: float | None) -> tuple[str, str]:
    """``(statement_timeout, lock_timeout)`` for a build: none for a declared one."""
    if timeout is None:
        return "0", "0"
    return f"{max(1, round(timeout * 1000))}ms", AUTOMATIC_LOCK_WAIT


#: What an automatic build's failed drop of an invalid index means: its wait for
#: open transactions ran out, so the next claim tries again (never "too slow", for good).
_DROP_OUTCOMES: dict[type[psycopg.Error], Outcome] = {
    psycopg.errors.QueryCanceled: "busy",
    psycopg.errors.LockNotAvailable: "busy",
    psycopg.errors.InsufficientPrivilege: "not allowed",
}


def _drop_invalid(cursor: psycopg.Cursor[Any], drop_it: str, *, automatic: bool) -> Outcome | None:
    """Drop the invalid index an earlier build left, under the build's bounds.

    None: dropped, build on. Unbounded, the drop of an automatic build waited for
    any open writer transaction while holding the build lock.
    """
    try:
        cursor.execute(drop_it.encode())
    except psycopg.Error as exc:
        outcome = _DROP_OUTCOMES.get(type(exc)) if automatic else None
        if outcome is None:
            raise
        return outcome
    return None


def drop(cursor: psycopg.Cursor[Any], storage_table: str, name: str) -> bool:
    """Drop a set's index, then its catalog row (a failed drop leaves it listed).

    Under the build lock, so it waits for a build in progress instead of
    deadlocking with it, and a build never finds its set gone.
    """
    sets_table = schema.sets_table(storage_table)
    with build_lock(cursor, wait=True):
        known = cursor.execute(
            f"SELECT 1 FROM {sets_table} WHERE name = %s".encode(), (name,)
        ).fetchone()
        exists = cursor.execute(INDEX_VALID, (name,)).fetchone()
        if known is None and exists is None:
            return False
        if exists is not None and is_set_index(storage_table, name):
            cursor.execute(
                f"DROP INDEX CONCURRENTLY IF EXISTS {sql.Identifier(name).as_string(None)}".encode()
            )
        elif known is None:
            return False  # never drop an index that is not one of this store's sets
        cursor.execute(f"DELETE FROM {sets_table} WHERE name = %s".encode(), (name,))
        return True


def _may_add_automatic(
    cursor: psycopg.Cursor[Any], sets_table: str, claim_set: ClaimSet, name: str, limit: int
) -> bool:
    """Not already given up on, and the table has room for another automatic set."""
    row = cursor.execute(
        f"SELECT count(*) FILTER (WHERE origin = 'automatic' AND name <> %s), "
        f"bool_or(name = %s AND problem IS NOT NULL) FROM {sets_table} "
        f"WHERE table_name = %s".encode(),
        (name, name, claim_set.table),
    ).fetchone()
    assert row is not None
    count, failed = row
    return not failed and count < limit


def _record(
    cursor: psycopg.Cursor[Any], sets_table: str, name: str, claim_set: ClaimSet, origin: Origin
) -> None:
    """Insert the set; declaring a known set makes it declared and clears a past failure."""
    from psycopg.types.json import Jsonb

    cursor.execute(
        f"INSERT INTO {sets_table} (name, table_name, spec, origin) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (name) DO UPDATE SET "
        "origin = CASE WHEN EXCLUDED.origin = 'declared' THEN 'declared' "
        f"ELSE {sets_table}.origin END, "
        f"problem = CASE WHEN EXCLUDED.origin = 'declared' THEN NULL "
        f"ELSE {sets_table}.problem END".encode(),
        (name, claim_set.table, Jsonb(claim_set.to_json()), origin),
    )


def _load_one(cursor: psycopg.Cursor[Any], sets_table: str, name: str) -> StoredSet:
    row = cursor.execute(
        f"SELECT s.name, s.spec, s.origin, s.problem, "
        f"({INDEX_VALID.replace('%s', 's.name')}) FROM {sets_table} AS s "
        "WHERE s.name = %s".encode(),
        (name,),
    ).fetchone()
    assert row is not None
    name, spec, origin, problem, valid = row
    return stored_set(name, spec, origin, problem, bool(valid))


def rebuild_indexes(
    cursor: psycopg.Cursor[Any], storage_table: str, where: WhereCompiler, ids: dict[str, int]
) -> None:
    """Build every listed set's index again (failed ones stay without), in the caller's transaction.

    The conversion to table ids (``connection.py``) dropped them with the name
    column; it holds the table's exclusive lock already, so a plain build costs
    writers nothing more. ``ids``: the catalog's ids by name.
    """
    for stored in load(cursor, schema.sets_table(storage_table), None):
        if stored.state == "failed":
            continue  # it had no index; one now would be maintained but never chosen
        claim_set = stored.claim_set
        condition = predicate(where, claim_set, ids[claim_set.table])
        cursor.execute(
            create_index(storage_table, claim_set, condition, concurrently=False).encode()
        )
