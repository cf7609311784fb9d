"""Bulk-load bench rows straight into the store's table with SQL.

``put`` row by row would take minutes for a million rows, and loading is not
what is measured. The store creates its own schema first (one ``get``), then
``INSERT … SELECT generate_series`` writes rows that look exactly like rows the
store wrote: canonical JSON values, ``created_at`` strictly increasing so the
FIFO order is known.
"""

from __future__ import annotations

from typing import Any

import psycopg

from airflow_atomic_store import AtomicStore
from bench.handwritten import pg_partial_index, pg_table_id

STORAGE_TABLE = "atomic_store_rows"
QUEUE = "jobs"
PENDING_WHERE = [{"field": "status", "operator": "equals", "value": "pending"}]

_INSERT = """
INSERT INTO atomic_store_rows (table_id, key, value, created_at, record_timestamp)
SELECT %(table)s, 'job-' || lpad(i::text, 8, '0'),
       jsonb_build_object('status', CASE WHEN i > %(done)s THEN 'pending' ELSE 'done' END,
                          'payload', i),
       timestamptz '2025-01-01 00:00:00+00' + i * interval '1 millisecond',
       clock_timestamp()
FROM generate_series(1, %(rows)s) AS i
"""


def create_schema(url: str) -> None:
    """Let the store create its table and functions, exactly as on first use."""
    with AtomicStore(url) as store:
        store.get(QUEUE, "__schema__")


def connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def drop_claim_indexes(url: str) -> None:
    """Back to the store's own indexes: drop every claimable set and the bench's hand-made ones.

    Sets are dropped through the store (its catalog and ``<storage>_set_<hash>``
    indexes, declared or its own), including an index whose catalog row is gone.
    """
    with connect(url) as conn:
        orphans = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexname LIKE %s",
            (STORAGE_TABLE, f"{STORAGE_TABLE}\\_set\\_%"),
        ).fetchall()
        hand_made = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexname LIKE %s",
            (STORAGE_TABLE, "bench\\_%"),
        ).fetchall()
        for (name,) in hand_made:
            conn.execute(f'DROP INDEX IF EXISTS "{name}"'.encode())
    with AtomicStore(url) as store:
        names = {entry["name"] for entry in store.claim_sets()} | {name for (name,) in orphans}
        for name in sorted(names):
            store.drop_claim_set(name)


def history_for(pending: int) -> int:
    """Older done rows loaded under a queue of ``pending`` rows: a live queue keeps history.

    It also gives the planner the statistics of a live queue. On a table of
    nothing but pending rows, freshly analysed, PostgreSQL estimates that the
    claim filter matches every row and walks the ``created_at`` index instead
    of the claim index (see bench/analysis.md, round 1).
    """
    return pending // 2


def load_queue(
    url: str,
    rows: int,
    *,
    pending: int | None = None,
    claim_index: bool,
    hand_index: bool = False,
    grown: bool = False,
) -> None:
    """Empty the table, load ``rows`` rows of which the newest ``pending`` are pending.

    With ``claim_index`` the store's :meth:`ensure_claim_index` declares the
    claimable set "status equals pending" over the loaded rows; with ``grown``
    the set is there before the rows arrive, as the schema makes it for every new
    store, so the history grows beneath it as under the deployed recipe; with
    ``hand_index`` the hand-made partial index of :mod:`bench.handwritten` is
    built; without any of them only the store's own indexes exist. Ends with
    ``VACUUM ANALYZE`` so every variant starts from the same state.
    """
    pending = rows if pending is None else pending
    drop_claim_indexes(url)
    with connect(url) as conn:
        conn.execute("TRUNCATE atomic_store_rows")
        if grown:
            claim_on_new_queue(url)  # autocommit: the claim sees the empty table
        table_id = pg_table_id(conn, QUEUE)
        conn.execute(_INSERT, {"table": table_id, "rows": rows, "done": rows - pending})
        if hand_index:
            conn.execute(pg_partial_index(table_id).encode())
    if claim_index:
        with AtomicStore(url) as store:
            store.ensure_claim_index(table=QUEUE, where=PENDING_WHERE)
    vacuum(url)


def claim_on_new_queue(url: str) -> None:
    """The pending set as a new store's schema makes it, on a queue that holds nothing yet,
    and the recipe's first claim through it.

    Every queue that ages under the recipe has had its set from the start, built
    over no rows and holding only the pending ones since; the history is then
    loaded beneath it.
    """
    with AtomicStore(url) as store:
        store.ensure_claim_index(table=QUEUE, where=PENDING_WHERE)
        store.atomic_claim(QUEUE, where=PENDING_WHERE, limit=1, execution_id="new-queue")
        assert [s["state"] for s in store.claim_sets(QUEUE)] == ["ready"]


def vacuum(url: str) -> None:
    with connect(url) as conn:
        conn.execute("VACUUM ANALYZE atomic_store_rows")


def reset_claimed(url: str) -> None:
    """Put rows claimed by an earlier variant back to pending, so variants see the same table."""
    with connect(url) as conn:
        conn.execute(
            "UPDATE atomic_store_rows SET value = (value - 'claimedAt' - 'claimedBy') "
            "|| '{\"status\": \"pending\"}' WHERE table_id = %s AND value ->> 'status' = %s",
            (pg_table_id(conn, QUEUE), "in_flight"),
        )
    vacuum(url)


def count_status(url: str, status: str) -> int:
    with connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM atomic_store_rows WHERE table_id = %s AND value ->> 'status' = %s",
            (pg_table_id(conn, QUEUE), status),
        ).fetchone()
    return int(row[0]) if row else 0


def claim_plan(url: str, limit: int = 10, *, generic: bool = False, where: Any = None) -> str:
    """The first scan node of the store's claim plan: which index the claim walks.

    ``generic`` asks for the plan a repeated (prepared) claim settles on.
    """
    with AtomicStore(url) as store:
        plan = store.explain_claim(
            QUEUE, where=where or PENDING_WHERE, limit=limit, generic=generic
        )
    scans = [line.strip() for line in plan.splitlines() if "Scan" in line]
    return scans[0].split("  (")[0].lstrip("-> ") if scans else plan.splitlines()[0]
