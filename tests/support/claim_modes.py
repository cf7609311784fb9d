"""Workers that drain one queue in a claim mode (importable by ``spawn`` children)."""

from __future__ import annotations

import os
import time
from typing import Any

from airflow_atomic_store import AtomicStore
from tests.support.specs import PENDING


def drain_in_mode(barrier: Any, url: str, table: str, limit: int, mode: str) -> list[str]:
    """Claim pending rows in ``mode`` until none is left; the keys this process won, in order."""
    execution_id = f"{mode}-{os.getpid()}"
    with AtomicStore(url) as store:
        store.get(table, "__warm-up__")
        barrier.wait(timeout=60)
        won: list[str] = []
        while True:
            result = store.atomic_claim(
                table, where=PENDING, limit=limit, execution_id=execution_id, mode=mode
            )
            for row in result["claimed"]:
                expected = "pending" if mode == "delete" else "in_flight"
                if row["value"]["status"] != expected:
                    raise AssertionError(f"row {row['key']} came back as {row['value']}")
                won.append(row["key"])
            if result["count"] == 0:
                # Empty can also mean "the rest is locked by other claimers".
                if not store.query(table, where=PENDING, limit=1):
                    return won
                time.sleep(0.001)


def claim_or_retire(barrier: Any, url: str, table: str, role: str) -> list[str] | int:
    """``role`` "mark": drain pending rows (the keys won); "retire": retire done rows in
    batches of 50 until none is left (how many). PostgreSQL claimers run with a short
    ``lock_timeout``: a claim that had to wait for the retention's locks would fail."""
    if role == "retire":
        with AtomicStore(url) as store:
            store.get(table, "__warm-up__")
            barrier.wait(timeout=60)
            retired = 0
            while True:
                result = store.retire(table, older_than=60, limit=50, time_budget=0)
                retired += result["retired"]
                if result["complete"]:
                    return retired
    options = {"lock_timeout": 0.5} if url.startswith("postgresql") else {}
    with AtomicStore(url, **options) as store:
        store.get(table, "__warm-up__")
        barrier.wait(timeout=60)
        won: list[str] = []
        while True:
            claimed = store.atomic_claim(table, where=PENDING, limit=10)["claimed"]
            won.extend(row["key"] for row in claimed)
            if not claimed and not store.query(table, where=PENDING, limit=1):
                return won
