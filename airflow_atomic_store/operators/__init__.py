"""Airflow operators for the atomic update, claim and upsert primitives."""

from __future__ import annotations

from airflow_atomic_store.operators.base import BaseAtomicOperator
from airflow_atomic_store.operators.bulk import AtomicUpdateManyOperator, AtomicUpsertManyOperator
from airflow_atomic_store.operators.claim import AtomicClaimOperator, ClaimedRowsOperator
from airflow_atomic_store.operators.update import AtomicUpdateOperator
from airflow_atomic_store.operators.upsert import AtomicUpsertOperator

__all__ = [
    "AtomicClaimOperator",
    "AtomicUpdateManyOperator",
    "AtomicUpdateOperator",
    "AtomicUpsertManyOperator",
    "AtomicUpsertOperator",
    "BaseAtomicOperator",
    "ClaimedRowsOperator",
]
