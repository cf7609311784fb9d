"""Scenario 2: single-operation latency, store vs the hand-written statement, one process.

Calls alternate in rounds (a block of store calls, then a block of
hand-written calls, repeated), so machine noise lands on both sides alike.
Each call is timed on its own; p50 and p99 are over all calls of a variant.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from airflow_atomic_store import AtomicStore
from bench import loading
from bench.environment import BenchEnvironment
from bench.handwritten import HandwrittenPostgres
from bench.sizes import Sizes
from bench.timing import now, percentile, progress

TITLE = "Single-operation latency"

TABLE = "latency"
GUARD = [{"field": "tokens", "operator": "gt", "value": 0}]
DECREMENT = [{"field": "tokens", "operation": "increment", "value": -1}]
INCREMENT = [{"field": "n", "operation": "increment", "value": 1}]

Op = Callable[[], Any]


def _ops(store: AtomicStore, sql: HandwrittenPostgres) -> dict[str, tuple[Op, Op]]:
    """Per operation: (store call, hand-written call), each doing the same database work."""
    fresh = itertools.count()
    me = "latency-bench"
    return {
        "atomic_update (guarded decrement)": (
            lambda: store.atomic_update(TABLE, "tokens", where=GUARD, mutations=DECREMENT),
            lambda: sql.guarded_decrement(TABLE, "tokens"),
        ),
        "atomic_upsert (seed-if-missing, inserts)": (
            lambda: store.atomic_upsert(TABLE, f"seed-{next(fresh)}", insert_value={"n": 0}),
            lambda: sql.seed(TABLE, f"seed-{next(fresh)}", {"n": 0}),
        ),
        "atomic_upsert (on-conflict increment)": (
            lambda: store.atomic_upsert(
                TABLE, "counter", insert_value={"n": 1}, mutations=INCREMENT
            ),
            lambda: sql.upsert_increment(TABLE, "counter", {"n": 1}),
        ),
        "atomic_claim (limit 1, claim index)": (
            lambda: store.atomic_claim(
                loading.QUEUE, where=loading.PENDING_WHERE, limit=1, execution_id=me
            ),
            lambda: sql.claim(loading.QUEUE, 1, me),
        ),
    }


def measure(op: Op, calls: int) -> list[float]:
    samples = []
    for _ in range(calls):
        start = now()
        op()
        samples.append(now() - start)
    return samples


def alternating(variants: dict[str, Op], sizes: Sizes) -> dict[str, Any]:
    """Each variant's p50/p99 (ms) over calls made in alternating rounds, after a warm-up."""
    for op in variants.values():
        measure(op, 20)  # warm caches and prepared statements
    per_round = max(1, sizes.latency_calls // sizes.latency_rounds)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(sizes.latency_rounds):
        for name, op in variants.items():
            samples[name] += measure(op, per_round)
    result: dict[str, Any] = {"calls": per_round * sizes.latency_rounds}
    for name, values in samples.items():
        result[name] = {
            "p50_ms": percentile(values, 50) * 1000,
            "p99_ms": percentile(values, 99) * 1000,
        }
    return result


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    url = env.postgres_url()
    loading.create_schema(url)
    # Enough pending rows for every claim of both variants, and the index users should have.
    pending = 2 * sizes.latency_calls + 1000
    total = pending + loading.history_for(pending)
    loading.load_queue(url, total, pending=pending, claim_index=True)
    store, sql = AtomicStore(url), HandwrittenPostgres(url)
    try:
        store.put(TABLE, "tokens", {"tokens": 10**12})
        store.put(TABLE, "counter", {"n": 0})
        results = []
        for name, (store_op, sql_op) in _ops(store, sql).items():
            entry = {"operation": name, **alternating({"store": store_op, "sql": sql_op}, sizes)}
            results.append(entry)
            progress(
                f"latency {name}: store p50 {entry['store']['p50_ms']:.3f} ms, "
                f"sql p50 {entry['sql']['p50_ms']:.3f} ms"
            )
    finally:
        store.close()
        sql.close()
    return {"operations": results}


def section(data: dict[str, Any]) -> str:
    from bench.report_format import ratio, table

    body = [
        [
            e["operation"],
            str(e["calls"]),
            f"{e['store']['p50_ms']:.3f}",
            f"{e['sql']['p50_ms']:.3f}",
            ratio(e["store"]["p50_ms"], e["sql"]["p50_ms"]),
            f"{e['store']['p99_ms']:.3f}",
            f"{e['sql']['p99_ms']:.3f}",
            ratio(e["store"]["p99_ms"], e["sql"]["p99_ms"]),
        ]
        for e in data["operations"]
    ]
    lines = [
        "One process, one connection, calls back to back; milliseconds per call, "
        "store and hand-written calls alternating in rounds.",
        "",
        *table(
            [
                "operation",
                "calls",
                "store p50",
                "SQL p50",
                "p50 ratio",
                "store p99",
                "SQL p99",
                "p99 ratio",
            ],
            body,
        ),
    ]
    return "\n".join(lines)
