"""Workers for the bulk verbs' multi-process races (importable by ``spawn`` children).

Each opens its own store (its own connection), waits at the barrier, then makes its
calls; it returns plain data for the parent to check.
"""

from __future__ import annotations

import os
import random
from typing import Any

from airflow_atomic_store import AtomicStore


def enqueue_overlapping(
    barrier: Any, url: str, table: str, keys: list[str], batch: int, seed: int
) -> list[str]:
    """Upsert-many ``keys`` (shuffled, in calls of ``batch``); return ``<who>:<key>`` for
    each key it inserted (``who`` is what it wrote as the row's ``by``)."""
    order = list(keys)
    random.Random(seed).shuffle(order)  # every process meets the others' keys in its own order
    me = f"producer-{os.getpid()}"
    with AtomicStore(url) as store:
        store.get(table, "__warm-up__")
        barrier.wait(timeout=60)
        inserted: list[str] = []
        for start in range(0, len(order), batch):
            chunk = order[start : start + batch]
            result = store.atomic_upsert_many(
                table, [{"key": key, "insert_value": {"by": me}} for key in chunk]
            )
            inserted.extend(item["key"] for item in result["items"] if item["inserted"])
        return [f"{me}:{key}" for key in inserted]


def finish_all_pending(barrier: Any, url: str, table: str, keys: list[str], seed: int) -> list[str]:
    """Update-many every key guarded on ``status = pending``, setting ``doneBy`` to this process;
    return the keys whose update applied here."""
    order = list(keys)
    random.Random(seed).shuffle(order)
    me = f"finisher-{os.getpid()}"
    with AtomicStore(url) as store:
        store.get(table, "__warm-up__")
        barrier.wait(timeout=60)
        won: list[str] = []
        for start in range(0, len(order), 50):
            result = store.atomic_update_many(
                table,
                order[start : start + 50],
                where=[{"field": "status", "operator": "equals", "value": "pending"}],
                mutations=[
                    {"field": "status", "operation": "set", "value": "done"},
                    {"field": "doneBy", "operation": "set", "value": me},
                    {"field": "n", "operation": "increment", "value": 1},
                ],
            )
            won.extend(item["key"] for item in result["items"] if item["updated"])
        return [f"{me}:{key}" for key in won]
