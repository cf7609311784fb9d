"""What the writes' notifications cost a queue's life: ``python -m bench.notify_lifecycle``.

The lifecycle scenario runs the store with its defaults, where ``put`` notifies its
table's channel (``notify="writes"``) and PostgreSQL serialises the commits of
notifying transactions; pgmq's ``send`` notifies nobody. This runs the store's
archive and delete lifecycles with notifications on and off beside pgmq's, at 4
workers and batch 10 (the targets' configuration), alternating in rotating order,
and prints the medians with the CPU per item.
"""

from __future__ import annotations

import statistics

from bench import loading, pgmq_real
from bench.environment import BenchEnvironment
from bench.scenarios.lifecycle import _one
from bench.sizes import FULL

KINDS = (
    "pgmq_archive",
    "store_archive",
    "store_archive_quiet",
    "pgmq_delete",
    "store_delete",
    "store_delete_quiet",
)
ROUNDS = 3
PROCESSES, BATCH = 4, 10


def main() -> None:
    results: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    with BenchEnvironment() as env:
        urls = {
            "store": env.postgres_url(),
            "queue": env.postgres_url("readdelete"),
            "pgmq": env.postgres_url("pgmq"),
        }
        loading.create_schema(urls["store"])
        pgmq_real.install(urls["pgmq"])
        for number in range(ROUNDS):
            order = KINDS[number:] + KINDS[:number]
            for kind in order:
                run = _one(kind, urls, PROCESSES, BATCH, FULL)
                cpu = run.get("client_us_per_row", 0.0) + run.get("server_us_per_row", 0.0)
                results[kind].append((run["rate"], cpu))
                print(
                    f"round {number + 1} {kind}: {run['rate']:,.0f} items/s, {cpu:.0f} CPU µs/item"
                )
    print(
        f"{PROCESSES} workers, batch {BATCH}, {FULL.lifecycle_items:,} items, medians of {ROUNDS}:"
    )
    for kind in KINDS:
        rate = statistics.median(r for r, _ in results[kind])
        cpu = statistics.median(c for _, c in results[kind])
        print(f"{kind:22s} {rate:8,.0f} items/s {cpu:6.0f} CPU µs/item")


if __name__ == "__main__":
    main()
