"""Where a lifecycle item's CPU goes, step by step: ``python -m bench.lifecycle_profile``.

The lifecycle scenario (:mod:`bench.scenarios.lifecycle`) gives the CPU one item
costs in all; this splits it by step, in one process at batch 10, so the report
can say which step makes the difference: the store's ``put``, claim, complete
and ``retire`` against pgmq-shaped ``send``, ``read`` and ``archive``, and the
delete-claim against ``read`` + ``delete``. Each step is metered on its own
(client ``process_time`` and the server backend's CPU from ``/proc``, as
:mod:`bench.cpu` does); medians over three rounds on fresh tables.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from functools import partial
from typing import Any

from airflow_atomic_store import timestamps
from bench import cpu, lifecycle, loading
from bench.environment import BenchEnvironment

BATCH = 10
ROUNDS = 3
BATCHES = 200


class _Steps:
    """Sums each named step's CPU (client, server) over the calls metered."""

    def __init__(self) -> None:
        self.spent: dict[str, list[float]] = {}

    def run(self, name: str, meter: cpu.CpuMeter, call: Callable[[], Any]) -> Any:
        meter.start()
        result = call()
        used = meter.stop()
        total = self.spent.setdefault(name, [0.0, 0.0])
        total[0] += used["client_cpu"]
        total[1] += used["server_cpu"] or 0.0
        return result


def _complete(worker: lifecycle.StoreArchiveWorker) -> Any:
    return worker.store.atomic_claim(
        lifecycle.TABLE,
        where=[
            {"field": "status", "operator": "equals", "value": "in_flight"},
            {"field": "claimedBy", "operator": "equals", "value": worker.me},
        ],
        mutations=[
            {"field": "status", "operation": "set", "value": "done"},
            {"field": "finishedAt", "operation": "set", "value": timestamps.now()},
        ],
        limit=BATCH,
    )


def _round(urls: dict[str, str], number: int) -> dict[str, tuple[float, float]]:
    lifecycle.reset(urls["store"], urls["queue"])
    tags = {side: f"bench-profile-{side}-{number}" for side in urls}
    store = lifecycle.StoreArchiveWorker(cpu.tagged_url(urls["store"], tags["store"]), BATCH)
    queue = lifecycle.PgmqArchiveWorker(cpu.tagged_url(urls["queue"], tags["queue"]), BATCH)
    ms = cpu.CpuMeter(cpu.backend_pids(urls["store"], tags["store"]))
    mq = cpu.CpuMeter(cpu.backend_pids(urls["queue"], tags["queue"]))
    steps = _Steps()
    try:
        for _ in range(BATCHES):
            steps.run("store put", ms, lambda: store.enqueue(BATCH))
            steps.run(
                "store claim",
                ms,
                lambda: store.store.atomic_claim(
                    lifecycle.TABLE, where=lifecycle.PENDING, limit=BATCH, execution_id=store.me
                ),
            )
            steps.run("store complete", ms, lambda: _complete(store))
            steps.run(
                "store retire (archive)",
                ms,
                lambda: store.store.retire(
                    lifecycle.TABLE, older_than=0, archive_table=lifecycle.ARCHIVE
                ),
            )
            steps.run("pgmq send", mq, lambda: queue.enqueue(BATCH))
            ids = steps.run("pgmq read", mq, lambda: queue.read(BATCH))
            steps.run("pgmq archive", mq, partial(queue.archive, ids))
        for _ in range(BATCHES):
            store.enqueue(BATCH)
            queue.enqueue(BATCH)
            steps.run(
                "store delete-claim",
                ms,
                lambda: store.store.atomic_claim(
                    lifecycle.TABLE, where=lifecycle.PENDING, limit=BATCH, mode="delete"
                ),
            )
            ids = steps.run("pgmq read (then delete)", mq, lambda: queue.read(BATCH))
            steps.run("pgmq delete", mq, partial(queue.delete, ids))
    finally:
        store.close()
        queue.close()
    items = BATCHES * BATCH
    return {name: (c / items * 1e6, s / items * 1e6) for name, (c, s) in steps.spent.items()}


def main() -> None:
    with BenchEnvironment() as env:
        urls = {"store": env.postgres_url(), "queue": env.postgres_url("readdelete")}
        loading.create_schema(urls["store"])
        rounds = [_round(urls, number) for number in range(ROUNDS)]
    print(f"CPU µs per item, batch {BATCH}, median of {ROUNDS} rounds:")
    print(f"{'step':26s} {'client':>8s} {'server':>8s} {'total':>8s}")
    for name in rounds[0]:
        client = statistics.median(r[name][0] for r in rounds)
        server = statistics.median(r[name][1] for r in rounds)
        print(f"{name:26s} {client:8.1f} {server:8.1f} {client + server:8.1f}")


if __name__ == "__main__":
    main()
