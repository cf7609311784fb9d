"""Scenario 5: the embedded SQLite default, one process and several, store vs sqlite3.

SQLite has one writer at a time, so more processes add lock hand-offs, not
throughput; the interesting figure is how close the store stays to a
hand-written single statement. Both sides use WAL and ``synchronous=NORMAL``
and the same claim index.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.store.sqlite.driver import path_from_url
from bench import loading
from bench.environment import BenchEnvironment
from bench.handwritten import HandwrittenSqlite
from bench.sizes import Sizes
from bench.timing import now, progress
from devkit.processes import run_in_processes

TITLE = "SQLite default"
TABLE = "counters"
INCREMENT = [{"field": "n", "operation": "increment", "value": 1}]

_LOAD = """
WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
INSERT INTO atomic_store_rows (table_name, key, value, created_at, record_timestamp)
SELECT ?, printf('job-%08d', i), '{"status":"pending","payload":' || i || '}',
       printf('2025-01-01T00:00:%02d.%06dZ', i / 1000000, i % 1000000), '2025-01-01T00:00:00.000000Z'
FROM seq
"""


def worker(barrier: Any, kind: str, operation: str, url: str, ops: int) -> dict[str, Any]:
    if kind == "store":
        store = AtomicStore(url)
        store.get(TABLE, "__warm-up__")
        if operation == "update":
            op = lambda: store.atomic_update(TABLE, "hot", mutations=INCREMENT)["updated"]  # noqa: E731
        else:
            op = lambda: store.atomic_claim(  # noqa: E731
                loading.QUEUE, where=loading.PENDING_WHERE, limit=1, execution_id="sqlite"
            )["count"]
        close = store.close
    else:
        sql = HandwrittenSqlite(path_from_url(url))
        if operation == "update":
            op = lambda: sql.increment(TABLE, "hot") is not None  # noqa: E731
        else:
            op = lambda: len(sql.claim(loading.QUEUE, 1, "sqlite"))  # noqa: E731
        close = sql.close
    try:
        barrier.wait(timeout=120)
        start = now()
        done = sum(bool(op()) for _ in range(ops))
        return {"start": start, "end": now(), "done": done}
    finally:
        close()


def _prepare(url: str, operation: str, rows: int) -> None:
    with AtomicStore(url) as store:
        store.put(TABLE, "hot", {"n": 0})
        if operation == "claim":
            store.ensure_claim_index(table=loading.QUEUE, where=loading.PENDING_WHERE)
    if operation == "claim":
        with sqlite3.connect(path_from_url(url), isolation_level=None) as conn:
            conn.execute(_LOAD, (rows, loading.QUEUE))
            conn.execute("ANALYZE")
        conn.close()


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    results = []
    for operation in ("update", "claim"):
        for processes in sizes.sqlite_processes:
            entry: dict[str, Any] = {"operation": operation, "processes": processes}
            for kind in ("store", "sql"):
                url = env.sqlite_url(f"{operation}-{processes}-{kind}")
                _prepare(url, operation, processes * sizes.sqlite_ops + 100)
                args = (kind, operation, url, sizes.sqlite_ops)
                stamps = run_in_processes(worker, [args] * processes)
                wall = max(s["end"] for s in stamps) - min(s["start"] for s in stamps)
                done = sum(s["done"] for s in stamps)
                entry[kind] = {"ops_per_s": done / wall, "done": done}
                if operation == "update":
                    with AtomicStore(url) as store:
                        entry[kind]["final"] = (store.get(TABLE, "hot") or {}).get("n")
            results.append(entry)
            progress(
                f"sqlite {operation} p={processes}: store {entry['store']['ops_per_s']:,.0f}/s, "
                f"sql {entry['sql']['ops_per_s']:,.0f}/s"
            )
    return {"ops": sizes.sqlite_ops, "results": results}


def section(data: dict[str, Any]) -> str:
    from bench.report_format import ratio, table

    names = {"update": "update (increment one row)", "claim": "claim (limit 1, claim index)"}
    body = [
        [
            names[e["operation"]],
            str(e["processes"]),
            f"{e['store']['ops_per_s']:,.0f}",
            f"{e['sql']['ops_per_s']:,.0f}",
            ratio(e["store"]["ops_per_s"], e["sql"]["ops_per_s"]),
        ]
        for e in data["results"]
    ]
    return "\n".join(
        [
            f"{data['ops']:,} operations per process, each its own transaction; "
            "operations per second over all processes.",
            "",
            *table(["operation", "processes", "store ops/s", "sqlite3 ops/s", "store ÷ SQL"], body),
        ]
    )
