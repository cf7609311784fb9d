"""The Airflow hook that opens an atomic store from a connection."""

from __future__ import annotations

from airflow_atomic_store.hooks.atomic_store import AtomicStoreHook

__all__ = ["AtomicStoreHook"]
