"""What an inspection returns: frozen values with JSON-ready ``to_dict()``.

Durations become seconds (``*_seconds``), moments canonical UTC timestamps,
so a script reading ``--json`` or the UI page's API gets stable, plain keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from airflow_atomic_store.timestamps import format_timestamp

Shape = Literal["lease", "bucket"]
LeaseState = Literal["held", "expired"]


def seconds(delta: timedelta | None) -> float | None:
    return None if delta is None else delta.total_seconds()


def stamp(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


@dataclass(frozen=True)
class TableSummary:
    """A logical table and how many rows it holds."""

    table: str
    rows: int

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "rows": self.rows}


@dataclass(frozen=True)
class InFlightRow:
    """A claimed row: who claimed it, when, and whether that is longer ago than the threshold.

    ``claimed_by``/``claimed_at`` are None when the row's field is missing or
    not a string (``claimed_at`` also when it is not a timestamp).
    """

    key: str
    claimed_by: str | None
    claimed_at: datetime | None
    claim_age: timedelta | None
    stale: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "claimed_by": self.claimed_by,
            "claimed_at": stamp(self.claimed_at),
            "claim_age_seconds": seconds(self.claim_age),
            "stale": self.stale,
        }


@dataclass(frozen=True)
class TableStats:
    """A table's counts; the queue figures are empty when no row has a string ``status``."""

    table: str
    rows: int
    status_counts: dict[str, int]
    oldest_pending_age: timedelta | None
    in_flight_count: int
    in_flight: tuple[InFlightRow, ...]
    stale_after: timedelta | None
    stale_count: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rows": self.rows,
            "status_counts": dict(self.status_counts),
            "oldest_pending_age_seconds": seconds(self.oldest_pending_age),
            "in_flight_count": self.in_flight_count,
            "in_flight": [row.to_dict() for row in self.in_flight],
            "stale_after_seconds": seconds(self.stale_after),
            "stale_count": self.stale_count,
        }


@dataclass(frozen=True)
class InspectedRow:
    """One row with what its fields say about it.

    Lease-shaped rows have ``holder`` and ``expiresAt`` (held while
    ``expiresAt`` is later than now, compared as canonical timestamps, as the
    lease recipe's guards compare them); bucket-shaped rows have a numeric
    ``tokens``. ``updated_at`` is the store's ``recordTimestamp``.
    """

    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    shape: Shape | None
    lease_state: LeaseState | None
    tokens: int | float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "value": self.value,
            "created_at": stamp(self.created_at),
            "updated_at": stamp(self.updated_at),
            "shape": self.shape,
            "lease_state": self.lease_state,
            "tokens": self.tokens,
        }


@dataclass(frozen=True)
class RowPage:
    """One page of a table's rows in queue order (``createdAt``, then key)."""

    table: str
    rows: tuple[InspectedRow, ...]
    limit: int
    offset: int
    has_more: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rows": [row.to_dict() for row in self.rows],
            "limit": self.limit,
            "offset": self.offset,
            "has_more": self.has_more,
        }


@dataclass(frozen=True)
class ActivityPoint:
    """One stretch of time: items finished in it, and the backlog at its end."""

    start: datetime
    finished: int
    backlog: int


@dataclass(frozen=True)
class QueueActivity:
    """A queue over time, read from its rows' timestamps (see ``StoreInspector.activity``)."""

    table: str
    bucket: timedelta
    points: tuple[ActivityPoint, ...]

    def last(self, window: timedelta, bucket: timedelta) -> QueueActivity:
        """The last ``window`` of these points, summed into ``bucket``-long ones."""
        size = round(bucket / self.bucket)
        count = round(window / self.bucket)
        if size < 1 or count % size or count > len(self.points):
            raise ValueError(f"cannot make {bucket} buckets of the last {window}")
        kept = self.points[len(self.points) - count :]
        groups = [kept[i : i + size] for i in range(0, count, size)]
        points = tuple(
            ActivityPoint(g[0].start, sum(p.finished for p in g), g[-1].backlog) for g in groups
        )
        return QueueActivity(self.table, bucket, points)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "bucket_seconds": self.bucket.total_seconds(),
            "points": [
                {"start": stamp(p.start), "finished": p.finished, "backlog": p.backlog}
                for p in self.points
            ],
        }
