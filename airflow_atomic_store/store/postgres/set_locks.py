"""The advisory locks around claimable-set builds (PostgreSQL), and how others see them.

Two locks, both session-level and polled with ``pg_try_`` (a blocking wait would
hold a snapshot that ``CREATE INDEX CONCURRENTLY`` waits for):

- a set's own lock, keyed by its identity, held by whoever builds that set from
  before it looks at the catalog until its build ends: a claim that wants the set
  sees from ``pg_locks`` whether a live process builds it (a builder that dies
  takes its lock with it), so it waits for that build, or builds at once;
- the build lock, one per database, so builds and drops run one at a time (two
  ``CONCURRENTLY`` builds on a table wait for each other's transactions).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from airflow_atomic_store.exceptions import StoreUnavailableError
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.store.postgres import schema

#: Serialises index builds across processes (next to the schema lock's id).
BUILD_LOCK_ID = schema.SCHEMA_LOCK_ID + 1
#: The first key of a set's lock (the second is ``hashtext`` of the set's identity).
SET_BUILD_LOCK_CLASS = (BUILD_LOCK_ID & 0x7FFFFFFF) | 1
_POLL_SECONDS = 0.05

#: Whether some session holds a set's lock: two ``int4`` keys show in ``pg_locks`` as
#: ``classid`` and ``objid`` with ``objsubid`` 2. Read, not tried: a ``pg_try_`` probe
#: would hold the lock for an instant and make a real builder stand aside.
_SET_BUILD = (
    "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND classid = %s::int4::oid AND objid = hashtext(%s)::oid AND objsubid = 2)"
)
#: The session's own bound on a wait: the smaller of its non-zero timeouts, in seconds.
_SESSION_BOUND = (
    "SELECT min(t) FROM (VALUES "
    "(extract(epoch FROM current_setting('statement_timeout')::interval)), "
    "(extract(epoch FROM current_setting('lock_timeout')::interval))) AS v(t) WHERE t > 0"
)


def build_in_progress(cursor: psycopg.Cursor[Any], claim_set: ClaimSet) -> bool:
    """Whether a live session builds this set now (holds its lock)."""
    row = cursor.execute(_SET_BUILD, (SET_BUILD_LOCK_CLASS, claim_set.identity)).fetchone()
    return bool(row and row[0])


@contextlib.contextmanager
def set_build_lock(
    cursor: psycopg.Cursor[Any], claim_set: ClaimSet, *, wait: bool
) -> Iterator[bool]:
    """This set's lock: yields whether it is held (without ``wait``, maybe not)."""
    keys = (SET_BUILD_LOCK_CLASS, claim_set.identity)
    held = _take(cursor, "SELECT pg_try_advisory_lock(%s, hashtext(%s))", keys, wait=wait)
    try:
        yield held
    finally:
        if held:
            cursor.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", keys)


@contextlib.contextmanager
def build_lock(cursor: psycopg.Cursor[Any], *, wait: bool, bounded: bool = False) -> Iterator[bool]:
    """The cross-process build lock: yields whether it is held (without ``wait``, maybe not).

    Drops take it too: a ``DROP INDEX CONCURRENTLY`` of a set being built
    deadlocks with the build (each waits for the other's transaction). With
    ``bounded``, the wait ends at the session's ``statement_timeout`` or
    ``lock_timeout`` (the smaller) with a retryable error: a drop behind a
    declared build, which may wait for an idle transaction however long it is
    open, is a statement of the store's like any other.
    """
    keys = (BUILD_LOCK_ID,)
    held = _take(cursor, "SELECT pg_try_advisory_lock(%s)", keys, wait=wait, bounded=bounded)
    try:
        yield held
    finally:
        if held:
            cursor.execute("SELECT pg_advisory_unlock(%s)", keys)


def _take(
    cursor: psycopg.Cursor[Any],
    try_lock: str,
    keys: tuple[Any, ...],
    *,
    wait: bool,
    bounded: bool = False,
) -> bool:
    """Try the lock; with ``wait`` poll until it is taken (within the session's bound)."""
    deadline = _session_deadline(cursor) if bounded else None
    while not cursor.execute(try_lock, keys).fetchone()[0]:  # type: ignore[index]
        if not wait:
            return False
        if deadline is not None and time.monotonic() >= deadline[0]:
            raise StoreUnavailableError(
                "PostgreSQL store unavailable: another process is building a claimable "
                f"set (its build waits for open transactions), and the store's timeout "
                f"({deadline[1]:g} s) ran out first; try again"
            )
        time.sleep(_POLL_SECONDS)
    return True


def _session_deadline(cursor: psycopg.Cursor[Any]) -> tuple[float, float] | None:
    """``(monotonic deadline, seconds)`` from the session's timeouts; None if it has none."""
    row = cursor.execute(_SESSION_BOUND).fetchone()
    if row is None or row[0] is None:
        return None
    seconds = float(row[0])
    return time.monotonic() + seconds, seconds
