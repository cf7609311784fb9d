"""Enqueue (issue 42): a producer hands in ``enqueue_items`` items, in bulk or one by one.

On PostgreSQL, alternating in one process on one server: the store's
``atomic_upsert_many`` (one call of all the items, seed-if-missing, as the queue
recipe's producer enqueues), the same items with one ``atomic_upsert`` each (how
that producer enqueued before), pgmq's own ``send_batch`` of all of them in one call
and its ``send`` one by one (:mod:`bench.pgmq_real`). On SQLite, the bulk call
against the one-by-one loop. Each variant starts on empty tables; the figures are
medians over ``enqueue_rounds`` alternations (rotating order), with the CPU one
item cost the producer and its server backend together.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg

from airflow_atomic_store import AtomicStore
from bench import cpu, loading, pgmq_real
from bench.environment import BenchEnvironment
from bench.handwritten import pg_table_id
from bench.sizes import Sizes
from bench.timing import progress

TITLE = "Enqueue"
TABLE = "enqueue"
VARIANTS = {
    "store_bulk": "store: atomic_upsert_many, one call",
    "store_loop": "store: atomic_upsert per item",
    "pgmq_send_batch": "pgmq: send_batch, one call",
    "pgmq_send": "pgmq: send per item",
    "sqlite_bulk": "SQLite store: atomic_upsert_many, one call",
    "sqlite_loop": "SQLite store: atomic_upsert per item",
}
#: (measured, against, what the ratio says, target)
RATIOS = (
    ("store_bulk", "store_loop", "PostgreSQL: bulk ÷ one call per item", 20.0),
    ("store_bulk", "pgmq_send_batch", "PostgreSQL: bulk ÷ pgmq send_batch", 1.0),
    ("sqlite_bulk", "sqlite_loop", "SQLite: bulk ÷ one call per item", 20.0),
    ("pgmq_send_batch", "pgmq_send", "pgmq: send_batch ÷ send per item", None),
)


def _items(count: int, round_number: int) -> list[dict[str, Any]]:
    return [
        {
            "key": f"item-{round_number}-{n:06d}",
            "insert_value": {"status": "pending", "payload": {"item": n}},
        }
        for n in range(count)
    ]


def _reset(urls: dict[str, str]) -> None:
    with psycopg.connect(urls["store"], autocommit=True) as conn:
        conn.execute(
            "DELETE FROM atomic_store_rows WHERE table_id = %s", (pg_table_id(conn, TABLE),)
        )
        conn.execute("VACUUM ANALYZE atomic_store_rows")
    if "pgmq" in urls:
        pgmq_real.create(urls["pgmq"])


def _timed(meter: cpu.CpuMeter | None, work: Callable[[], Any], items: int) -> dict[str, Any]:
    if meter is not None:
        meter.start()
    started = time.perf_counter()
    work()
    seconds = time.perf_counter() - started
    result: dict[str, Any] = {"seconds": seconds, "rate": items / seconds}
    if meter is not None:
        used = meter.stop()
        result["client_us_per_item"] = used["client_cpu"] / items * 1e6
        if used["server_cpu"] is not None:
            result["server_us_per_item"] = used["server_cpu"] / items * 1e6
    return result


def _one(kind: str, urls: dict[str, str], items: list[dict[str, Any]], tag: str) -> dict:
    count = len(items)
    if kind.startswith("sqlite"):
        with AtomicStore(urls["sqlite"]) as store:
            store.get(TABLE, "__warm-up__")
            meter = cpu.CpuMeter([])  # SQLite runs in this process: its CPU is the client's
            if kind == "sqlite_bulk":
                return _timed(meter, lambda: store.atomic_upsert_many(TABLE, items), count)
            return _timed(meter, lambda: _loop(store, items), count)
    if kind.startswith("store"):
        _reset(urls)
        with AtomicStore(cpu.tagged_url(urls["store"], tag)) as store:
            store.get(TABLE, "__warm-up__")
            meter = cpu.CpuMeter(cpu.backend_pids(urls["store"], tag))
            if kind == "store_bulk":
                return _timed(meter, lambda: store.atomic_upsert_many(TABLE, items), count)
            return _timed(meter, lambda: _loop(store, items), count)
    pgmq_real.create(urls["pgmq"])
    queue = pgmq_real.Pgmq(cpu.tagged_url(urls["pgmq"], tag))
    try:
        meter = cpu.CpuMeter(cpu.backend_pids(urls["pgmq"], tag))
        messages = [item["insert_value"] for item in items]
        if kind == "pgmq_send_batch":
            return _timed(meter, lambda: queue.send_batch(messages), count)
        return _timed(meter, lambda: [queue.send(message) for message in messages], count)
    finally:
        queue.close()


def _loop(store: AtomicStore, items: list[dict[str, Any]]) -> None:
    for item in items:
        store.atomic_upsert(TABLE, item["key"], insert_value=item["insert_value"])


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    names = list(VARIANTS)
    urls = {"store": env.postgres_url(), "sqlite": env.sqlite_url("enqueue")}
    if pgmq_real.available():
        urls["pgmq"] = env.postgres_url("pgmq")
        pgmq_real.install(urls["pgmq"])
    elif require_extras:
        raise SystemExit("pgmq is missing: run `make bench` (bench group: pgmq 1.1.4)")
    else:
        names = [kind for kind in names if not kind.startswith("pgmq")]
    loading.create_schema(urls["store"])
    rounds: list[dict[str, Any]] = []
    for number in range(sizes.enqueue_rounds):
        order = names[number % len(names) :] + names[: number % len(names)]
        entry: dict[str, Any] = {"order": order}
        for position, kind in enumerate(order):
            # the SQLite variants write fresh keys each round (its table is never emptied)
            items = _items(sizes.enqueue_items, number * len(names) + position)
            entry[kind] = _one(kind, urls, items, f"bench-enqueue-{number}-{kind}")
        rounds.append(entry)
        progress(
            f"enqueue round {number + 1}: "
            + ", ".join(f"{k} {entry[k]['rate']:,.0f}" for k in names)
            + " items/s"
        )
    return {"items": sizes.enqueue_items, "rounds": rounds, "pgmq": pgmq_real.version()}


def median_rate(data: dict[str, Any], kind: str) -> float:
    return statistics.median(r[kind]["rate"] for r in data["rounds"])


def _median_cpu(data: dict[str, Any], kind: str) -> str:
    samples = [
        r[kind]["client_us_per_item"] + r[kind].get("server_us_per_item", 0.0)
        for r in data["rounds"]
        if "client_us_per_item" in r[kind]
    ]
    return f"{statistics.median(samples):.1f}" if samples else "-"


def target_checks(data: dict[str, Any]) -> list[tuple[str, str, bool]]:
    measured = data["rounds"][0]
    checks = []
    for mine, theirs, label, target in RATIOS:
        if target is None or mine not in measured or theirs not in measured:
            continue
        a, b = median_rate(data, mine), median_rate(data, theirs)
        checks.append(
            (
                f"enqueue {data['items']:,} items, {label} ≥ {target:g}x",
                f"{a:,.0f} vs {b:,.0f} items/s = {a / b:.1f}x",
                a >= target * b,
            )
        )
    return checks


def section(data: dict[str, Any]) -> str:
    from bench.report_format import table

    measured = [kind for kind in VARIANTS if kind in data["rounds"][0]]
    body = [
        [VARIANTS[kind], f"{median_rate(data, kind):,.0f}", _median_cpu(data, kind)]
        for kind in measured
    ]
    ratios = [
        [label, f"{median_rate(data, a) / median_rate(data, b):.1f}x"]
        for a, b, label, _ in RATIOS
        if a in measured and b in measured
    ]
    return "\n".join(
        [
            f"{data['items']:,} items (`{{status: pending, payload: {{item: n}}}}`) handed in "
            "by one producer, in one call or one call per item; items/s over the whole "
            f"enqueue, median of {len(data['rounds'])} alternation(s) (rotating order, empty "
            "tables each time), and the CPU µs one item cost the producer and its server "
            "backend (SQLite: the producer, which runs the database in-process). The store's calls are seed-if-missing upserts (a repeated "
            "producer adds nothing twice); *pgmq* is pgmq's own `send_batch`/`send` "
            f"(`pgmq.sql` {data.get('pgmq', '')}, PyPI `pgmq` 1.1.4).",
            "",
            *table(["variant", "items/s", "CPU µs/item"], body),
            "",
            *table(["ratio", "median"], ratios),
            "",
            *(
                f"Target: {label}: {figure}, {'met' if ok else '**missed**'}."
                for label, figure, ok in target_checks(data)
            ),
        ]
    )
