"""SQLite claimable sets: the catalog rows and their partial indexes."""

from __future__ import annotations

import json
import sqlite3

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store.backend import is_set_index
from airflow_atomic_store.store.claim_sets import Origin, StoredSet, stored_set
from airflow_atomic_store.store.sqlite.receipts import Statement


def load(
    connection: sqlite3.Connection, statement: Statement, table: str | None
) -> list[StoredSet]:
    """Every set (of ``table``, or all) with whether its index exists."""
    rows = connection.execute(statement("load_sets"), (table, table)).fetchall()
    return [
        stored_set(name, json.loads(spec), origin, problem, bool(present))
        for name, spec, origin, problem, present in rows
    ]


def build(
    connection: sqlite3.Connection,
    statement: Statement,
    *,
    storage_table: str,
    name: str,
    predicate: str,
    claim_set: ClaimSet,
    origin: Origin,
    automatic_limit: int,
) -> bool:
    """Record the set and create its index (``predicate``: literal SQL); False if refused.

    An automatic set is refused when the table already has ``automatic_limit`` of them.
    """
    if origin == "automatic":
        count = connection.execute(
            statement("count_automatic_sets"), (claim_set.table, name)
        ).fetchone()[0]
        if count >= automatic_limit:
            return False
    connection.execute(
        statement("record_set"),
        (name, claim_set.table, dumps(claim_set.to_json()), origin, timestamps.now()),
    )
    connection.execute(
        f"CREATE INDEX IF NOT EXISTS {name} ON {storage_table} "
        f"({claim_set.column}, key) WHERE {predicate}"
    )
    return True


def drop(
    connection: sqlite3.Connection, statement: Statement, storage_table: str, name: str
) -> bool:
    """Forget the set and drop its index (only a set index's name is ever dropped)."""
    known = connection.execute(statement("forget_set"), (name,)).rowcount > 0
    if is_set_index(storage_table, name):
        present = connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)
        ).fetchone()
        connection.execute(f"DROP INDEX IF EXISTS {name}")
        return known or present is not None
    return known
