"""Storage stays flat (issue 33): a queue that retires its history does not grow.

Cycles of enqueue -> claim (mark) -> mark done (with ``finishedAt``) -> ``retire``
on one store, as a year of a dispatcher would run them. After each cycle: the
rows table's total size (PostgreSQL ``pg_total_relation_size`` after the
``VACUUM`` that autovacuum would run; SQLite the file's size) and the claim rate
of that cycle. The target: the last cycle within 1.2x of cycle 5 on both.
SQLite keeps its default ``auto_vacuum=NONE``: pages the retired rows freed go to
the file's free list and the next cycle's rows reuse them, so the file stops
growing without any ``VACUUM`` (which would rewrite the whole file).
"""

from __future__ import annotations

import os
from typing import Any

import psycopg

from airflow_atomic_store import AtomicStore
from bench import cpu
from bench.environment import BenchEnvironment
from bench.sizes import Sizes
from bench.timing import now, progress

TITLE = "Storage soak"
TABLE = "soak"
PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]
IN_FLIGHT = [{"field": "status", "operator": "equals", "value": "in_flight"}]
BATCH = 100
#: The cycle the last one is compared with: the first cycles fill the free space.
BASE_CYCLE = 5
TARGET = 1.2


def _cycle(store: AtomicStore, meter: cpu.CpuMeter, cycle: int, items: int) -> dict[str, float]:
    """One cycle; its drain's claim rate (rows/s) and the CPU µs a claimed row cost.

    The drain lasts a tenth of a second, so on a shared machine its wall-clock rate
    moves with the load; the CPU it cost (this process's, and on PostgreSQL the
    server backend's, from ``/proc``) is the cost of a claim whatever the load.
    """
    for number in range(items):
        store.put(TABLE, f"c{cycle}-{number:06d}", {"status": "pending", "payload": "x" * 64})
    started, claimed = now(), 0
    meter.start()
    while batch := store.atomic_claim(TABLE, where=PENDING, limit=BATCH)["count"]:
        claimed += batch
    rate = claimed / (now() - started)
    spent = meter.stop()
    cpu_seconds = spent["client_cpu"] + (spent["server_cpu"] or 0.0)
    done = [
        {"field": "status", "operation": "set", "value": "done"},
        {"field": "finishedAt", "operation": "set", "value": "2000-01-01T00:00:00.000000Z"},
    ]
    while store.atomic_claim(TABLE, where=IN_FLIGHT, mutations=done, limit=1000)["count"]:
        pass
    retired = store.retire(TABLE, older_than=0, limit=1000, time_budget=600)
    assert retired["complete"] and retired["retired"] == items, retired
    return {"claim_rows_per_s": rate, "claim_cpu_us_per_row": cpu_seconds / claimed * 1e6}


def _postgres_size(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("VACUUM atomic_store_rows")
        row = connection.execute("SELECT pg_total_relation_size('atomic_store_rows')").fetchone()
    assert row is not None
    return int(row[0])


def _sqlite_size(url: str) -> int:
    path = url.removeprefix("sqlite:///")
    return sum(os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p))


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"cycles": sizes.soak_cycles, "items": sizes.soak_items}
    for backend, url, size in (
        ("postgres", env.postgres_url("soak"), _postgres_size),
        ("sqlite", env.sqlite_url("soak"), _sqlite_size),
    ):
        rows = []
        tag = f"bench-soak-{os.getpid()}"
        tagged = cpu.tagged_url(url, tag) if backend == "postgres" else url
        with AtomicStore(tagged) as store:
            store.get(TABLE, "__warm-up__")  # connects: its backend is known from here on
            meter = cpu.CpuMeter(cpu.backend_pids(url, tag) if backend == "postgres" else [])
            for cycle in range(1, sizes.soak_cycles + 1):
                figures = _cycle(store, meter, cycle, sizes.soak_items)
                rows.append({"cycle": cycle, "bytes": size(url), **figures})
                progress(
                    f"soak {backend} cycle {cycle}: {rows[-1]['bytes']:,} B, "
                    f"{figures['claim_rows_per_s']:,.0f} rows/s, "
                    f"{figures['claim_cpu_us_per_row']:.1f} CPU µs/row"
                )
        data[backend] = rows
    return data


