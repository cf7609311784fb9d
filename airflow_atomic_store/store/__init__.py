"""The store layer: ``AtomicStore`` over SQLite or PostgreSQL, no Airflow import."""

from __future__ import annotations

from airflow_atomic_store.store.atomic_store import AtomicStore

__all__ = ["AtomicStore"]
