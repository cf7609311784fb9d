"""The aged-queue drain on SQLite: one process, store against a hand-written statement.

Each drain gets its own freshly loaded database file (pending rows over ten
times as many done rows), claims batches until the queue is empty and is
timed from the first claim to the empty one. Variants: the store as the recipe
calls it on a new store (its schema made the pending set, and the history was
loaded beneath it; ``grown`` is the same, named as before 0.1.0, when a claim
built the set), the store with the set declared over the loaded history, and
``sqlite3`` with a hand-made partial index named by ``INDEXED BY`` (:mod:`bench.handwritten`), once keeping
the JSON text it gets back and once decoding it (``sql-decoded``), as a caller
of the store gets values, and as psycopg decodes ``jsonb`` for the PostgreSQL
hand-written claim. Each drain is timed by the wall clock and by the process's
CPU time (user and system): on a shared machine the CPU time is the steadier.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.store.sqlite.driver import path_from_url
from bench import loading
from bench.environment import BenchEnvironment
from bench.handwritten import SQLITE_PARTIAL_INDEX, HandwrittenSqlite
from bench.timing import now, progress

VARIANTS = ("recipe", "declared", "sql", "sql-decoded", "grown")
BATCH = 10

_LOAD = """
WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
INSERT INTO atomic_store_rows (table_name, key, value, created_at, record_timestamp)
SELECT ?, printf('job-%08d', i),
       '{"status":"' || CASE WHEN i > ? THEN 'pending' ELSE 'done' END || '","payload":' || i || '}',
       printf('2025-01-01T00:00:%02d.%06dZ', i / 1000000, i % 1000000),
       '2025-01-01T00:00:00.000000Z'
FROM seq
"""


def _prepare(url: str, variant: str, pending: int, history: int) -> None:
    with AtomicStore(url) as store:  # a new store: its schema makes the pending set
        store.get(loading.QUEUE, "__schema__")
        if variant == "declared":  # declared over the loaded rows instead
            for listed in store.claim_sets():
                store.drop_claim_set(listed["name"])
    with sqlite3.connect(path_from_url(url), isolation_level=None) as conn:
        conn.execute(_LOAD, (pending + history, loading.QUEUE, history))
        if variant.startswith("sql"):
            conn.execute(SQLITE_PARTIAL_INDEX)
    conn.close()
    if variant == "declared":
        with AtomicStore(url) as store:
            store.ensure_claim_index(table=loading.QUEUE, where=loading.PENDING_WHERE)
    with sqlite3.connect(path_from_url(url), isolation_level=None) as conn:
        conn.execute("ANALYZE")
    conn.close()


def _drain(url: str, variant: str) -> dict[str, Any]:
    if variant in ("sql", "sql-decoded"):
        sql = HandwrittenSqlite(path_from_url(url))
        decode = variant == "sql-decoded"
        claim, close = (lambda: len(sql.claim_partial(BATCH, "aged", decode=decode))), sql.close
    else:
        store = AtomicStore(url)
        store.get(loading.QUEUE, "__warm-up__")
        claim = lambda: store.atomic_claim(  # noqa: E731
            loading.QUEUE, where=loading.PENDING_WHERE, limit=BATCH, execution_id="aged"
        )["count"]
        close = store.close
    try:
        start, cpu_start = now(), time.process_time()
        claimed = first = claim()
        first_seconds = now() - start
        while first:
            first = claim()
            claimed += first
        seconds, cpu_seconds = now() - start, time.process_time() - cpu_start
    finally:
        close()
    return {
        "claimed": claimed,
        "seconds": seconds,
        "rate": claimed / seconds,
        "cpu_seconds": cpu_seconds,
        "cpu_rate": claimed / cpu_seconds,
        "first_ms": first_seconds * 1000,
    }


def run(env: BenchEnvironment, pending: int, history: int, rounds: int) -> dict[str, Any]:
    """Each variant ``rounds`` times, the order rotating (the report shows the mean rate)."""
    drains: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    for number in range(rounds):
        turn = number % len(VARIANTS)
        order = VARIANTS[turn:] + VARIANTS[:turn]
        for variant in order:
            url = env.sqlite_url(f"aged-{variant}-{number}")
            _prepare(url, variant, pending, history)
            result = _drain(url, variant)
            assert result["claimed"] == pending, result
            drains[variant].append(result)
        progress(
            "aged sqlite: "
            + ", ".join(f"{v} {drains[v][-1]['rate']:,.0f} rows/s" for v in VARIANTS)
        )
    return {"pending": pending, "history": history, "batch": BATCH, "drains": drains}
