"""Claimer processes for the throughput scenario (importable by ``spawn`` children).

Every claimer has the same shape — ``claim()`` returns the keys it won,
``any_left()`` tells an empty batch caused by rows other claimers hold
(SKIP LOCKED) from a drained queue — so one :func:`drain` loop times them all
the same way: set up, wait at the barrier, claim until nothing is left or the
time cap passes.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import psycopg
from psycopg.types.json import Jsonb

from airflow_atomic_store import AtomicStore
from bench import cpu
from bench.handwritten import (
    SET_FILTER,
    TEXT_FILTER,
    HandwrittenPostgres,
    pg_filter,
    pg_table_id,
)
from bench.loading import PENDING_WHERE, QUEUE
from bench.readdelete_queue import PopClaimer, ReadDeleteClaimer
from bench.timing import now
from devkit.processes import run_in_processes

#: Literal filters, so a claimable set's index (or the hand-made one) answers the check.
_ANY_PENDING = "SELECT EXISTS (SELECT 1 FROM atomic_store_rows AS r WHERE {filter})"


class Claimer(Protocol):
    def claim(self) -> list[str]: ...

    def any_left(self) -> bool: ...

    def close(self) -> None: ...


class _PendingCheck:
    form = SET_FILTER

    def __init__(self, url: str) -> None:
        self.check = psycopg.connect(url, autocommit=True)
        table_id = pg_table_id(self.check, QUEUE)
        self.any_pending = _ANY_PENDING.format(filter=pg_filter(self.form, table_id)).encode()

    def any_left(self) -> bool:
        return bool(self.check.execute(self.any_pending).fetchone()[0])  # type: ignore[index]

    def close(self) -> None:
        self.check.close()


class StoreClaimer(_PendingCheck):
    """``AtomicStore.atomic_claim`` with its default mutations, as a DAG would call it."""

    notify = "writes"  # the default: claims do not pg_notify

    def __init__(self, url: str, batch: int) -> None:
        super().__init__(url)
        self.store = AtomicStore(url, notify=self.notify)
        self.store.get(QUEUE, "__warm-up__")
        self.batch, self.me = batch, f"bench-{os.getpid()}"

    def claim(self) -> list[str]:
        result = self.store.atomic_claim(
            QUEUE, where=PENDING_WHERE, limit=self.batch, execution_id=self.me
        )
        return [row["key"] for row in result["claimed"]]

    def close(self) -> None:
        self.store.close()
        super().close()


class DeleteStoreClaimer(StoreClaimer):
    """``atomic_claim(mode="delete")``: the claimed rows leave the table in the claim."""

    def claim(self) -> list[str]:
        result = self.store.atomic_claim(
            QUEUE, where=PENDING_WHERE, limit=self.batch, mode="delete"
        )
        return [row["key"] for row in result["claimed"]]


class UnassistedStoreClaimer(StoreClaimer):
    """The same store, on a queue whose set was declared over its loaded history
    (``loading.load_queue(claim_index=True)``); claims never build a set."""


class NotifyingStoreClaimer(StoreClaimer):
    """The store with ``notify="all"``: every claim that took rows also ``pg_notify``s."""

    notify = "all"


class SqlClaimer(_PendingCheck):
    """The same claim statement written by hand (see :mod:`bench.handwritten`)."""

    def __init__(self, url: str, batch: int) -> None:
        super().__init__(url)
        self.sql = HandwrittenPostgres(url)
        self.batch, self.me = batch, f"bench-{os.getpid()}"

    def claim(self) -> list[str]:
        return [key for key, _ in self.sql.claim(QUEUE, self.batch, self.me, self.form)]


class PartialIndexClaimer(SqlClaimer):
    """The hand-written claim whose filter the hand-made partial index proves."""

    form = TEXT_FILTER

    def close(self) -> None:
        self.sql.close()
        super().close()


_NAIVE_SELECT = (
    "SELECT key FROM atomic_store_rows WHERE table_id = %s "
    "AND (value -> 'status') = %s::jsonb ORDER BY created_at, key LIMIT %s"
)
_NAIVE_UPDATE = (
    "UPDATE atomic_store_rows SET value = value || jsonb_build_object("
    "'status', 'in_flight', 'claimedBy', %s::text) "
    "WHERE table_id = %s AND key = ANY(%s) RETURNING key"
)


class NaiveClaimer:
    """Select pending rows, then mark them: two statements, so two workers can win one row."""

    def __init__(self, url: str, batch: int) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.batch, self.me = batch, f"naive-{os.getpid()}"
        self.empty = False
        self.table_id = pg_table_id(self.conn, QUEUE)

    def claim(self) -> list[str]:
        keys = [
            row[0]
            for row in self.conn.execute(
                _NAIVE_SELECT, (self.table_id, Jsonb("pending"), self.batch)
            ).fetchall()
        ]
        if not keys:
            self.empty = True
            return []
        return [row[0] for row in self.conn.execute(_NAIVE_UPDATE, (self.me, self.table_id, keys))]

    def any_left(self) -> bool:
        return not self.empty

    def close(self) -> None:
        self.conn.close()


CLAIMERS: dict[str, Any] = {
    "store": StoreClaimer,
    "store_unassisted": UnassistedStoreClaimer,
    "store_notify_all": NotifyingStoreClaimer,
    "partial": PartialIndexClaimer,
    "sql": SqlClaimer,
    "naive": NaiveClaimer,
    "store_delete": DeleteStoreClaimer,
    "readdelete": ReadDeleteClaimer,
    "pop": PopClaimer,
}


def drain(barrier: Any, kind: str, url: str, batch: int, cap_seconds: float) -> dict[str, Any]:
    """Claim until the queue is drained or ``cap_seconds`` pass; return stamps and keys won.

    Also the CPU this process and its server backends spent in the loop
    (:mod:`bench.cpu`; the backend of the "anything left?" check included).
    """
    tag = f"bench-drain-{os.getpid()}"
    claimer: Claimer = CLAIMERS[kind](cpu.tagged_url(url, tag), batch)
    try:
        meter = cpu.CpuMeter(cpu.backend_pids(url, tag))
        barrier.wait(timeout=120)
        meter.start()
        start = now()
        stop_at = start + cap_seconds
        keys: list[str] = []
        calls = 0
        capped = False
        first = 0.0
        while True:
            won = claimer.claim()
            calls += 1
            if calls == 1:
                first = now() - start
            if won:
                keys.extend(won)
            elif not claimer.any_left():
                break
            if now() > stop_at:
                capped = True
                break
        end = now()
        return {
            "start": start,
            "end": end,
            "keys": keys,
            "calls": calls,
            "capped": capped,
            "first": first,
            **meter.stop(),
        }
    finally:
        claimer.close()


def run_drain(kind: str, url: str, batch: int, processes: int, cap: float) -> dict[str, Any]:
    """One :func:`drain` by ``processes`` claimer processes; see :func:`timed_processes`."""
    return timed_processes(drain, (kind, url, batch, cap), processes, cap)


def timed_processes(
    target: Any, args: tuple[Any, ...], processes: int, cap: float
) -> dict[str, Any]:
    """Run a drain loop in ``processes`` processes: rows/s over the wall time, double claims.

    ``first_ms`` is the slowest first claim (on the default path, the one that
    declares a claimable set); ``per_process`` the rows each claimer won;
    ``client_us_per_row``/``server_us_per_row`` the CPU a row cost (when measured).
    """
    results = run_in_processes(target, [args] * processes, timeout=cap + 300)
    keys = [key for result in results for key in result["keys"]]
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "claimed": len(keys),
        "duplicates": len(keys) - len(set(keys)),
        "seconds": wall,
        "rate": len(keys) / wall if wall > 0 else 0.0,
        "calls": sum(r["calls"] for r in results),
        "capped": any(r["capped"] for r in results),
        "first_ms": max(r.get("first", 0.0) for r in results) * 1000,
        "per_process": [len(r["keys"]) for r in results],
        **cpu.per_row(results, len(keys)),
    }
