"""Scenario 3: many processes incrementing one counter; no increment may be lost.

Every increment on one row serialises on that row's lock, so this measures
the store's per-statement cost under the worst contention a counter sees,
and proves the final count equals the attempts.
"""

from __future__ import annotations

from typing import Any

from airflow_atomic_store import AtomicStore
from bench import loading
from bench.environment import BenchEnvironment
from bench.handwritten import HandwrittenPostgres
from bench.sizes import Sizes
from bench.timing import now, progress
from devkit.processes import run_in_processes

TITLE = "Hot key contention"
TABLE = "hot"
INCREMENT = [{"field": "n", "operation": "increment", "value": 1}]


def increment(barrier: Any, kind: str, url: str, key: str, times: int) -> dict[str, float]:
    """Increment ``key`` ``times`` times through the store or the hand-written statement."""
    if kind == "store":
        store = AtomicStore(url)
        store.get(TABLE, key)
        op = lambda: store.atomic_update(TABLE, key, mutations=INCREMENT)  # noqa: E731
        close = store.close
    else:
        sql = HandwrittenPostgres(url)
        op = lambda: sql.increment(TABLE, key)  # noqa: E731
        close = sql.close
    try:
        barrier.wait(timeout=120)
        start = now()
        for _ in range(times):
            op()
        return {"start": start, "end": now()}
    finally:
        close()


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    url = env.postgres_url()
    loading.create_schema(url)
    runs: dict[str, list[dict[str, Any]]] = {"store": [], "sql": []}
    attempts = sizes.hot_processes * sizes.hot_increments
    with AtomicStore(url) as store:
        for kind in ("store", "sql") * sizes.hot_repeats:  # alternating
            key = f"counter-{kind}-{len(runs[kind])}"
            store.put(TABLE, key, {"n": 0})
            args = (kind, url, key, sizes.hot_increments)
            stamps = run_in_processes(increment, [args] * sizes.hot_processes)
            wall = max(s["end"] for s in stamps) - min(s["start"] for s in stamps)
            final = (store.get(TABLE, key) or {}).get("n")
            runs[kind].append({"ops_per_s": attempts / wall, "final": final})
            progress(f"hot key {kind}: {attempts / wall:,.0f} ops/s, final {final}/{attempts}")
    summary = {
        kind: {
            "ops_per_s": max(r["ops_per_s"] for r in results),
            "finals": [r["final"] for r in results],
            "attempts": attempts,
        }
        for kind, results in runs.items()
    }
    return {
        "processes": sizes.hot_processes,
        "increments": sizes.hot_increments,
        "repeats": sizes.hot_repeats,
        **summary,
    }


def section(data: dict[str, Any]) -> str:
    from bench.report_format import ratio, table

    store, sql = data["store"], data["sql"]
    body = [
        [
            variant,
            f"{entry['ops_per_s']:,.0f}",
            ", ".join(f"{final:,}" for final in entry["finals"]) + f" / {entry['attempts']:,}",
            "yes" if all(final == entry["attempts"] for final in entry["finals"]) else "**NO**",
        ]
        for variant, entry in (("store `atomic_update`", store), ("hand-written UPDATE", sql))
    ]
    return "\n".join(
        [
            f"{data['processes']} processes x {data['increments']:,} increments of one row's "
            f"`n` (best of {data['repeats']} run(s) each, alternating). Store ÷ SQL: "
            f"{ratio(store['ops_per_s'], sql['ops_per_s'])}.",
            "",
            *table(
                ["variant", "increments/s (best)", "final counts / attempts", "none lost"], body
            ),
        ]
    )
