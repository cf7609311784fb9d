"""CPU per claim of two checkouts of the store, side by side on one aged queue.

On a shared machine a drain's rate moves with everyone else's load; the CPU a
claim costs (the claimer process's and its PostgreSQL backend's, read from
``/proc``) moves much less. Each round loads nothing new: the same aged queue
(pending rows over ten times as many done ones, the pending set declared, so both
sides claim through the same index) is put back to pending, vacuumed, and drained
in claims of ten by one process of each checkout in turn, the order alternating.
A second measure times claims of an empty queue (the polling dispatcher's call).

    python scripts/claim_cpu_before_after.py --before ../before --after . --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cpu import CpuMeter, backend_pids, tagged_url  # noqa: E402
from devkit.postgres_server import PostgresServer  # noqa: E402

PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]
_LOAD = (
    "INSERT INTO atomic_store_rows (table_id, key, value) SELECT "
    "(SELECT id FROM atomic_store_rows_tables WHERE name = 'jobs'), 'job-' || lpad(i::text, 8, '0'), "
    "jsonb_build_object('status', CASE WHEN i > %(done)s THEN 'pending' ELSE 'done' END, 'n', i) "
    "FROM generate_series(1, %(rows)s) AS i"
)
#: The pending rows a delete drain took, back (a mark drain's are still there).
_REFILL = (
    "INSERT INTO atomic_store_rows (table_id, key, value) SELECT "
    "(SELECT id FROM atomic_store_rows_tables WHERE name = 'jobs'), 'job-' || lpad(i::text, 8, '0'), "
    "jsonb_build_object('status', 'pending', 'n', i) "
    "FROM generate_series(%(done)s + 1, %(rows)s) AS i ON CONFLICT DO NOTHING"
)
_RESET = (
    "UPDATE atomic_store_rows SET value = jsonb_build_object('status', 'pending', 'n', "
    "value -> 'n') WHERE value ->> 'status' = 'in_flight'"
)


def drain(url: str, claims: int, mode: str = "mark") -> dict[str, Any]:
    """Run in a checkout's own process: ``claims`` claims of ten, then 200 of an empty table."""
    from airflow_atomic_store import AtomicStore

    options: dict[str, Any] = {"execution_id": "cpu"} if mode == "mark" else {"mode": "delete"}

    tag = f"cpu-{os.getpid()}"
    with AtomicStore(tagged_url(url, tag)) as store:
        store.atomic_claim("jobs", where=PENDING, limit=10, execution_id="warm")
        meter = CpuMeter(backend_pids(url, tag))
        meter.start()
        started, rows = time.perf_counter(), 0
        for _ in range(claims):
            rows += store.atomic_claim("jobs", where=PENDING, limit=10, **options)["count"]
        seconds = time.perf_counter() - started
        cpu = meter.stop()
        empty = []
        for _ in range(200):
            begun = time.perf_counter()
            store.atomic_claim("nothing", where=PENDING, limit=10, execution_id="cpu")
            empty.append(time.perf_counter() - begun)
    return {
        "rows": rows,
        "wall_us_per_claim": seconds / claims * 1e6,
        "client_us_per_claim": cpu["client_cpu"] / claims * 1e6,
        "server_us_per_claim": (cpu["server_cpu"] or 0.0) / claims * 1e6,
        "empty_claim_p50_us": statistics.median(empty) * 1e6,
    }


def prepare(url: str, claims: int) -> dict[str, Any]:
    """In a checkout's own process: its schema (each release opens only its own version)
    and the pending set, before the rows are loaded beneath it."""
    from airflow_atomic_store import AtomicStore

    with AtomicStore(url) as store:
        store.put("jobs", "seed", {"status": "seed"})
        store.ensure_claim_index(table="jobs", where=PENDING)
    return {}


def drain_delete(url: str, claims: int) -> dict[str, Any]:
    """:func:`drain` with delete-claims (``mode="delete"``)."""
    return drain(url, claims, "delete")


