"""See the coordination state: tables, queue counts, claims, leases and buckets.

:class:`StoreInspector` answers what an operator of a queue or a lease asks
(how many rows wait, who holds what since when, which claims look stuck)
without a SQL client. The backends count and group in SQL, each call inside
one read-only snapshot, so a queue of 200k rows is never loaded to be
counted and nothing an inspection does can write (no row, no claimable set,
no receipt). Filters are the operators' ``where`` language, validated by the
spec layer before the store is touched. No Airflow import: the command line
and the Airflow UI page share this module.

The queue fields are the ones the queue recipes and the default claim write:
``status`` (``pending``, ``in_flight``, …), ``claimedAt`` (a canonical
timestamp) and ``claimedBy`` (the claiming run's execution id).
"""

from __future__ import annotations

from airflow_atomic_store.inspection.inspector import StoreInspector
from airflow_atomic_store.inspection.results import (
    ActivityPoint,
    InFlightRow,
    InspectedRow,
    LeaseState,
    QueueActivity,
    RowPage,
    Shape,
    TableStats,
    TableSummary,
    TaskInstanceUse,
    TaskReceipt,
    TaskRow,
)

__all__ = [
    "ActivityPoint",
    "InFlightRow",
    "InspectedRow",
    "LeaseState",
    "QueueActivity",
    "RowPage",
    "Shape",
    "StoreInspector",
    "TableStats",
    "TableSummary",
    "TaskInstanceUse",
    "TaskReceipt",
    "TaskRow",
]
