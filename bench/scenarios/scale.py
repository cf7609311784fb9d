"""Scenario 4: claim 10 rows from tables of growing size where 1% of rows are pending.

The pending rows are the newest (a queue whose history stays in the table),
the worst case for a claim ordered by ``created_at``: without an index on the
claim filter every claim first steps over all the consumed rows. Each variant
claims from the same table (claimed rows are put back between variants), and
the plan of the store's claim is recorded to show which index it used.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from airflow_atomic_store import AtomicStore
from bench import loading
from bench.environment import BenchEnvironment
from bench.handwritten import HandwrittenPostgres
from bench.sizes import Sizes
from bench.timing import now, progress

TITLE = "Scale"


def _time_claims(url: str, kind: str, claims: int) -> list[float]:
    samples = []
    if kind == "store":
        # No set but the declared one: the unindexed side must stay unindexed.
        with AtomicStore(url) as store:
            store.get(loading.QUEUE, "__warm-up__")
            for _ in range(claims):
                start = now()
                result = store.atomic_claim(
                    loading.QUEUE, where=loading.PENDING_WHERE, limit=10, execution_id="scale"
                )
                samples.append(now() - start)
                assert result["count"] == 10, result["count"]
        return samples
    sql = HandwrittenPostgres(url)
    try:
        for _ in range(claims):
            start = now()
            rows = sql.claim(loading.QUEUE, 10, "scale")
            samples.append(now() - start)
            assert len(rows) == 10, len(rows)
    finally:
        sql.close()
    return samples


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    url = env.postgres_url()
    loading.create_schema(url)
    results = []
    for rows in sizes.scale_rows:
        pending = max(rows // 100, 10 * sizes.scale_claims)
        loading.load_queue(url, rows, pending=pending, claim_index=False)
        entry: dict[str, Any] = {"rows": rows, "pending": pending}
        for indexed in (False, True):
            if indexed:
                with AtomicStore(url) as store:
                    store.ensure_claim_index(table=loading.QUEUE, where=loading.PENDING_WHERE)
                loading.vacuum(url)
            label = "index" if indexed else "no_index"
            entry[f"plan_{label}"] = loading.claim_plan(url)
            samples: dict[str, list[float]] = {"store": [], "sql": []}
            for _ in range(sizes.scale_rounds if indexed else 1):
                for kind in ("store", "sql"):
                    samples[kind] += _time_claims(url, kind, sizes.scale_claims)
                    loading.reset_claimed(url)
            for kind, values in samples.items():
                entry[f"{kind}_{label}_ms"] = median(values) * 1000
            progress(
                f"scale {rows:,} rows {label}: store {entry[f'store_{label}_ms']:.2f} ms, "
                f"sql {entry[f'sql_{label}_ms']:.2f} ms per claim of 10"
            )
        results.append(entry)
    return {"claims": sizes.scale_claims, "rounds": sizes.scale_rounds, "sizes": results}


def section(data: dict[str, Any]) -> str:
    from bench.report_format import ratio, table

    base = data["sizes"][0]
    body = [
        [
            f"{e['rows']:,}",
            f"{e['pending']:,}",
            f"{e['store_no_index_ms']:.2f}",
            f"{e['sql_no_index_ms']:.2f}",
            f"{e['store_index_ms']:.2f}",
            f"{e['sql_index_ms']:.2f}",
            ratio(e["store_index_ms"], e["sql_index_ms"]),
            ratio(e["store_index_ms"], base["store_index_ms"]),
        ]
        for e in data["sizes"]
    ]
    plans = [
        f"- {e['rows']:,} rows: without the index `{e['plan_no_index']}`; "
        f"with it `{e['plan_index']}`"
        for e in data["sizes"]
    ]
    return "\n".join(
        [
            f"Median per claim of 10 rows, in milliseconds, over {data['claims']} claims per "
            f"variant without the index and {data['claims'] * data.get('rounds', 1)} with it "
            "(blocks alternating store and SQL, claimed rows put back between blocks); the "
            "pending rows are the newest 1%.",
            "",
            *table(
                [
                    "rows",
                    "pending",
                    "store, no index",
                    "SQL, no index",
                    "store, index",
                    "SQL, index",
                    "store ÷ SQL (index)",
                    f"vs {base['rows']:,} rows (index)",
                ],
                body,
            ),
            "",
            "The store's claim plan (`explain_claim`), first scan node:",
            "",
            *plans,
        ]
    )