def drain_sqlite(path: str, claims: int) -> dict[str, Any]:
    """In a checkout's own process: ``claims`` claims of ten from a copy of the SQLite queue."""
    from airflow_atomic_store import AtomicStore

    with AtomicStore(f"sqlite:///{path}") as store:
        store.atomic_claim("jobs", where=PENDING, limit=10, execution_id="warm")
        started, cpu, rows = time.perf_counter(), time.process_time(), 0
        for _ in range(claims):
            rows += store.atomic_claim("jobs", where=PENDING, limit=10, execution_id="cpu")["count"]
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "rows": rows,
        "wall_us_per_claim": seconds / claims * 1e6,
        "cpu_us_per_claim": cpu / claims * 1e6,
    }


def _sqlite_queue(path: Path, pending: int) -> None:
    """The aged queue's rows, loaded beneath a store that ``prepare`` made."""
    import sqlite3

    rows = pending * 11
    with sqlite3.connect(path) as conn:
        conn.execute(
            "WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < :rows) "
            "INSERT INTO atomic_store_rows (table_name, key, value, created_at, record_timestamp) "
            "SELECT 'jobs', printf('job-%08d', i), json_object('status', CASE WHEN i > :done "
            "THEN 'pending' ELSE 'done' END, 'n', i), "
            "printf('2025-01-01T00:00:%02d.%06dZ', i / 1000000, i % 1000000), "
            "'2025-01-01T00:00:00.000000Z' FROM seq",
            {"rows": rows, "done": rows - pending},
        )
        conn.execute("ANALYZE")
    conn.close()


def _side(tree: Path, url: str, claims: int, function: str = "drain") -> dict[str, Any]:
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[2]); "
        "import scripts.claim_cpu_before_after as m; "
        "print(json.dumps(getattr(m, sys.argv[5])(sys.argv[3], int(sys.argv[4]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tree), str(ROOT), url, str(claims), function],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pending", type=int, default=20_000)
    parser.add_argument("--sqlite", action="store_true", help="the SQLite drain instead")
    parser.add_argument("--delete", action="store_true", help="delete-claims (PostgreSQL)")
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    claims = args.pending // 10 - 5
    if args.sqlite:
        return _sqlite_main(sides, args.rounds, args.pending, claims)
    server = PostgresServer(dbname="claimcpu").start()
    try:
        # One schema per side, each made by its own checkout, the same rows loaded into each.
        urls = {side: server.create_user_schema(f"claimcpu_{side}") for side in sides}
        rows = args.pending * 11
        for side, url in urls.items():
            _side(sides[side], url, 0, "prepare")
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(_LOAD, {"rows": rows, "done": rows - args.pending})
        results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for number in range(args.rounds):
            order = list(sides) if number % 2 == 0 else list(reversed(sides))
            for side in order:
                url = urls[side]
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(_RESET)
                    rows = args.pending * 11
                    conn.execute(_REFILL, {"rows": rows, "done": rows - args.pending})
                    conn.execute("VACUUM ANALYZE atomic_store_rows")
                function = "drain_delete" if args.delete else "drain"
                results[side].append(_side(sides[side], url, claims, function))
            print(f"round {number + 1}: " + json.dumps({s: results[s][-1] for s in sides}))
        _table(results)
    finally:
        server.stop()
    return 0


def _sqlite_main(sides: dict[str, Path], rounds: int, pending: int, claims: int) -> int:
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="claimcpu-") as tmp:
        originals = {side: Path(tmp) / f"{side}.db" for side in sides}
        for side, original in originals.items():  # each made by its own checkout
            _side(sides[side], f"sqlite:///{original}", 0, "prepare")
            _sqlite_queue(original, pending)
        results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for number in range(rounds):
            order = list(sides) if number % 2 == 0 else list(reversed(sides))
            for side in order:
                copy = Path(tmp) / f"{side}-{number}.db"
                shutil.copyfile(originals[side], copy)
                results[side].append(_side(sides[side], str(copy), claims, "drain_sqlite"))
            print(f"round {number + 1}: " + json.dumps({s: results[s][-1] for s in sides}))
    _table(results)
    return 0


def _table(results: dict[str, list[dict[str, Any]]]) -> None:
    print("| measure | median before | median after | after ÷ before |")
    print("|---|---:|---:|---:|")
    for measure in results["before"][0]:
        if measure == "rows":
            continue
        before = statistics.median(r[measure] for r in results["before"])
        after = statistics.median(r[measure] for r in results["after"])
        print(f"| {measure} | {before:,.1f} | {after:,.1f} | {after / before:.2f}x |")


if __name__ == "__main__":
    raise SystemExit(main())
