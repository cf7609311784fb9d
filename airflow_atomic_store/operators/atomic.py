"""The three atomic operators in one import path (each lives in its own module)."""

from __future__ import annotations

from airflow_atomic_store.operators.claim import AtomicClaimOperator, ClaimedRowsOperator
from airflow_atomic_store.operators.update import AtomicUpdateOperator
from airflow_atomic_store.operators.upsert import AtomicUpsertOperator

__all__ = [
    "AtomicClaimOperator",
    "AtomicUpdateOperator",
    "AtomicUpsertOperator",
    "ClaimedRowsOperator",
]
