"""Where a lifecycle item's CPU goes, step by step: ``python -m bench.lifecycle_profile``.

The lifecycle scenario (:mod:`bench.scenarios.lifecycle`) gives the CPU one item
costs in all; this splits it by step, in one process at batch 10, so the report
can say which step makes the difference: the store's ``put`` (and
``atomic_upsert_many`` of 100), claim, finish+archive (``atomic_update_many`` with
an archive table), and delete-claim against pgmq's own ``send`` (``send_batch``),
``read``, ``archive`` and ``read`` + ``delete`` (:mod:`bench.pgmq_real`).

``--put`` splits the put path instead (issue 42: what ``put`` pays over ``send``):
the same item written by pgmq's ``send``, by a hand-written ``INSERT`` into pgmq's
table, by hand-written ``INSERT``s into the store's layout (with and without its
``created_at`` index), by ``put`` with notifications off and on (the default), and
by the seed ``atomic_upsert`` with and without an idempotency key.

Each step is metered on its own (client ``process_time`` and the server backend's CPU
from ``/proc``, as :mod:`bench.cpu` does); medians over three rounds on fresh tables.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from airflow_atomic_store import AtomicStore, timestamps
from bench import cpu, lifecycle, loading, pgmq_real
from bench.environment import BenchEnvironment
from bench.handwritten import pg_table_id

BATCH = 10
ROUNDS = 3
BATCHES = 200
MINE = "profile"


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


def _finished() -> list[dict[str, Any]]:
    return [
        {"field": "status", "operation": "set", "value": "done"},
        {"field": "finishedAt", "operation": "set", "value": timestamps.now()},
    ]


def _lifecycle_round(urls: dict[str, str], number: int) -> dict[str, tuple[float, float]]:
    lifecycle.reset(urls["store"], urls["queue"], urls["pgmq"])
    tags = {side: f"bench-profile-{side}-{number}" for side in urls}
    store = AtomicStore(cpu.tagged_url(urls["store"], tags["store"]))
    store.get(lifecycle.TABLE, "__warm-up__")
    queue = pgmq_real.Pgmq(cpu.tagged_url(urls["pgmq"], tags["pgmq"]))
    ms = cpu.CpuMeter(cpu.backend_pids(urls["store"], tags["store"]))
    mq = cpu.CpuMeter(cpu.backend_pids(urls["pgmq"], tags["pgmq"]))
    steps, sent = _Steps(), 0
    mine = [{"field": "claimedBy", "operator": "equals", "value": MINE}]
    table, archive, pending = lifecycle.TABLE, lifecycle.ARCHIVE, lifecycle.PENDING

    def put_each() -> None:
        for n in range(sent, sent + BATCH):
            store.put(table, f"item-{n:07d}", {"status": "pending", "n": 1})

    def upsert_many() -> None:
        store.atomic_upsert_many(
            table,
            [(f"item-{n:07d}", {"status": "pending", "n": 1}) for n in range(sent, sent + 100)],
        )

    def claim() -> list[str]:
        claimed = store.atomic_claim(table, where=pending, limit=BATCH, execution_id=MINE)
        return [row["key"] for row in claimed["claimed"]]

    def finish(keys: list[str]) -> Any:
        return store.atomic_update_many(
            table, keys, where=mine, mutations=_finished(), archive_table=archive
        )

    try:
        for _ in range(BATCHES):
            steps.run("store put x10", ms, put_each)
            sent += BATCH
            keys = steps.run("store claim", ms, claim)
            steps.run("store finish+archive", ms, partial(finish, keys))
            steps.run("pgmq send x10", mq, lambda: [queue.send({"n": 1}) for _ in range(BATCH)])
            ids = steps.run("pgmq read", mq, lambda: queue.read(BATCH))
            steps.run("pgmq archive", mq, partial(queue.archive, ids))
        for _ in range(BATCHES // 10):  # the bulk lifecycle: 100 per call, claims of 10
            steps.run("store upsert_many(100) ÷10", ms, upsert_many)
            sent += 100
            steps.run("pgmq send_batch(100) ÷10", mq, lambda: queue.send_batch([{"n": 1}] * 100))
            for _ in range(10):
                keys = steps.run("store claim (backlog of 100)", ms, claim)
                steps.run("store finish+archive (after bulk)", ms, partial(finish, keys))
                ids = steps.run("pgmq read (backlog of 100)", mq, partial(queue.read, BATCH))
                steps.run("pgmq archive (after bulk)", mq, partial(queue.archive, ids))
        for _ in range(BATCHES):
            put_each()
            sent += BATCH
            [queue.send({"n": 1}) for _ in range(BATCH)]
            steps.run(
                "store delete-claim",
                ms,
                lambda: store.atomic_claim(table, where=pending, limit=BATCH, mode="delete"),
            )
            ids = steps.run("pgmq read (then delete)", mq, lambda: queue.read(BATCH))
            steps.run("pgmq delete", mq, partial(queue.delete, ids))
    finally:
        store.close()
        queue.close()
    per_item = BATCHES * BATCH
    return {name: (c / per_item * 1e6, s / per_item * 1e6) for name, (c, s) in steps.spent.items()}


_PGMQ_INSERT = (
    "INSERT INTO pgmq.q_bench (vt, message) VALUES (clock_timestamp(), %s) RETURNING msg_id"
)
_STORE_INSERT = (
    "INSERT INTO {table} (table_id, key, value) VALUES (%s, %s, %s) "
    "ON CONFLICT (table_id, key) DO UPDATE SET value = EXCLUDED.value, "
    "record_timestamp = clock_timestamp()"
)
_BARE = "put_probe"
_BARE_DDL = (
    f"DROP TABLE IF EXISTS {_BARE}; CREATE TABLE {_BARE} (table_id integer NOT NULL, "
    'key text COLLATE "C" NOT NULL, value jsonb NOT NULL, '
    "created_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
    "record_timestamp timestamptz NOT NULL DEFAULT clock_timestamp(), "
    "PRIMARY KEY (table_id, key))"
)


def _put_round(urls: dict[str, str], number: int) -> dict[str, tuple[float, float]]:
    """One item written each way, BATCHES x BATCH times; CPU per item."""
    lifecycle.reset(urls["store"], urls["queue"], urls["pgmq"])
    tags = {side: f"bench-put-{side}-{number}" for side in ("store", "quiet", "raw", "pgmq")}
    store = AtomicStore(cpu.tagged_url(urls["store"], tags["store"]))
    quiet = AtomicStore(cpu.tagged_url(urls["store"], tags["quiet"]), notify="off")
    for each in (store, quiet):
        each.put(lifecycle.TABLE, "__warm-up__", {})
    raw = psycopg.connect(cpu.tagged_url(urls["store"], tags["raw"]), autocommit=True)
    raw.execute(_BARE_DDL)
    table_id = pg_table_id(raw, lifecycle.TABLE)
    queue = pgmq_real.Pgmq(cpu.tagged_url(urls["pgmq"], tags["pgmq"]))
    meters = {
        side: cpu.CpuMeter(cpu.backend_pids(urls["pgmq" if side == "pgmq" else "store"], tag))
        for side, tag in tags.items()
    }
    steps, value = _Steps(), {"status": "pending", "n": 1}
    items = BATCHES * BATCH
    store_insert = _STORE_INSERT.format(table="atomic_store_rows")
    bare_insert = _STORE_INSERT.format(table=_BARE)
    ways: list[tuple[str, str, Callable[[int], Any]]] = [
        ("pgmq send", "pgmq", lambda n: queue.send(value)),
        ("INSERT into pgmq's table", "pgmq", lambda n: queue.conn.execute(_PGMQ_INSERT, (Jsonb(value),))),
        ("INSERT, store layout, PK only", "raw", lambda n: raw.execute(bare_insert, (table_id, f"b-{n}", Jsonb(value)))),
        ("INSERT, store layout, both indexes", "raw", lambda n: raw.execute(store_insert, (table_id, f"r-{n}", Jsonb(value)))),
        ("store put, notify off", "quiet", lambda n: quiet.put(lifecycle.TABLE, f"q-{n}", value)),
        ("store put (default: notifies)", "store", lambda n: store.put(lifecycle.TABLE, f"p-{n}", value)),
        ("store atomic_upsert (seed)", "store", lambda n: store.atomic_upsert(lifecycle.TABLE, f"u-{n}", insert_value=value)),
        ("store atomic_upsert (seed, keyed)", "store", lambda n: store.atomic_upsert(lifecycle.TABLE, f"k-{n}", insert_value=value, idempotency_key=f"k-{number}-{n}")),
    ]  # fmt: skip
    try:
        for start in range(0, items, BATCH):
            for name, side, write in ways:
                steps.run(name, meters[side], partial(_each, write, start))
    finally:
        for each in (store, quiet):
            each.close()
        raw.execute(f"DROP TABLE {_BARE}")
        raw.close()
        queue.close()
    return {name: (c / items * 1e6, s / items * 1e6) for name, (c, s) in steps.spent.items()}


def _each(write: Callable[[int], Any], start: int) -> None:
    for n in range(start, start + BATCH):
        write(n)


def main() -> None:
    put_path = "--put" in sys.argv[1:]
    with BenchEnvironment() as env:
        urls = {
            "store": env.postgres_url(),
            "queue": env.postgres_url("readdelete"),
            "pgmq": env.postgres_url("pgmq"),
        }
        loading.create_schema(urls["store"])
        pgmq_real.install(urls["pgmq"])
        measure = _put_round if put_path else _lifecycle_round
        rounds = [measure(urls, number) for number in range(ROUNDS)]
    print(f"CPU µs per item, batch {BATCH}, median of {ROUNDS} rounds:")
    print(f"{'step':38s} {'client':>8s} {'server':>8s} {'total':>8s}")
    for name in rounds[0]:
        client = statistics.median(r[name][0] for r in rounds)
        server = statistics.median(r[name][1] for r in rounds)
        print(f"{name:38s} {client:8.1f} {server:8.1f} {client + server:8.1f}")


if __name__ == "__main__":
    main()
