"""Delete-mode drain (issue 33): the aged queue drained by delete-claims, against pgmq's shape.

The aged-queue scenario's drains (:mod:`bench.scenarios.aged_queue`, the same
code) at its targets' configuration, 4 claimers and batch 10, only the four
that answer "does a claim that deletes keep up with a queue that deletes?":
``grown`` (the recipe's mark-claim), ``delete`` (``atomic_claim(mode="delete")``
on the same queue), ``pgmq`` (pgmq-shaped read+delete) and ``pop``
(pgmq-shaped ``pop``). ``aged_target_repeats + 1`` alternations in rotating
order; the target reads their medians. ``python -m bench aged`` runs the same
drains inside its whole grid.
"""

from __future__ import annotations

from typing import Any

from bench import loading
from bench.environment import BenchEnvironment
from bench.scenarios import aged_queue
from bench.sizes import Sizes

TITLE = "Delete-mode drain"
DRAINS = ("grown", "delete", "pgmq", "pop")
TARGET = 1.0


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    url, queue_url = env.postgres_url(), env.postgres_url("readdelete")
    loading.create_schema(url)
    processes, batch = aged_queue.TARGET_CELL
    samples = [
        aged_queue.configuration(url, queue_url, sizes, processes, batch, turn, DRAINS)
        for turn in range(sizes.aged_target_repeats + 1)
    ]
    loading.drop_claim_indexes(url)
    return {
        "pending": sizes.aged_pending,
        "history": sizes.aged_pending * sizes.aged_history_factor,
        "drains": [],
        "target_repeats": samples,
    }


def target_check(data: dict[str, Any]) -> tuple[str, str, bool]:
    samples = aged_queue.target_samples(data)
    mine = aged_queue.target_median(samples, "delete")
    queue = aged_queue.target_median(samples, "pgmq")
    return (
        f"aged queue, 4 claimers, batch 10: delete-mode drain ≥ {TARGET:.1f}x pgmq-shaped "
        "read+delete",
        f"median of {len(samples)} drains: {mine:,.0f} vs {queue:,.0f} rows/s = "
        f"{mine / queue:.2f}x",
        mine >= TARGET * queue,
    )


def section(data: dict[str, Any]) -> str:
    check = target_check(data)
    lines = [
        f"{data['pending']:,} pending rows over {data['history']:,} done rows on the store's "
        "table (the pgmq-shaped queue holds only the pending messages), 4 claimer processes, "
        "batch 10. (e) mark-claims as the recipe does; (f) delete-claims the same queue "
        '(`mode="delete"`: at most once, the rows leave the table in the claim); (c) is '
        "pgmq-shaped read+delete, (g) pgmq-shaped `pop` (one DELETE … RETURNING, SKIP LOCKED, "
        "at most once as (f) is). Each alternation loads every queue afresh and runs the "
        "drains back to back in rotating order.",
        *aged_queue.target_cell_table(data),
        "",
        f"Target: {check[0]}: {check[1]}, {'met' if check[2] else '**missed**'}.",
    ]
    return "\n".join(lines)
