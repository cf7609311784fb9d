"""Lifecycle (issue 33): items/s through a whole life, enqueue to retired, against pgmq's shape.

Four variants (:mod:`bench.lifecycle`) for each worker count and batch size:
the store with an archive (claim, complete, ``retire`` into an archive table)
and with delete-claims, and pgmq-shaped ``send`` → ``read`` → ``archive`` and
→ ``delete`` on the same server. Every variant starts on empty tables; they run
back to back in rotating order, ``lifecycle_rounds`` alternations of each
configuration, and the figures are medians over the alternations (one run moves
by ±15 % on a shared machine). Every run checks that each item was retired once.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench import lifecycle, loading, readdelete_queue
from bench.drainers import timed_processes
from bench.environment import BenchEnvironment
from bench.sizes import Sizes
from bench.timing import progress

TITLE = "Lifecycle"
VARIANTS = {
    "store_archive": "store: claim → complete → retire to archive",
    "pgmq_archive": "pgmq-shaped: send → read → archive",
    "store_delete": "store: delete-claim",
    "pgmq_delete": "pgmq-shaped: send → read → delete",
}
#: each store variant against its pgmq-shaped counterpart
PAIRS = {"store_archive": "pgmq_archive", "store_delete": "pgmq_delete"}
PROCESSES = (1, 4)
BATCHES = (10, 100)
#: the target's configuration: 4 workers, batch 10, store with archive ≥ 1.0x pgmq's archive
TARGET_CELL = (4, 10)
TARGET = 1.0


def _one(kind: str, urls: dict[str, str], processes: int, batch: int, sizes: Sizes) -> dict:
    store_url, queue_url = urls["store"], urls["queue"]
    lifecycle.reset(store_url, queue_url)
    url = queue_url if kind.startswith("pgmq") else store_url
    share = sizes.lifecycle_items // processes
    cap = sizes.lifecycle_cap_seconds
    result = timed_processes(lifecycle.cycle, (kind, url, batch, share, cap), processes, cap)
    expected = share * processes
    if kind.startswith("pgmq"):
        left, archived = readdelete_queue.counts(queue_url)
    else:
        left, archived = lifecycle.left_over(store_url)
    result["expected"] = expected
    result["exactly_once"] = (
        not result["capped"]
        and result["claimed"] == expected
        and result["duplicates"] == 0
        and left == 0
        and archived == (expected if kind.endswith("archive") else 0)
    )
    return result


def _configuration(
    urls: dict[str, str], sizes: Sizes, processes: int, batch: int, turn: int
) -> dict[str, Any]:
    names = list(VARIANTS)
    turn %= len(names)
    order = names[turn:] + names[:turn]
    entry: dict[str, Any] = {"processes": processes, "batch": batch, "order": order}
    for kind in order:
        entry[kind] = _one(kind, urls, processes, batch, sizes)
    progress(
        f"lifecycle p={processes} batch={batch}: "
        + ", ".join(f"{k} {entry[k]['rate']:,.0f}" for k in names)
        + " items/s"
    )
    return entry


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    urls = {"store": env.postgres_url(), "queue": env.postgres_url("readdelete")}
    loading.create_schema(urls["store"])
    rounds: list[dict[str, Any]] = []
    for round_number in range(sizes.lifecycle_rounds):
        for processes in PROCESSES:
            for batch in BATCHES:
                turn = round_number + len(rounds)
                rounds.append(_configuration(urls, sizes, processes, batch, turn))
    return {"items": sizes.lifecycle_items, "rounds": rounds}


def median_rate(data: dict[str, Any], processes: int, batch: int, kind: str) -> float:
    """The median items/s of one variant in one configuration over the alternations."""
    return statistics.median(
        r[kind]["rate"]
        for r in data["rounds"]
        if (r["processes"], r["batch"]) == (processes, batch)
    )


def median_cpu(data: dict[str, Any], processes: int, batch: int, kind: str) -> float | None:
    """The median CPU µs one item cost (workers and their server backends), if measured."""
    samples = [
        r[kind]["client_us_per_row"] + r[kind]["server_us_per_row"]
        for r in data["rounds"]
        if (r["processes"], r["batch"]) == (processes, batch) and "server_us_per_row" in r[kind]
    ]
    return statistics.median(samples) if samples else None


def _cpu_ratio(data: dict[str, Any], processes: int, batch: int, store: str, queue: str) -> str:
    mine, theirs = (median_cpu(data, processes, batch, kind) for kind in (store, queue))
    return f"{mine:.0f} / {theirs:.0f}" if mine and theirs else "-"


def target_check(data: dict[str, Any]) -> tuple[str, str, bool]:
    processes, batch = TARGET_CELL
    store = median_rate(data, processes, batch, "store_archive")
    queue = median_rate(data, processes, batch, "pgmq_archive")
    return (
        f"lifecycle, {processes} workers, batch {batch}: store (claim, complete, retire to "
        f"archive) ≥ {TARGET:.1f}x pgmq-shaped send/read/archive",
        f"{store:,.0f} vs {queue:,.0f} items/s = {store / queue:.2f}x",
        store >= TARGET * queue,
    )


def section(data: dict[str, Any]) -> str:
    from bench.report_format import table

    alternations = len(data["rounds"]) // (len(PROCESSES) * len(BATCHES))
    body = []
    for processes in PROCESSES:
        for batch in BATCHES:
            rates = {kind: median_rate(data, processes, batch, kind) for kind in VARIANTS}
            body.append(
                [
                    str(processes),
                    str(batch),
                    *(f"{rates[kind]:,.0f}" for kind in VARIANTS),
                    *(f"{rates[s] / rates[q]:.2f}x" for s, q in PAIRS.items()),
                    *(_cpu_ratio(data, processes, batch, s, q) for s, q in PAIRS.items()),
                ]
            )
    once = all(r[kind]["exactly_once"] for r in data["rounds"] for kind in VARIANTS)
    check = target_check(data)
    return "\n".join(
        [
            f"{data['items']:,} items per run, each enqueued one call at a time (`put`, "
            "`send`), claimed in batches, completed and retired; items/s from the first "
            f"enqueue to the last retirement, median of {alternations} alternation(s) of the "
            "four variants (rotating order, empty tables each time). The store completes a "
            "batch in one guarded statement (`status = in_flight AND claimedBy = me` → `done`, "
            "`finishedAt`) and `retire`s it into an archive table, as pgmq's `archive` moves "
            "messages into `a_<queue>`. *CPU µs/item*: what one item cost the worker processes "
            "and their server backends together (`bench/cpu.py`); on 2 cores the rate is "
            "bounded by 2,000,000 ÷ that, so it says why a variant is ahead even under load. "
            "Every item retired exactly once: "
            f"{'yes' if once else '**NO**'}.",
            "",
            *table(
                [
                    "workers",
                    "batch",
                    *(f"{label} items/s" for label in VARIANTS.values()),
                    "archive: store ÷ pgmq",
                    "delete: store ÷ pgmq",
                    "archive: CPU µs/item, store / pgmq",
                    "delete: CPU µs/item, store / pgmq",
                ],
                body,
            ),
            "",
            f"Target: {check[0]}: {check[1]}, {'met' if check[2] else '**missed**'}.",
        ]
    )
