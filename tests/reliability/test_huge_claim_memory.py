"""A claim of 1000 rows of ~20 KB each completes with bounded memory, round after round.

Measured in a fresh process from Linux's ``/proc/self/status``: the peak resident
set size (``VmHWM``, reset before each claim) against the resident set just
before it. The bounds are generous: they catch a claim that holds many copies
of the batch, or memory that grows with every round, not a few megabytes of
driver buffers. The resident set between claims is read after handing free heap
pages back (glibc's ``malloc_trim``), so it counts live memory: once the caller
drops the result, the store must hold no copy of the batch.
"""

from __future__ import annotations

import os

from airflow_atomic_store import AtomicStore
from devkit.processes import run_in_processes
from tests.reliability import workers

ROWS = 1000
VALUE_BYTES = 20_000
ROUNDS = 4
MB = 1024 * 1024


def test_claiming_1000_large_rows_needs_bounded_memory_and_does_not_accumulate(
    store: AtomicStore, store_url: str
) -> None:
    for i in range(ROWS):
        blob = os.urandom(VALUE_BYTES // 2).hex()  # incompressible: no help from TOAST
        store.put("big", f"row-{i:04d}", {"status": "pending", "blob": blob})

    [report] = run_in_processes(
        workers.claim_big_batches, [(store_url, "big", ROUNDS)], timeout=300
    )

    assert report["counts"] == [ROWS] * ROUNDS
    payload = report["payload"]
    assert payload == ROWS * VALUE_BYTES
    growth, retained = report["growth"], report["retained"]
    kept = retained[0] - report["baseline"]
    print(
        f"payload {payload / MB:.1f} MiB; peak growth per claim "
        f"{[round(g / MB, 1) for g in growth]} MiB; resident after each "
        f"{[round(r / MB, 1) for r in retained]} MiB; kept after the first {kept / MB:.1f} MiB"
    )
    assert max(growth) < 10 * payload, (
        f"a claim of {payload / MB:.0f} MiB peaked {max(growth) / MB:.0f} MiB higher"
    )
    # Once the caller drops the result, the store keeps no copy of the batch (a
    # driver cursor holding its last result did, until the next call).
    assert kept < payload / 2, f"{kept / MB:.0f} MiB still resident after the claim"
    # Rounds after the first find the memory the first one used.
    accumulated = retained[-1] - retained[0]
    assert accumulated < payload / 2, (
        f"{accumulated / MB:.0f} MiB more resident after {ROUNDS - 1} more claims"
    )
