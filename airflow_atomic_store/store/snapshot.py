"""What a backend offers for inspection: counts and pages read in one read-only snapshot.

``airflow_atomic_store.inspection`` shapes these answers for people and
scripts; the backends only count, group and page in SQL (a queue may hold
hundreds of thousands of rows, none of which should cross into Python to be
counted). A snapshot is one read-only transaction, so the figures of one
``stats`` call agree with each other, and no statement in it can write.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from airflow_atomic_store.spec import Condition


@dataclass(frozen=True)
class StoredRow:
    """One row as stored, with the timestamps the store keeps (aware, UTC)."""

    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Claim:
    """An in-flight row's claim fields: each a string in the row, else None."""

    key: str
    claimed_at: str | None
    claimed_by: str | None


class Snapshot(Protocol):
    """Read-only queries over one consistent view of the store.

    ``where``/``match`` are parsed specs. The positions in ``inline`` are
    conditions the caller fixed (``status equals pending``), written as
    literals so that a claimable set's partial index can serve them.
    """

    def table_counts(self) -> list[tuple[str, int]]:
        """Every logical table and its row count."""
        ...

    def status_counts(self, table: str) -> list[tuple[str | None, int]]:
        """Rows per string ``status``; rows without one are counted under None."""
        ...

    def count(
        self, table: str, where: Sequence[Condition], match: str, inline: Collection[int] = ()
    ) -> int: ...

    def oldest_created(
        self, table: str, where: Sequence[Condition], match: str, inline: Collection[int] = ()
    ) -> datetime | None:
        """The earliest ``created_at`` among the matching rows."""
        ...

    def claims(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        limit: int,
        inline: Collection[int] = (),
    ) -> list[Claim]:
        """Matching rows' claim fields, oldest ``claimedAt`` first (rows without one last)."""
        ...

    def rows(
        self, table: str, where: Sequence[Condition], match: str, limit: int, offset: int
    ) -> list[StoredRow]:
        """Matching rows in queue order (``created_at``, then key)."""
        ...
