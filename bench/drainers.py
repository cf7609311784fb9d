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
from bench.handwritten import HandwrittenPostgres
from bench.loading import PENDING_WHERE, QUEUE
from bench.readdelete_queue import ReadDeleteClaimer
from bench.timing import now

_ANY_PENDING = (
    "SELECT EXISTS (SELECT 1 FROM atomic_store_rows AS r "
    "WHERE r.table_name = %s AND (r.value -> 'status') = %s::jsonb)"
)


class Claimer(Protocol):
    def claim(self) -> list[str]: ...

    def any_left(self) -> bool: ...

    def close(self) -> None: ...


class _PendingCheck:
    def __init__(self, url: str) -> None:
        self.check = psycopg.connect(url, autocommit=True)

    def any_left(self) -> bool:
        return bool(self.check.execute(_ANY_PENDING, (QUEUE, Jsonb("pending"))).fetchone()[0])  # type: ignore[index]

    def close(self) -> None:
        self.check.close()


class StoreClaimer(_PendingCheck):
    """``AtomicStore.atomic_claim`` with its default mutations, as a DAG would call it."""

    def __init__(self, url: str, batch: int) -> None:
        super().__init__(url)
        self.store = AtomicStore(url)
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


class SqlClaimer(_PendingCheck):
    """The same claim statement written by hand (see :mod:`bench.handwritten`)."""

    def __init__(self, url: str, batch: int) -> None:
        super().__init__(url)
        self.sql = HandwrittenPostgres(url)
        self.batch, self.me = batch, f"bench-{os.getpid()}"

    def claim(self) -> list[str]:
        return [key for key, _ in self.sql.claim(QUEUE, self.batch, self.me)]

    def close(self) -> None:
        self.sql.close()
        super().close()


_NAIVE_SELECT = (
    "SELECT key FROM atomic_store_rows WHERE table_name = %s "
    "AND (value -> 'status') = %s::jsonb ORDER BY created_at, key LIMIT %s"
)
_NAIVE_UPDATE = (
    "UPDATE atomic_store_rows SET value = value || jsonb_build_object("
    "'status', 'in_flight', 'claimedBy', %s::text) "
    "WHERE table_name = %s AND key = ANY(%s) RETURNING key"
)


class NaiveClaimer:
    """Select pending rows, then mark them: two statements, so two workers can win one row."""

    def __init__(self, url: str, batch: int) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.batch, self.me = batch, f"naive-{os.getpid()}"
        self.empty = False

    def claim(self) -> list[str]:
        keys = [
            row[0]
            for row in self.conn.execute(
                _NAIVE_SELECT, (QUEUE, Jsonb("pending"), self.batch)
            ).fetchall()
        ]
        if not keys:
            self.empty = True
            return []
        return [row[0] for row in self.conn.execute(_NAIVE_UPDATE, (self.me, QUEUE, keys))]

    def any_left(self) -> bool:
        return not self.empty

    def close(self) -> None:
        self.conn.close()


CLAIMERS: dict[str, Any] = {
    "store": StoreClaimer,
    "sql": SqlClaimer,
    "naive": NaiveClaimer,
    "readdelete": ReadDeleteClaimer,
}


def drain(barrier: Any, kind: str, url: str, batch: int, cap_seconds: float) -> dict[str, Any]:
    """Claim until the queue is drained or ``cap_seconds`` pass; return stamps and keys won."""
    claimer: Claimer = CLAIMERS[kind](url, batch)
    try:
        barrier.wait(timeout=120)
        start = now()
        stop_at = start + cap_seconds
        keys: list[str] = []
        calls = 0
        capped = False
        while True:
            won = claimer.claim()
            calls += 1
            if won:
                keys.extend(won)
            elif not claimer.any_left():
                break
            if now() > stop_at:
                capped = True
                break
        return {"start": start, "end": now(), "keys": keys, "calls": calls, "capped": capped}
    finally:
        claimer.close()
