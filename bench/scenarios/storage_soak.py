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


def _cycle(store: AtomicStore, cycle: int, items: int) -> float:
    """One cycle; the claim rate (rows/s) of its drain."""
    for number in range(items):
        store.put(TABLE, f"c{cycle}-{number:06d}", {"status": "pending", "payload": "x" * 64})
    started, claimed = now(), 0
    while batch := store.atomic_claim(TABLE, where=PENDING, limit=BATCH)["count"]:
        claimed += batch
    rate = claimed / (now() - started)
    done = [
        {"field": "status", "operation": "set", "value": "done"},
        {"field": "finishedAt", "operation": "set", "value": "2000-01-01T00:00:00.000000Z"},
    ]
    while store.atomic_claim(TABLE, where=IN_FLIGHT, mutations=done, limit=1000)["count"]:
        pass
    retired = store.retire(TABLE, older_than=0, limit=1000, time_budget=600)
    assert retired["complete"] and retired["retired"] == items, retired
    return rate


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
        with AtomicStore(url) as store:
            for cycle in range(1, sizes.soak_cycles + 1):
                rate = _cycle(store, cycle, sizes.soak_items)
                rows.append({"cycle": cycle, "bytes": size(url), "claim_rows_per_s": rate})
                progress(
                    f"soak {backend} cycle {cycle}: {rows[-1]['bytes']:,} B, {rate:,.0f} rows/s"
                )
        data[backend] = rows
    return data


def target_checks(data: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """Per backend: size and claim rate at the last cycle within 1.2x of the base cycle."""
    base = min(BASE_CYCLE, data["cycles"]) - 1
    checks = []
    for backend in ("postgres", "sqlite"):
        first, last = data[backend][base], data[backend][-1]
        size = last["bytes"] / first["bytes"]
        slower = first["claim_rows_per_s"] / last["claim_rows_per_s"]
        checks.append(
            (
                f"storage soak, {backend}: size and claim rate at cycle {data['cycles']} "
                f"≤ {TARGET}x cycle {base + 1}",
                f"size {size:.2f}x, claim {slower:.2f}x slower",
                size <= TARGET and slower <= TARGET,
            )
        )
    return checks


def section(data: dict[str, Any]) -> str:
    from bench.report_format import ratio, table

    base = min(BASE_CYCLE, data["cycles"]) - 1
    body = []
    for backend in ("postgres", "sqlite"):
        rows = data[backend]
        first, last = rows[base], rows[-1]
        size_ratio = last["bytes"] / first["bytes"]
        slower = first["claim_rows_per_s"] / last["claim_rows_per_s"]
        met = "met" if size_ratio <= TARGET and slower <= TARGET else "**missed**"
        body.append(
            [
                backend,
                f"{first['bytes']:,} → {last['bytes']:,}",
                f"{size_ratio:.2f}x",
                f"{first['claim_rows_per_s']:,.0f} → {last['claim_rows_per_s']:,.0f}",
                ratio(last["claim_rows_per_s"], first["claim_rows_per_s"]),
                met,
            ]
        )
    return "\n".join(
        [
            f"{data['cycles']} cycles of {data['items']:,} items: enqueue, claim (batches of "
            f"{BATCH}), mark done with `finishedAt`, `retire`. Size after each cycle's "
            "`VACUUM` (PostgreSQL, the rows table with its indexes and TOAST) or of the file "
            f"(SQLite); cycle {base + 1} against the last. Target: size and claim rate within "
            f"{TARGET}x.",
            "",
            *table(
                [
                    "backend",
                    f"bytes, cycle {base + 1} → last",
                    "size ratio",
                    "claim rows/s",
                    "rate last ÷ base",
                    "target",
                ],
                body,
            ),
        ]
    )
