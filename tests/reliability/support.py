"""Shared helpers for the reliability tests (no pytest fixtures here).

``LONG`` is true under ``ATOMIC_STORE_LONG=1``: the same tests then run many
more fuzz examples and stress rounds. The default is a short, deterministic
run that keeps the regular suite fast.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings

from airflow_atomic_store import AtomicStore

LONG = bool(os.environ.get("ATOMIC_STORE_LONG"))


def scaled(short: int, long: int) -> int:
    """``short`` in the regular suite, ``long`` under ``ATOMIC_STORE_LONG=1``."""
    return long if LONG else short


def fuzz(short: int, long: int) -> settings:
    """Hypothesis settings: ``short`` derandomized examples, or ``long`` random ones."""
    return settings(
        max_examples=scaled(short, long),
        deadline=None,
        derandomize=not LONG,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.function_scoped_fixture,
        ],
    )


def snapshot(store: AtomicStore, *tables: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of ``tables`` (key and value, in FIFO order): compare before and after."""
    return {table: store.query(table, limit=10_000) for table in tables}