def _reading(data: dict[str, Any], backend: str) -> dict[str, Any]:
    """The base cycle and the last of one backend, and how they compare.

    ``costlier`` (the claim's CPU per row, last ÷ base) judges the claim rate
    where it was measured: on a shared machine one drain's wall-clock rate moves
    with the load (the rates are shown beside it); the wall-clock ``slower``
    judges it in older data.
    """
    base = min(BASE_CYCLE, data["cycles"]) - 1
    first, last = data[backend][base], data[backend][-1]
    slower = first["claim_rows_per_s"] / last["claim_rows_per_s"]
    measured = "claim_cpu_us_per_row" in first
    costlier = last["claim_cpu_us_per_row"] / first["claim_cpu_us_per_row"] if measured else slower
    size = last["bytes"] / first["bytes"]
    return {
        "base": base + 1,
        "first": first,
        "last": last,
        "size": size,
        "slower": slower,
        "costlier": costlier,
        "measured": measured,
        "met": size <= TARGET and costlier <= TARGET,
    }


def target_checks(data: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """Per backend: size and claim cost at the last cycle within 1.2x of the base cycle."""
    checks = []
    for backend in ("postgres", "sqlite"):
        r = _reading(data, backend)
        checks.append(
            (
                f"storage soak, {backend}: size and claim rate at cycle {data['cycles']} "
                f"≤ {TARGET}x cycle {r['base']}",
                f"size {r['size']:.2f}x; claim CPU per row {r['costlier']:.2f}x "
                f"(wall-clock rate {1 / r['slower']:.2f}x)",
                r["met"],
            )
        )
    return checks


def section(data: dict[str, Any]) -> str:
    from bench.report_format import table

    body = []
    for backend in ("postgres", "sqlite"):
        r = _reading(data, backend)
        first, last = r["first"], r["last"]
        rates = [row["claim_rows_per_s"] for row in data[backend]]
        cpu_cells = (
            f"{first['claim_cpu_us_per_row']:.1f} → {last['claim_cpu_us_per_row']:.1f}"
            if r["measured"]
            else "-"
        )
        body.append(
            [
                backend,
                f"{first['bytes']:,} → {last['bytes']:,}",
                f"{r['size']:.2f}x",
                cpu_cells,
                f"{r['costlier']:.2f}x",
                f"{first['claim_rows_per_s']:,.0f} → {last['claim_rows_per_s']:,.0f} "
                f"({min(rates):,.0f} to {max(rates):,.0f})",
                "met" if r["met"] else "**missed**",
            ]
        )
    base = min(BASE_CYCLE, data["cycles"])
    return "\n".join(
        [
            f"{data['cycles']} cycles of {data['items']:,} items: enqueue, claim (batches of "
            f"{BATCH}), mark done with `finishedAt`, `retire`. Size after each cycle's "
            "`VACUUM` (PostgreSQL, the rows table with its indexes and TOAST) or of the file "
            f"(SQLite; the store leaves `auto_vacuum` at its default, the freed pages are "
            f"reused); cycle {base} against the last. The claim's cost is its CPU per claimed "
            "row (the process's and, on PostgreSQL, its server backend's): a cycle's drain "
            "lasts a tenth of a second, so its wall-clock rate (shown, with its range over "
            f"all cycles) moves with the machine's load. Target: both within {TARGET}x.",
            "",
            *table(
                [
                    "backend",
                    f"bytes, cycle {base} → last",
                    "size ratio",
                    "claim CPU µs/row",
                    "cost last ÷ base",
                    "claim rows/s (all cycles)",
                    "target",
                ],
                body,
            ),
        ]
    )
