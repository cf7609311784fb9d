"""Stale-claim recovery: finish the rows of dispatcher runs that died mid-batch.

A dispatcher run that crashes after its claim leaves its rows ``in_flight`` for
good: no other dispatcher claims them, because its claim selects ``pending`` rows.
A recovery DAG runs on its own schedule and re-claims every ``in_flight`` row whose
``claimedAt`` is older than a threshold, re-stamping ``claimedAt`` and ``claimedBy``
so the dead run (should it come back) can no longer finish them, then processes
them exactly as the dispatcher does (the same mapped task, from _queue_processing.py).

One filter cannot say "pending OR (in_flight AND stale)", so draining and recovery
are two separate scheduled passes. Pick a threshold well above the longest time a
healthy dispatcher run holds a batch.

The scheduler runs a recovery with its default params, so it reclaims one table:
every queue table needs its own recovery DAG, built by ``stale_claim_recovery`` in
_queue_processing.py with that table and its effects table. This one serves
``pending_ops`` (the scheduled ``queue_dispatcher``); ``event_ops`` has its own,
next to the event-driven dispatcher.
"""

from __future__ import annotations

from airflow.sdk import DAG  # also what makes the DAG processor parse this file (safe mode)

try:  # imported as airflow_atomic_store.example_dags.<module>, as provider info lists it
    from ._queue_processing import stale_claim_recovery
except ImportError:  # parsed from a DAGs folder, which Airflow puts on sys.path
    from _queue_processing import stale_claim_recovery

# [START recovery_dag]
stale_claim_recovery_dag: DAG = stale_claim_recovery(
    "stale_claim_recovery", table="pending_ops", effects_table="pending_ops_effects"
)
# [END recovery_dag]
