"""Worker functions for the multi-process tests (importable by ``spawn`` children).

Each worker opens its own ``AtomicStore``, makes one cheap call so that its
connection is open, waits at the barrier so every process starts the
contended part together, then runs its loop and returns plain data for the
parent to check.
"""

from __future__ import annotations

import os
import time
from typing import Any

from airflow_atomic_store import AtomicStore
from tests.support.specs import PENDING


def _open(url: str, table: str) -> AtomicStore:
    store = AtomicStore(url)
    store.get(table, "__warm-up__")
    return store


def drain_queue(barrier: Any, url: str, table: str, limit: int) -> list[str]:
    """Claim pending rows until none is left; return the keys this process won, in order."""
    execution_id = f"drainer-{os.getpid()}"
    with _open(url, table) as store:
        barrier.wait(timeout=60)
        won: list[str] = []
        while True:
            result = store.atomic_claim(
                table, where=PENDING, limit=limit, execution_id=execution_id
            )
            for row in result["claimed"]:
                if row["value"].get("claimedBy") != execution_id:
                    raise AssertionError(f"row {row['key']} came back claimed by someone else")
                won.append(row["key"])
            if result["count"] == 0:
                # Empty can also mean "the rest is locked by other claimers": stop
                # only when no pending row is left at all.
                if not store.query(table, where=PENDING, limit=1):
                    return won
                time.sleep(0.001)


def increment_counter(barrier: Any, url: str, table: str, key: str, times: int) -> list[int]:
    """Increment ``n`` ``times``; return the value of ``n`` each increment produced."""
    mutations = [{"field": "n", "operation": "increment", "value": 1}]
    with _open(url, table) as store:
        barrier.wait(timeout=60)
        seen = []
        for _ in range(times):
            result = store.atomic_update(table, key, mutations=mutations)
            if not result["updated"]:
                raise AssertionError(f"an unguarded increment did not apply: {result}")
            seen.append(result["value"]["n"])
        return seen


def take_tokens(barrier: Any, url: str, table: str, key: str, attempts: int) -> list[int]:
    """Try a guarded decrement ``attempts`` times; return the token counts of the wins."""
    guard = [{"field": "tokens", "operator": "gt", "value": 0}]
    mutations = [{"field": "tokens", "operation": "increment", "value": -1}]
    with _open(url, table) as store:
        barrier.wait(timeout=60)
        left_after_win = []
        for _ in range(attempts):
            result = store.atomic_update(table, key, where=guard, mutations=mutations)
            if result["updated"]:
                left_after_win.append(result["value"]["tokens"])
            elif result["value"] is not None:
                raise AssertionError(f"a failed guard returned a value: {result}")
        return left_after_win


def seed_once(
    barrier: Any, url: str, table: str, key: str, me: int, warm_up: bool = True
) -> dict[str, Any]:
    """Seed-if-missing upsert of ``key`` with this worker's number; return the result.

    With ``warm_up=False`` the upsert is the store's very first operation, so
    a fresh store sees every process try to create its physical table at once.
    """
    with _open(url, table) if warm_up else AtomicStore(url) as store:
        barrier.wait(timeout=60)
        return store.atomic_upsert(table, key, insert_value={"owner": me})
