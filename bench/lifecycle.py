"""Lifecycle workers (issue 33): each item enqueued, claimed, completed and retired.

Every worker has the same shape — ``enqueue(n)`` adds ``n`` items one call
each (a producer hands items in one by one), ``consume()`` takes one batch
through the rest of its life and returns the ids it retired, ``any_left()``
tells "others hold the rest" from "drained" — so one loop (:func:`cycle`)
times them all alike:

- ``store_archive``: ``put``; ``atomic_claim`` (mark: ``in_flight``,
  ``claimedBy``); complete the batch in one guarded statement (a claim over
  ``status = in_flight AND claimedBy = me`` that sets ``done`` and
  ``finishedAt``); ``retire`` into an archive table (pgmq's ``archive``), every
  finished row at once (its default limit);
- ``store_delete``: ``put``; ``atomic_claim(mode="delete")``: claimed and retired
  in one statement (at most once, as read+delete is at its ``delete``);
- ``pgmq_archive`` / ``pgmq_delete``: pgmq-shaped ``send``; ``read``;
  ``archive`` or ``delete`` by ids (:mod:`bench.readdelete_queue`).
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import psycopg

from airflow_atomic_store import AtomicStore, timestamps
from bench import cpu
from bench.handwritten import pg_table_id
from bench.readdelete_queue import PgmqShaped
from bench.timing import now

TABLE = "lifecycle"
ARCHIVE = "lifecycle_archive"
PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]


class Worker(Protocol):
    def enqueue(self, count: int) -> None: ...

    def consume(self) -> list[str]: ...

    def any_left(self) -> bool: ...

    def close(self) -> None: ...


class _StoreWorker:
    def __init__(self, url: str, batch: int) -> None:
        self.store = AtomicStore(url)
        self.store.get(TABLE, "__warm-up__")  # connects: its backend is metered from the start
        self.batch, self.me, self.sent = batch, f"life-{os.getpid()}", 0

    def enqueue(self, count: int) -> None:
        for _ in range(count):
            self.sent += 1
            self.store.put(TABLE, f"{self.me}-{self.sent:07d}", {"status": "pending", "n": 1})

    def any_left(self) -> bool:
        return bool(self.store.query(TABLE, limit=1))

    def close(self) -> None:
        self.store.close()


class StoreArchiveWorker(_StoreWorker):
    """Claim (mark), complete the batch, retire it into the archive table."""

    def consume(self) -> list[str]:
        claimed = self.store.atomic_claim(
            TABLE, where=PENDING, limit=self.batch, execution_id=self.me
        )["claimed"]
        if not claimed:
            return []
        self.store.atomic_claim(
            TABLE,
            where=[
                {"field": "status", "operator": "equals", "value": "in_flight"},
                {"field": "claimedBy", "operator": "equals", "value": self.me},
            ],
            mutations=[
                {"field": "status", "operation": "set", "value": "done"},
                {"field": "finishedAt", "operation": "set", "value": timestamps.now()},
            ],
            limit=self.batch,
        )
        # retire's default limit (500): a full batch would cost a second, empty statement
        # (retire goes on until a batch comes back short), and this one takes every
        # finished row, the other workers' too.
        self.store.retire(TABLE, older_than=0, archive_table=ARCHIVE)
        return [row["key"] for row in claimed]


class StoreDeleteWorker(_StoreWorker):
    """One delete-claim: the batch is claimed and gone in one statement."""

    def consume(self) -> list[str]:
        result = self.store.atomic_claim(TABLE, where=PENDING, limit=self.batch, mode="delete")
        return [row["key"] for row in result["claimed"]]


class PgmqArchiveWorker(PgmqShaped):
    """pgmq-shaped ``send`` → ``read`` → ``archive``."""

    def __init__(self, url: str, batch: int) -> None:
        super().__init__(url)
        self.batch = batch

    def enqueue(self, count: int) -> None:
        for _ in range(count):
            self.send({"n": 1})

    def finish(self, ids: list[int]) -> None:
        self.archive(ids)

    def consume(self) -> list[str]:
        ids = self.read(self.batch)
        if ids:
            self.finish(ids)
        return [str(msg_id) for msg_id in ids]


class PgmqDeleteWorker(PgmqArchiveWorker):
    """pgmq-shaped ``send`` → ``read`` → ``delete``."""

    def finish(self, ids: list[int]) -> None:
        self.delete(ids)


WORKERS: dict[str, Any] = {
    "store_archive": StoreArchiveWorker,
    "store_delete": StoreDeleteWorker,
    "pgmq_archive": PgmqArchiveWorker,
    "pgmq_delete": PgmqDeleteWorker,
}


def cycle(
    barrier: Any, kind: str, url: str, batch: int, items: int, cap_seconds: float
) -> dict[str, Any]:
    """Enqueue a batch, consume a batch, until ``items`` are in; then consume what is left.

    Returns what :func:`bench.drainers.timed_processes` reads: stamps, the ids
    this worker retired, calls (consume steps) and CPU.
    """
    tag = f"bench-life-{os.getpid()}"
    worker: Worker = WORKERS[kind](cpu.tagged_url(url, tag), batch)
    try:
        meter = cpu.CpuMeter(cpu.backend_pids(url, tag))
        barrier.wait(timeout=120)
        meter.start()
        start = now()
        stop_at, keys, calls, sent, capped = start + cap_seconds, [], 0, 0, False
        while True:
            if sent < items:
                step = min(batch, items - sent)
                worker.enqueue(step)
                sent += step
            won = worker.consume()
            calls += 1
            keys.extend(won)
            if not won and sent >= items and not worker.any_left():
                break
            if now() > stop_at:
                capped = True
                break
        return {
            "start": start,
            "end": now(),
            "keys": keys,
            "calls": calls,
            "capped": capped,
            **meter.stop(),
        }
    finally:
        worker.close()


def reset(store_url: str, queue_url: str) -> None:
    """Empty the store's two tables and pgmq-shaped ones; vacuum both, as between rounds."""
    with psycopg.connect(store_url, autocommit=True) as conn:
        for table in (TABLE, ARCHIVE):
            conn.execute(
                "DELETE FROM atomic_store_rows WHERE table_id = %s", (pg_table_id(conn, table),)
            )
        conn.execute("VACUUM ANALYZE atomic_store_rows")
    from bench import readdelete_queue

    readdelete_queue.create(queue_url)


def left_over(store_url: str) -> tuple[int, int]:
    """Rows left in the store's queue table, and rows in its archive table."""
    with psycopg.connect(store_url, autocommit=True) as conn:
        counts = [
            conn.execute(
                "SELECT count(*) FROM atomic_store_rows WHERE table_id = %s",
                (pg_table_id(conn, table),),
            ).fetchone()
            for table in (TABLE, ARCHIVE)
        ]
    return int(counts[0][0]), int(counts[1][0])  # type: ignore[index]
