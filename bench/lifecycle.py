"""Lifecycle workers (issues 33 and 42): each item enqueued, claimed, finished and retired.

Every worker has the same shape — ``enqueue(n)`` adds ``n`` items (one call each,
as a producer hands items in one by one, or one call for all of them: the bulk
workers, ``enqueue_step`` 100), ``consume()`` takes one batch through the rest of
its life and returns the ids it retired, ``any_left()`` tells "others hold the
rest" from "drained" — so one loop (:func:`cycle`) times them all alike:

- ``store_archive``: ``put``; ``atomic_claim`` (mark: ``in_flight``, ``claimedBy``);
  ``atomic_update_many`` over the batch's keys, guarded on ``claimedBy = me``, setting
  ``done`` and ``finishedAt`` and moving the rows to an archive table in the same
  statement (pgmq's ``archive``);
- ``store_retire``: the same, but the batch is finished in place and ``retire``d into
  the archive table afterwards (every finished row at once, its default limit): what a
  queue paid before the finish could archive;
- ``store_delete``: ``put``; ``atomic_claim(mode="delete")``: claimed and retired in
  one statement (at most once, as read+delete is at its ``delete``);
- ``store_bulk``: ``atomic_upsert_many`` of 100 items per call, then as ``store_archive``;
- ``pgmq_archive`` / ``pgmq_delete`` / ``pgmq_bulk``: pgmq's own functions
  (:mod:`bench.pgmq_real`): ``send`` (``send_batch`` of 100), ``read``, ``archive`` or
  ``delete`` by ids;
- ``shaped_archive`` / ``shaped_delete``: the hand-written pgmq-shaped statements
  (:mod:`bench.readdelete_queue`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

import psycopg

from airflow_atomic_store import AtomicStore, timestamps
from bench import cpu, pgmq_real
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
    #: the store's ``notify`` option (None: its default, ``"writes"``)
    notify: str | None = None

    def __init__(self, url: str, batch: int) -> None:
        self.store = AtomicStore(url, notify=self.notify)
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
    """Claim (mark), then finish the batch and move it to the archive table in one call."""

    def consume(self) -> list[str]:
        claimed = self.store.atomic_claim(
            TABLE, where=PENDING, limit=self.batch, execution_id=self.me
        )["claimed"]
        if not claimed:
            return []
        keys = [row["key"] for row in claimed]
        self.store.atomic_update_many(
            TABLE, keys, where=self.mine, mutations=self.finished(), archive_table=ARCHIVE
        )
        return keys

    @property
    def mine(self) -> list[dict[str, Any]]:
        return [{"field": "claimedBy", "operator": "equals", "value": self.me}]

    def finished(self) -> list[dict[str, Any]]:
        return [
            {"field": "status", "operation": "set", "value": "done"},
            {"field": "finishedAt", "operation": "set", "value": timestamps.now()},
        ]


class StoreRetireWorker(StoreArchiveWorker):
    """Claim (mark), finish the batch in place, ``retire`` finished rows into the archive."""

    def consume(self) -> list[str]:
        claimed = self.store.atomic_claim(
            TABLE, where=PENDING, limit=self.batch, execution_id=self.me
        )["claimed"]
        if not claimed:
            return []
        keys = [row["key"] for row in claimed]
        self.store.atomic_update_many(TABLE, keys, where=self.mine, mutations=self.finished())
        # retire's default limit (500): a full batch would cost a second, empty statement
        # (retire goes on until a batch comes back short), and this one takes every
        # finished row, the other workers' too.
        self.store.retire(TABLE, older_than=0, archive_table=ARCHIVE)
        return keys


class StoreBulkWorker(StoreArchiveWorker):
    """``atomic_upsert_many`` of 100 items per call; claim; finish and archive per batch."""

    enqueue_step = 100

    def enqueue(self, count: int) -> None:
        items = []
        for _ in range(count):
            self.sent += 1
            items.append((f"{self.me}-{self.sent:07d}", {"status": "pending", "n": 1}))
        self.store.atomic_upsert_many(TABLE, items)


class StoreDeleteWorker(_StoreWorker):
    """One delete-claim: the batch is claimed and gone in one statement."""

    def consume(self) -> list[str]:
        result = self.store.atomic_claim(TABLE, where=PENDING, limit=self.batch, mode="delete")
        return [row["key"] for row in result["claimed"]]


class _SendReadArchive:
    """``send`` → ``read`` → ``archive`` over a queue class that has those three calls:
    the pgmq-shaped SQL and pgmq's own functions run the same lifecycle."""

    if TYPE_CHECKING:  # what the queue class beside it in the bases provides

        def send(self, message: dict[str, Any]) -> int: ...
        def read(self, batch: int) -> list[int]: ...
        def archive(self, ids: list[int]) -> list[int]: ...

    def __init__(self, url: str, batch: int) -> None:
        super().__init__(url)  # type: ignore[call-arg]
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


