"""What the store needs from a backend: one method per primitive.

Backends receive parsed, validated specs; they never see raw user input, so
everything they raise is about the database, not the spec.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any, Protocol

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec import Condition, FieldPath, Mutation, Ordering
from airflow_atomic_store.spec.options import OrderColumn

Row = tuple[str, dict[str, Any]]

DEFAULT_STORAGE_TABLE = "atomic_store_rows"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")


def claim_index_name(storage_table: str, fields: Sequence[FieldPath], column: str) -> str:
    """A stable name (at most 63 characters) for one claim index shape."""
    shape = repr(([field.segments for field in fields], column)).encode()
    return f"{storage_table}_claim_{hashlib.sha256(shape).hexdigest()[:8]}"


def check_storage_table(name: str) -> str:
    """The physical table name becomes an identifier (and index names), so keep it plain."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise SpecError(
            "storage_table",
            f"must be a plain SQL identifier (letters, digits, _; at most 48), got {name!r}",
        )
    return name


class Backend(Protocol):
    def put(self, table: str, key: str, value: dict[str, Any]) -> None: ...

    def get(self, table: str, key: str) -> dict[str, Any] | None: ...

    def delete(self, table: str, key: str) -> bool: ...

    def query(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
    ) -> list[Row]: ...

    def update(
        self,
        table: str,
        key: str,
        where: Sequence[Condition],
        match: str,
        mutations: Sequence[Mutation],
    ) -> dict[str, Any] | None:
        """The new value, or None when the row is missing or the guard failed."""
        ...

    def claim(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        mutations: Sequence[Mutation],
    ) -> list[Row]:
        """The claimed rows' new values, in claim order."""
        ...

    def upsert(
        self,
        table: str,
        key: str,
        insert_value: dict[str, Any],
        mutations: Sequence[Mutation],
    ) -> tuple[bool, dict[str, Any]]:
        """``(inserted, resulting value)``."""
        ...

    def explain_claim(
        self, table: str, where: Sequence[Condition], match: str, ordering: Ordering, limit: int
    ) -> str:
        """The database's plan for the claim's row selection."""
        ...

    def ensure_claim_index(self, fields: Sequence[FieldPath], column: OrderColumn) -> str:
        """Create (once, concurrency-safe) the index a claim on ``fields`` can use."""
        ...

    def close(self) -> None: ...
