"""SQLite claimable sets: the catalog rows and one partial index per filter.

Each set's index is on ``(table_name, order column, key)`` where the set's
literal predicate holds, shared by every logical table whose claims use the
filter; a claim names it (``INDEXED BY``) and binds its table. Each call here
runs in the caller's transaction: a build is one write transaction, so no
other process ever sees it half done.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store.backend import is_set_index
from airflow_atomic_store.store.claim_set_types import BuildRequest, StoredSet, stored_set
from airflow_atomic_store.store.compiler import WhereCompiler

#: Most names tried for one set (see the PostgreSQL ``set_catalog.choose_name``).
MAX_NAME_ATTEMPTS = 16

_LOAD = (
    "SELECT s.name, s.spec, s.origin, s.problem, s.used_at, "
    "EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = s.name) "
    "FROM {sets} AS s ORDER BY s.name"
)
_RECORD = (
    "INSERT INTO {sets} (name, spec, origin, created_at, used_at) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (name) DO UPDATE SET used_at = excluded.used_at, "
    "origin = CASE WHEN excluded.origin = 'declared' THEN 'declared' ELSE origin END, "
    "problem = CASE WHEN excluded.origin = 'declared' THEN NULL ELSE problem END"
)
_INDEX_EXISTS = "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?"


def _sets(storage_table: str) -> str:
    return f"{storage_table}_claim_sets"


def load(connection: sqlite3.Connection, storage_table: str) -> list[StoredSet]:
    """Every set with whether its index exists and how long no claim used it."""
    now = timestamps.utc_now()
    rows = connection.execute(_LOAD.format(sets=_sets(storage_table))).fetchall()
    return [
        stored_set(name, json.loads(spec), origin, problem, bool(present), _idle(used, now))
        for name, spec, origin, problem, used, present in rows
    ]


def _idle(used_at: str, now: datetime) -> float:
    return (now - timestamps.parse_timestamp(used_at)).total_seconds()


def build(
    connection: sqlite3.Connection, storage_table: str, where: WhereCompiler, request: BuildRequest
) -> StoredSet | None:
    """Record the set and create its index; None if an automatic set finds no room.

    A new automatic set needs room under ``automatic_limit`` for the whole store;
    idle automatic sets are dropped to make it. ``timeout`` is not applied: the
    build is one write transaction, which holds up other writers however long it takes.
    """
    claim_set, origin = request.claim_set, request.origin
    listed = load(connection, storage_table)
    identity = claim_set.identity
    known = next((s for s in listed if s.claim_set.identity == identity), None)
    if (
        origin == "automatic"
        and known is None
        and not _room(connection, storage_table, listed, request)
    ):
        return None
    name = (
        known.name
        if known is not None
        else _free_name(connection, storage_table, listed, claim_set)
    )
    now = timestamps.now()
    connection.execute(
        _RECORD.format(sets=_sets(storage_table)),
        (name, dumps(claim_set.to_json()), origin, now, now),
    )
    predicate = where.literal_predicate(claim_set.conditions, claim_set.match, "value")
    connection.execute(
        f"CREATE INDEX IF NOT EXISTS {name} ON {storage_table} "
        f"(table_name, {claim_set.column}, key) WHERE {predicate}"
    )
    return next(s for s in load(connection, storage_table) if s.name == name)


def _room(
    connection: sqlite3.Connection,
    storage_table: str,
    listed: list[StoredSet],
    request: BuildRequest,
) -> bool:
    automatic = [s for s in listed if s.origin == "automatic"]
    if len(automatic) < request.automatic_limit:
        return True
    idle = [s.name for s in automatic if s.idle >= request.idle_seconds]
    for name in idle:
        drop(connection, storage_table, name)
    return len(automatic) - len(idle) < request.automatic_limit


def _free_name(
    connection: sqlite3.Connection, storage_table: str, listed: list[StoredSet], claim_set: ClaimSet
) -> str:
    """The first proposed name that no listed set and no index holds (40-bit hashes collide)."""
    names = {s.name for s in listed}
    for attempt in range(MAX_NAME_ATTEMPTS):
        name = claim_set.index_name(storage_table, attempt)
        if name not in names and connection.execute(_INDEX_EXISTS, (name,)).fetchone() is None:
            return name
    raise RuntimeError(f"no free index name for claimable set {claim_set.identity}")


def touch(connection: sqlite3.Connection, storage_table: str, name: str) -> bool:
    """Note a use of the set now; False when it is no longer listed."""
    cursor = connection.execute(
        f"UPDATE {_sets(storage_table)} SET used_at = ? WHERE name = ?", (timestamps.now(), name)
    )
    return cursor.rowcount > 0


def drop_idle(connection: sqlite3.Connection, storage_table: str, idle_seconds: float) -> list[str]:
    """Drop the automatic sets no claim used for ``idle_seconds``."""
    idle = [
        s.name
        for s in load(connection, storage_table)
        if s.origin == "automatic" and s.idle >= idle_seconds
    ]
    for name in idle:
        drop(connection, storage_table, name)
    return idle


def drop(connection: sqlite3.Connection, storage_table: str, name: str) -> bool:
    """Forget the set and drop its index (only a set index's name is ever dropped)."""
    known = (
        connection.execute(f"DELETE FROM {_sets(storage_table)} WHERE name = ?", (name,)).rowcount
        > 0
    )
    if is_set_index(storage_table, name):
        present = connection.execute(_INDEX_EXISTS, (name,)).fetchone()
        connection.execute(f"DROP INDEX IF EXISTS {name}")
        return known or present is not None
    return known
