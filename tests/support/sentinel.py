"""A sentinel table that bad input must leave untouched, and fresh table names.

For tests that throw hostile or invalid input at one store shared by a test module
(tests/reliability's ``shared_store``): each case writes to a table of its own, and
after it the sentinel's rows are checked unchanged, so a statement that escaped its
table (or its row) is caught even when the call raised.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from airflow_atomic_store import AtomicStore

SENTINEL_TABLE = "sentinel"
_tables = itertools.count()


def fresh_table() -> str:
    """A logical table name no other case of this process has used."""
    return f"hostile-{next(_tables)}"


def _rows(store: AtomicStore) -> list[dict[str, Any]]:
    return store.query(SENTINEL_TABLE, limit=10_000)


def sentinel_check(store: AtomicStore) -> Callable[[], None]:
    """Seed the sentinel table; return a check that it (and nothing else) is unchanged."""
    store.put(SENTINEL_TABLE, "row", {"untouched": True, "n": 0})
    store.put(SENTINEL_TABLE, "other", {"status": "pending"})
    before = _rows(store)

    def check() -> None:
        assert _rows(store) == before

    return check
