"""Lifecycle (issues 33, 42): items/s through a whole life, enqueue to retired, against pgmq.

For each worker count and batch size, every variant of :mod:`bench.lifecycle`: the
store one call per item (finish and archive in one step; finish then ``retire``;
delete-claims) and in bulk (``atomic_upsert_many`` of 100), pgmq's own functions
(``send``/``send_batch``, ``read``, ``archive``/``delete``: :mod:`bench.pgmq_real`)
and the hand-written pgmq-shaped statements, all on one server. Every variant
starts on empty tables; they run back to back in rotating order,
``lifecycle_rounds`` alternations of each configuration, and the figures are
medians over the alternations (one run moves by ±15 % on a shared machine). Every
run checks that each item was retired once.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench import lifecycle, loading, pgmq_real, readdelete_queue
from bench.drainers import timed_processes
from bench.environment import BenchEnvironment
from bench.sizes import Sizes
from bench.timing import progress

TITLE = "Lifecycle"
VARIANTS = {
    "pgmq_archive": "pgmq: send → read → archive",
    "shaped_archive": "pgmq-shaped: send → read → archive",
    "store_archive": "store: put → claim → finish+archive",
    "store_retire": "store: put → claim → finish → retire",
    "pgmq_delete": "pgmq: send → read → delete",
    "shaped_delete": "pgmq-shaped: send → read → delete",
    "store_delete": "store: put → delete-claim",
    "pgmq_bulk": "pgmq: send_batch(100) → read → archive",
    "store_bulk": "store: upsert_many(100) → claim → finish+archive",
}
#: each store variant against its counterpart: (store, against, what the ratio says)
PAIRS = (
    ("store_archive", "pgmq_archive", "archive: store ÷ pgmq"),
    ("store_delete", "pgmq_delete", "delete: store ÷ pgmq"),
    ("store_bulk", "pgmq_bulk", "bulk: store ÷ pgmq"),
    ("store_archive", "shaped_archive", "archive: store ÷ pgmq-shaped"),
    ("store_retire", "store_archive", "retire later ÷ archive at finish"),
)
#: the targets (issue 42): 4 workers, batch 10, store ≥ 1.0x pgmq's own functions
TARGETS = (
    ("store_archive", "pgmq_archive", "one call per item: put, claim, finish+archive"),
    ("store_bulk", "pgmq_bulk", "bulk: upsert_many(100), claim, finish+archive"),
    ("store_delete", "pgmq_delete", "delete: put, delete-claim"),
)
PROCESSES = (1, 4)
BATCHES = (10, 100)
TARGET_CELL = (4, 10)
TARGET = 1.0


def _variants(require_extras: bool) -> list[str]:
    if pgmq_real.available():
        return list(VARIANTS)
    if require_extras:
        raise SystemExit("pgmq is missing: run `make bench` (bench group: pgmq 1.1.4)")
    return [kind for kind in VARIANTS if not kind.startswith("pgmq")]


def _one(kind: str, urls: dict[str, str], processes: int, batch: int, sizes: Sizes) -> dict:
    store_url, queue_url, pgmq_url = urls["store"], urls["queue"], urls.get("pgmq")
    lifecycle.reset(store_url, queue_url, pgmq_url)
    family = kind.split("_", 1)[0]
    url = {"store": store_url, "shaped": queue_url, "pgmq": pgmq_url}[family]
    share = sizes.lifecycle_items // processes
    cap = sizes.lifecycle_cap_seconds
    result = timed_processes(lifecycle.cycle, (kind, url, batch, share, cap), processes, cap)
    expected = share * processes
    if family == "pgmq":
        left, archived = pgmq_real.counts(pgmq_url)  # type: ignore[arg-type]
    elif family == "shaped":
        left, archived = readdelete_queue.counts(queue_url)
    else:
        left, archived = lifecycle.left_over(store_url)
    result["expected"] = expected
    result["exactly_once"] = (
        not result["capped"]
        and result["claimed"] == expected
        and result["duplicates"] == 0
        and left == 0
        and archived == (0 if kind.endswith("delete") else expected)
    )
    return result


def _configuration(
    urls: dict[str, str], sizes: Sizes, names: list[str], processes: int, batch: int, turn: int
) -> dict[str, Any]:
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
    names = _variants(require_extras)
    urls = {"store": env.postgres_url(), "queue": env.postgres_url("readdelete")}
    if any(kind.startswith("pgmq") for kind in names):
        urls["pgmq"] = env.postgres_url("pgmq")
        pgmq_real.install(urls["pgmq"])
    loading.create_schema(urls["store"])
    rounds: list[dict[str, Any]] = []
    for round_number in range(sizes.lifecycle_rounds):
        for processes in PROCESSES:
            for batch in BATCHES:
                turn = round_number + len(rounds)
                rounds.append(_configuration(urls, sizes, names, processes, batch, turn))
    return {"items": sizes.lifecycle_items, "rounds": rounds, "pgmq": pgmq_real.version()}


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


def _measured(data: dict[str, Any]) -> list[str]:
    return [kind for kind in VARIANTS if kind in data["rounds"][0]]


def target_checks(data: dict[str, Any]) -> list[tuple[str, str, bool]]:
    processes, batch = TARGET_CELL
    measured = _measured(data)
    checks = []
    for store_kind, pgmq_kind, label in TARGETS:
        if pgmq_kind not in measured:
            continue
        store = median_rate(data, processes, batch, store_kind)
        queue = median_rate(data, processes, batch, pgmq_kind)
        checks.append(
            (
                f"lifecycle, {processes} workers, batch {batch}, {label} ≥ {TARGET:.1f}x pgmq "
                f"({VARIANTS[pgmq_kind].removeprefix('pgmq: ')})",
                f"{store:,.0f} vs {queue:,.0f} items/s = {store / queue:.2f}x",
                store >= TARGET * queue,
            )
        )
    return checks


def section(data: dict[str, Any]) -> str:
    from bench.report_format import table

    alternations = len(data["rounds"]) // (len(PROCESSES) * len(BATCHES))
    measured = _measured(data)
    pairs = [(s, q, label) for s, q, label in PAIRS if s in measured and q in measured]
    body = []
    for processes in PROCESSES:
        for batch in BATCHES:
            rates = {kind: median_rate(data, processes, batch, kind) for kind in measured}
            body.append(
                [
                    str(processes),
                    str(batch),
                    *(f"{rates[kind]:,.0f}" for kind in measured),
                    *(f"{rates[s] / rates[q]:.2f}x" for s, q, _ in pairs),
                ]
            )
    cpu_rows = []
    for processes in PROCESSES:
        for batch in BATCHES:
            costs = [median_cpu(data, processes, batch, kind) for kind in measured]
            cpu_rows.append(
                [str(processes), str(batch), *(f"{c:.0f}" if c else "-" for c in costs)]
            )
    once = all(r[kind]["exactly_once"] for r in data["rounds"] for kind in measured)
    checks = target_checks(data)
    return "\n".join(
        [
            f"{data['items']:,} items per run, each enqueued (one call per item: `put`, "
            "`send`; or 100 per call: `atomic_upsert_many`, `send_batch`), claimed in batches, "
            "finished and retired; items/s from the first enqueue to the last retirement, "
            f"median of {alternations} alternation(s) of the variants (rotating order, empty "
            "tables each time). *pgmq* is pgmq's own SQL functions "
            f"(`pgmq.sql` {data.get('pgmq', '')} from the PyPI package `pgmq` 1.1.4, installed "
            "as plain SQL into the same server); *pgmq-shaped* the hand-written reproduction "
            "of its statements. The store finishes a batch with one `atomic_update_many` "
            "guarded on `claimedBy = me` (`done`, `finishedAt`) that moves the rows to an "
            "archive table in the same statement, as pgmq's `archive` moves messages into "
            "`a_<queue>`; *retire* finishes in place and `retire`s into the archive after. "
            "Every item retired exactly once: "
            f"{'yes' if once else '**NO**'}.",
            "",
            *table(
                [
                    "workers",
                    "batch",
                    *(f"{VARIANTS[kind]} items/s" for kind in measured),
                    *(label for _, _, label in pairs),
                ],
                body,
            ),
            "",
            "CPU µs per item (worker processes and their server backends together, "
            "`bench/cpu.py`; on 2 cores the rate is bounded by 2,000,000 ÷ that, so it says "
            "why a variant is ahead even under load):",
            "",
            *table(["workers", "batch", *(VARIANTS[kind] for kind in measured)], cpu_rows),
            "",
            *(
                f"Target: {label}: {figure}, {'met' if ok else '**missed**'}."
                for label, figure, ok in checks
            ),
        ]
    )
