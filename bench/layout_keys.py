"""Rows keyed by the logical table's name or by an integer id, side by side, both backends.

    python -m bench.layout_keys [--rounds 5] [--pending 10000] [--done 100000] [--puts 3000]

Why PostgreSQL keys rows by a table id and SQLite by the name (docs/backends.md,
"Physical layout"): the layouts differ only in the column that leads the primary key
and the ``created_at`` index, ``table_name text COLLATE "C"`` (SQLite: ``TEXT``) holding
``jobs`` or a 34-character name, or ``table_id integer``. Each round builds each layout
on fresh tables (history of done rows, pending rows above it, the store's indexes and a
claimable set's partial index) in rotating order, then times one process putting new
rows one statement at a time and draining the pending rows with the store's claim shape (batches of 10: mark in place,
``FOR UPDATE SKIP LOCKED`` on PostgreSQL, ``INDEXED BY`` the set on SQLite), then
rewriting every row's value in one statement (the index inserts alone). The figure
is CPU per row, this process's and (PostgreSQL) its backend's from ``/proc``: on a
shared machine a rate moves with the neighbours' load, CPU much less. Statements are
hand-written, the same for every layout but for the leading column.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench.cpu import CpuMeter
from bench.environment import SERVER_SETTINGS
from devkit.postgres_server import PostgresServer

#: layout -> (PostgreSQL column type, SQLite column type, the logical table "jobs" as a literal)
LAYOUTS = {
    "table name": ('table_name text COLLATE "C"', "table_name TEXT", "'jobs'"),
    "long table name": (
        'table_name text COLLATE "C"',
        "table_name TEXT",
        "'customer_order_fulfilment_requests'",
    ),
    "table id": ("table_id integer", "table_id INTEGER", "7"),
}
STAMP = "2026-12-06T07:00:00.000000Z"
#: Every row's value rewritten by one statement, after the drain: on PostgreSQL a new
#: version of each row with an entry in the primary key and the FIFO index (not HOT: a
#: partial index reads ``value``), with no round trip or claim logic around it.
REWRITE = "rewrite every row"
REWRITE_PG = (
    "UPDATE rows SET value = value || '{\"seen\": true}'::jsonb, "
    "record_timestamp = clock_timestamp()"
)
REWRITE_SQLITE = "UPDATE rows SET value = json_set(value, '$.seen', 1), record_timestamp = 'x'"


def _lead(layout: str) -> tuple[str, str]:
    pg_column, _, literal = LAYOUTS[layout]
    return pg_column.split()[0], literal


def _pg_build(conn: psycopg.Connection[Any], layout: str, done: int, pending: int) -> None:
    column, literal = _lead(layout)
    conn.execute("DROP TABLE IF EXISTS rows")
    conn.execute(
        f'CREATE TABLE rows ({LAYOUTS[layout][0]} NOT NULL, key text COLLATE "C" NOT NULL, '
        "value jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
        f"record_timestamp timestamptz NOT NULL DEFAULT clock_timestamp(), "
        f"PRIMARY KEY ({column}, key))"
    )
    conn.execute(
        f"INSERT INTO rows SELECT {literal}, 'k' || lpad(i::text, 9, '0'), "
        "jsonb_build_object('status', CASE WHEN i <= %s THEN 'done' ELSE 'pending' END, 'n', i), "
        "timestamptz '2026-01-01' + i * interval '1 ms', clock_timestamp() "
        "FROM generate_series(1, %s) AS i",
        (done, done + pending),
    )
    conn.execute(f"CREATE INDEX rows_created_idx ON rows ({column}, created_at, key)")
    conn.execute(
        "CREATE INDEX rows_set_idx ON rows (created_at, key) "
        f"WHERE {column} = {literal} AND (value -> 'status') = '\"pending\"'::jsonb"
    )
    conn.execute("VACUUM ANALYZE rows")


def _pg_claim(layout: str) -> str:
    column, literal = _lead(layout)
    return (
        "WITH picked AS (SELECT key FROM rows "
        f"WHERE {column} = {literal} AND (value -> 'status') = '\"pending\"'::jsonb "
        "ORDER BY created_at, key LIMIT 10 FOR UPDATE SKIP LOCKED) "
        "UPDATE rows r SET value = r.value || jsonb_build_object('status', 'in_flight', "
        "'claimedAt', %s::text, 'claimedBy', 'bench'), record_timestamp = clock_timestamp() "
        f"FROM picked WHERE r.{column} = {literal} AND r.key = picked.key "
        "RETURNING r.key, r.value::text"
    )


def _measure(meter: CpuMeter, work: Callable[[], int]) -> dict[str, float]:
    started = time.perf_counter()
    meter.start()
    rows = work()
    cpu = meter.stop()
    seconds = time.perf_counter() - started
    server = cpu["server_cpu"] or 0.0
    return {
        "client_us": cpu["client_cpu"] / rows * 1e6,
        "server_us": server / rows * 1e6,
        "rows_per_s": rows / seconds,
    }


def _pg_round(url: str, layout: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    column, literal = _lead(layout)
    with psycopg.connect(url, autocommit=True) as conn:
        _pg_build(conn, layout, args.done, args.pending)
        (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone() or (0,)
        meter = CpuMeter([pid])
        put = (
            f"INSERT INTO rows ({column}, key, value) VALUES ({literal}, %s, %s::jsonb) "
            f"ON CONFLICT ({column}, key) DO UPDATE SET value = EXCLUDED.value"
        )

        def puts() -> int:
            for n in range(args.puts):
                conn.execute(put, (f"new{n:09d}", '{"status": "done", "n": 1}'))
            return args.puts

        def drain() -> int:
            claimed, statement = 0, _pg_claim(layout)
            while rows := conn.execute(statement, (STAMP,)).fetchall():
                claimed += len(rows)
            return claimed

        def rewrite() -> int:
            return conn.execute(REWRITE_PG).rowcount

        return {
            "put": _measure(meter, puts),
            "claim of 10": _measure(meter, drain),
            REWRITE: _measure(meter, rewrite),
        }


def _sqlite_round(path: Path, layout: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    column, literal = _lead(layout)
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(
            f"CREATE TABLE rows ({LAYOUTS[layout][1]} NOT NULL, key TEXT NOT NULL, "
            "value TEXT NOT NULL, created_at TEXT NOT NULL, record_timestamp TEXT NOT NULL, "
            f"PRIMARY KEY ({column}, key))"
        )
        conn.execute(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) "
            f"INSERT INTO rows SELECT {literal}, printf('k%09d', i), json_object('status', "
            "CASE WHEN i <= ? THEN 'done' ELSE 'pending' END, 'n', i), "
            "printf('2026-01-01T00:%09dZ', i), '2026-01-01T00:00:00.000000Z' FROM s",
            (args.done + args.pending, args.done),
        )
        conn.execute(f"CREATE INDEX rows_created_idx ON rows ({column}, created_at, key)")
        conn.execute(
            "CREATE INDEX rows_set_idx ON rows (created_at, key) "
            f"WHERE {column} = {literal} AND json_extract(value, '$.status') = 'pending'"
        )
        conn.execute("ANALYZE")
        meter = CpuMeter([])
        put = (
            f"INSERT INTO rows VALUES ({literal}, ?, ?, ?, ?) "
            f"ON CONFLICT ({column}, key) DO UPDATE SET value = excluded.value"
        )
        claim = (
            "UPDATE rows SET value = json_set(value, '$.status', 'in_flight', '$.claimedAt', ?), "
            "record_timestamp = ? WHERE rowid IN (SELECT rowid FROM rows INDEXED BY rows_set_idx "
            f"WHERE {column} = {literal} AND json_extract(value, '$.status') = 'pending' "
            "ORDER BY created_at, key LIMIT 10) RETURNING key, value"
        )

        def puts() -> int:
            for n in range(args.puts):
                conn.execute(put, (f"new{n:09d}", '{"status":"done","n":1}', STAMP, STAMP))
            return args.puts

        def drain() -> int:
            claimed = 0
            while rows := conn.execute(claim, (STAMP, STAMP)).fetchall():
                claimed += len(rows)
            return claimed

        def rewrite() -> int:
            return conn.execute(REWRITE_SQLITE).rowcount

        return {
            "put": _measure(meter, puts),
            "claim of 10": _measure(meter, drain),
            REWRITE: _measure(meter, rewrite),
        }
    finally:
        conn.close()


def _report(backend: str, runs: dict[str, list[dict[str, dict[str, float]]]]) -> list[str]:
    """Medians per layout, and the range of the per-round ratio to the name layout.

    SQLite runs in this process, so its server column is 0.
    """
    lines = [
        f"**{backend}**",
        "",
        "| operation | layout | client µs/row | server µs/row | total µs/row | rows/s "
        "| total ÷ table name | per round |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    base_layout = next(iter(runs))
    for operation in ("put", "claim of 10", REWRITE):
        for layout, rounds in runs.items():
            med = {
                k: statistics.median(r[operation][k] for r in rounds)
                for k in ("client_us", "server_us", "rows_per_s")
            }
            totals = [r[operation]["client_us"] + r[operation]["server_us"] for r in rounds]
            bases = [
                r[operation]["client_us"] + r[operation]["server_us"] for r in runs[base_layout]
            ]
            ratios = [total / base for total, base in zip(totals, bases, strict=True)]
            lines.append(
                f"| {operation} | {layout} | {med['client_us']:.1f} | {med['server_us']:.1f} "
                f"| {statistics.median(totals):.1f} | {med['rows_per_s']:,.0f} "
                f"| {statistics.median(totals) / statistics.median(bases):.2f}x "
                f"| {min(ratios):.2f} to {max(ratios):.2f}x |"
            )
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.layout_keys", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--done", type=int, default=100_000)
    parser.add_argument("--puts", type=int, default=3_000)
    args = parser.parse_args(argv)
    order = list(LAYOUTS)
    pg: dict[str, list[dict[str, dict[str, float]]]] = {layout: [] for layout in order}
    lite: dict[str, list[dict[str, dict[str, float]]]] = {layout: [] for layout in order}
    with (
        PostgresServer(dbname="layout", settings=SERVER_SETTINGS) as server,
        tempfile.TemporaryDirectory() as scratch,
    ):
        for number in range(args.rounds):
            shift = number % len(order)
            for layout in order[shift:] + order[:shift]:  # rotating order
                pg[layout].append(_pg_round(server.url, layout, args))
                lite[layout].append(_sqlite_round(Path(scratch) / "rows.db", layout, args))
            print(f"round {number + 1} of {args.rounds} done", flush=True)
    print(
        f"\n{args.pending:,} pending over {args.done:,} done rows, {args.puts:,} puts; "
        f"medians of {args.rounds} rounds, layouts in rotating order\n"
    )
    print("\n".join(_report("PostgreSQL", pg) + _report("SQLite", lite)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
