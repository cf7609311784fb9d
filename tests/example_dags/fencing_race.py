"""Lease take-overs raced by separate OS processes (``devkit.processes.run_in_processes``).

Each process repeats leader_lease.py's take-over (an update guarded on ``expiresAt lte
now`` that sets the holder and increments ``fence`` in the same statement) with a
lease that expires at once, so the next take-over can follow, and writes the
protected row under each fence it got (``fenced_write``'s guarded update). The
statements are spelled out here, not imported from the DAG file: a spawned process
stays free of Airflow. No pytest import.
"""

from __future__ import annotations

import os
from typing import Any

from airflow_atomic_store import AtomicStore, timestamps

LEASES, PROTECTED, LEASE = "leases", "lease_protected", "dispatcher"


def take_over_and_write(barrier: Any, url: str, attempts: int) -> list[tuple[int, bool]]:
    """``(fence, write accepted)`` for each take-over this process won."""
    me = f"racer-{os.getpid()}"
    won: list[tuple[int, bool]] = []
    with AtomicStore(url) as store:
        store.get(LEASES, LEASE)  # connect before the race starts
        barrier.wait(timeout=60)
        for _ in range(attempts):
            now = timestamps.now()
            taken = store.atomic_update(
                LEASES,
                LEASE,
                where=[{"field": "expiresAt", "operator": "lte", "value": now}],
                mutations=[
                    {"field": "holder", "operation": "set", "value": me},
                    {"field": "acquiredAt", "operation": "set", "value": now},
                    {"field": "expiresAt", "operation": "set", "value": now},  # expired at once
                    {"field": "fence", "operation": "increment", "value": 1},
                ],
            )
            if not taken["updated"]:
                continue
            fence = taken["value"]["fence"]
            written = store.atomic_update(
                PROTECTED,
                LEASE,
                where=[{"field": "fence", "operator": "lte", "value": fence}],
                mutations=[
                    {"field": "fence", "operation": "set", "value": fence},
                    {"field": "data", "operation": "set", "value": {"writer": me}},
                ],
            )
            won.append((fence, bool(written["updated"])))
    return won
