"""The catalog of claimable sets (PostgreSQL): reads and writes of ``<storage>_claim_sets``.

A set is found by its identity (the canonical text of its spec), never by its
index name: names keep 40 bits of hash, and two sets can share them
(:func:`choose_name` gives the second another name).
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.store.claim_set_types import Origin, StoredSet, stored_set
from airflow_atomic_store.store.postgres import schema

INDEX_VALID = schema.sql_file("index_valid.sql")
#: Most names tried for one set (``choose_name``): a second 40-bit collision is
#: about a trillion times rarer than the first.
MAX_NAME_ATTEMPTS = 16

_COLUMNS = (
    "s.name, s.spec, s.origin, s.problem, i.indisvalid, "
    "extract(epoch FROM clock_timestamp() - s.used_at)::float8"
)
_LOAD = (
    f"SELECT {_COLUMNS} FROM {{sets}} AS s LEFT JOIN pg_class AS c "
    "ON c.relname = s.name AND c.relkind = 'i' AND pg_table_is_visible(c.oid) "
    "LEFT JOIN pg_index AS i ON i.indexrelid = c.oid "
    "WHERE NOT s.spec ? 'record_index' {only} ORDER BY s.name"
)

#: The ``record_timestamp`` index's give-up ("too slow", "not allowed") is a catalog row
#: under the index's name with this spec, so every process (each Airflow task is one)
#: sees it, not only the one that tried: an index that took longer than the bound is not
#: built again, bounded and dropped, by every task that orders by ``recordTimestamp``.
#: ``load`` skips it (it is no set); ``drop_claim_set(<index name>)`` deletes it.
RECORD_INDEX_SPEC = '{"record_index": true}'


def load(cursor: psycopg.Cursor[Any], sets_table: str) -> list[StoredSet]:
    """Every set of the store, with its index's state and how long it has been idle."""
    rows = cursor.execute(_LOAD.format(sets=sets_table, only="").encode()).fetchall()
    return [_stored(row) for row in rows]


def load_one(cursor: psycopg.Cursor[Any], sets_table: str, name: str) -> StoredSet:
    statement = _LOAD.format(sets=sets_table, only="AND s.name = %s")
    row = cursor.execute(statement.encode(), (name,)).fetchone()
    assert row is not None
    return _stored(row)


def _stored(row: Any) -> StoredSet:
    name, spec, origin, problem, valid, idle = row
    return stored_set(name, spec, origin, problem, bool(valid), idle)


def find(listed: list[StoredSet], claim_set: ClaimSet) -> StoredSet | None:
    """The listed set that is this one (same identity), if any."""
    identity = claim_set.identity
    return next((s for s in listed if s.claim_set.identity == identity), None)


def choose_name(
    cursor: psycopg.Cursor[Any], storage_table: str, listed: list[StoredSet], claim_set: ClaimSet
) -> str:
    """The set's index name: its listed one, or the first proposal nothing else holds.

    Taken: a listed set's name (another set whose 40-bit hash is the same), or an
    index of that name that the catalog does not list. ``CREATE INDEX IF NOT
    EXISTS`` on a taken name would silently build nothing, and the second set
    would never be built. Called under the build lock, so no other process
    chooses at the same time.
    """
    known = find(listed, claim_set)
    if known is not None:
        return known.name
    names = {s.name for s in listed}
    for attempt in range(MAX_NAME_ATTEMPTS):
        name = claim_set.index_name(storage_table, attempt)
        if name not in names and cursor.execute(INDEX_VALID, (name,)).fetchone() is None:
            return name
    raise RuntimeError(f"no free index name for claimable set {claim_set.identity}")


def record(
    cursor: psycopg.Cursor[Any], sets_table: str, name: str, claim_set: ClaimSet, origin: Origin
) -> None:
    """Insert the set; declaring a known set makes it declared and clears a past failure."""
    cursor.execute(
        f"INSERT INTO {sets_table} (name, spec, origin) VALUES (%s, %s, %s) "
        "ON CONFLICT (name) DO UPDATE SET used_at = clock_timestamp(), "
        "origin = CASE WHEN EXCLUDED.origin = 'declared' THEN 'declared' "
        f"ELSE {sets_table}.origin END, "
        f"problem = CASE WHEN EXCLUDED.origin = 'declared' THEN NULL "
        f"ELSE {sets_table}.problem END".encode(),
        (name, Jsonb(claim_set.to_json()), origin),
    )


def record_problem(cursor: psycopg.Cursor[Any], sets_table: str, name: str, problem: str) -> None:
    cursor.execute(
        f"UPDATE {sets_table} SET problem = %s WHERE name = %s".encode(), (problem, name)
    )


def forget(cursor: psycopg.Cursor[Any], sets_table: str, name: str) -> None:
    cursor.execute(f"DELETE FROM {sets_table} WHERE name = %s".encode(), (name,))


def touch(cursor: psycopg.Cursor[Any], sets_table: str, name: str) -> bool:
    """Note a use of the set now; False when it is no longer listed."""
    cursor.execute(
        f"UPDATE {sets_table} SET used_at = clock_timestamp() WHERE name = %s".encode(), (name,)
    )
    return cursor.rowcount > 0


def automatic_count(cursor: psycopg.Cursor[Any], sets_table: str) -> int:
    """The store's automatic sets (the record index's give-up row is none)."""
    row = cursor.execute(
        f"SELECT count(*) FROM {sets_table} "
        "WHERE origin = 'automatic' AND NOT spec ? 'record_index'".encode()
    ).fetchone()
    return int(row[0]) if row else 0


def idle_names(cursor: psycopg.Cursor[Any], sets_table: str, idle_seconds: float) -> list[str]:
    """The automatic sets no claim used for ``idle_seconds``, longest idle first."""
    rows = cursor.execute(
        f"SELECT name FROM {sets_table} WHERE origin = 'automatic' "
        "AND NOT spec ? 'record_index' "
        "AND used_at < clock_timestamp() - make_interval(secs => %s) ORDER BY used_at".encode(),
        (idle_seconds,),
    ).fetchall()
    return [name for (name,) in rows]


def record_index_given_up(cursor: psycopg.Cursor[Any], sets_table: str, name: str) -> bool:
    row = cursor.execute(
        f"SELECT 1 FROM {sets_table} WHERE name = %s AND problem IS NOT NULL".encode(), (name,)
    ).fetchone()
    return row is not None


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


def record_index_gave_up(
    cursor: psycopg.Cursor[Any], sets_table: str, name: str, outcome: str, timeout: float
) -> None:
    """Remember the record index's give-up for good; a role that may not write the catalog
    cannot, and goes on retrying in each process (``RETRY_SECONDS``)."""
    problem = _RECORD_PROBLEMS.get(outcome)
    if problem is None:
        return  # "busy": tried again later
    with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
        cursor.execute(
            f"INSERT INTO {sets_table} (name, spec, origin, problem) "
            "VALUES (%s, %s::jsonb, 'automatic', %s) "
            "ON CONFLICT (name) DO UPDATE SET problem = EXCLUDED.problem".encode(),
            (name, RECORD_INDEX_SPEC, problem.format(timeout=timeout)),
        )