class ShapedArchiveWorker(_SendReadArchive, PgmqShaped):
    """pgmq-shaped ``send`` → ``read`` → ``archive``."""


class ShapedDeleteWorker(ShapedArchiveWorker):
    """pgmq-shaped ``send`` → ``read`` → ``delete``."""

    def finish(self, ids: list[int]) -> None:
        self.delete(ids)


class PgmqArchiveWorker(_SendReadArchive, pgmq_real.Pgmq):
    """pgmq's ``send`` → ``read`` → ``archive``."""


class PgmqDeleteWorker(PgmqArchiveWorker):
    """pgmq's ``send`` → ``read`` → ``delete``."""

    def finish(self, ids: list[int]) -> None:
        self.delete(ids)


class PgmqBulkWorker(PgmqArchiveWorker):
    """pgmq's ``send_batch`` of 100 → ``read`` → ``archive``."""

    enqueue_step = 100

    def enqueue(self, count: int) -> None:
        self.send_batch([{"n": 1}] * count)


class QuietStoreArchiveWorker(StoreArchiveWorker):
    """``store_archive`` with ``notify="off"``: what the writes' notifications cost."""

    notify = "off"


class QuietStoreDeleteWorker(StoreDeleteWorker):
    """``store_delete`` with ``notify="off"``."""

    notify = "off"


WORKERS: dict[str, Any] = {
    "store_archive": StoreArchiveWorker,
    "store_retire": StoreRetireWorker,
    "store_delete": StoreDeleteWorker,
    "store_bulk": StoreBulkWorker,
    "pgmq_archive": PgmqArchiveWorker,
    "pgmq_delete": PgmqDeleteWorker,
    "pgmq_bulk": PgmqBulkWorker,
    "shaped_archive": ShapedArchiveWorker,
    "shaped_delete": ShapedDeleteWorker,
    # not in the scenario's variants: ``python -m bench.notify_lifecycle`` compares them
    "store_archive_quiet": QuietStoreArchiveWorker,
    "store_delete_quiet": QuietStoreDeleteWorker,
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
        # A bulk worker enqueues 100 per call, every 100 / batch consume steps: the same
        # items per step as the others, in fewer calls.
        step_size = getattr(worker, "enqueue_step", batch)
        every = max(1, step_size // batch)
        while True:
            if sent < items and calls % every == 0:
                step = min(step_size, items - sent)
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


def reset(store_url: str, queue_url: str, pgmq_url: str | None = None) -> None:
    """Empty the store's two tables, the pgmq-shaped ones and pgmq's queue; vacuum them."""
    with psycopg.connect(store_url, autocommit=True) as conn:
        for table in (TABLE, ARCHIVE):
            conn.execute(
                "DELETE FROM atomic_store_rows WHERE table_id = %s", (pg_table_id(conn, table),)
            )
        conn.execute("VACUUM ANALYZE atomic_store_rows")
    from bench import readdelete_queue

    readdelete_queue.create(queue_url)
    if pgmq_url is not None:
        pgmq_real.create(pgmq_url)


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
