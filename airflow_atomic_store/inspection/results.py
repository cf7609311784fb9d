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


#: Where a row a task instance claimed (or its run holds) stands now.
RowState = Literal["held", "finished", "handed_back", "expired", "gone", "deleted"]


@dataclass(frozen=True)
class TaskReceipt:
    """One keyed call of a task instance, from its idempotency receipt.

    ``step`` is the part of the key after the task instance's own (a ``@task``'s
    ``task_instance_key(context, step)``), None for the operators' key.
    ``replayed``: whether the task instance's latest try found this receipt already
    written (it replayed the result rather than applying it), None when that try's
    start is unknown. ``claimed``: the keys a claim took, in claim order.
    """

    key: str
    step: str | None
    primitive: str
    table: str
    target: str
    outcome: str
    claimed: tuple[str, ...]
    created_at: datetime
    expires_at: datetime
    replayed: bool | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "step": self.step,
            "primitive": self.primitive,
            "table": self.table,
            "target": self.target,
            "outcome": self.outcome,
            "claimed": list(self.claimed),
            "created_at": stamp(self.created_at),
            "expires_at": stamp(self.expires_at),
            "replayed": self.replayed,
        }


@dataclass(frozen=True)
class TaskRow:
    """A row a task instance claimed, or that its DAG run holds, as it stands now.

    ``state``: ``held`` (``in_flight``/``held``, or a lease not yet expired),
    ``handed_back`` (back to ``pending``/``free``, or a released lease),
    ``finished`` (any other status: ``done``, ``failed``…), ``expired`` (a lease
    past its ``expiresAt``), ``deleted`` (taken by a delete-claim) or ``gone`` (no
    longer the run's: claimed by another run since, or deleted). ``fence`` is the row's fencing token (a semaphore slot's
    or a lease's), when it has one.
    """

    table: str
    key: str
    state: RowState
    status: str | None
    claimed_at: str | None
    fence: int | float | None
    expires_at: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "key": self.key,
            "state": self.state,
            "status": self.status,
            "claimed_at": self.claimed_at,
            "fence": self.fence,
            "expires_at": self.expires_at,
        }


@dataclass(frozen=True)
class TaskInstanceUse:
    """What one task instance did with a store, and what its DAG run holds there.

    ``receipts`` are its keyed calls (the operators key every call by the task
    instance: ``{dag_id}/{run_id}/{task_id}/{map_index}``); ``claimed`` the rows its
    claims took, each as it stands now; ``run_rows`` the other rows whose
    ``claimedBy`` or lease ``holder`` is the run's execution id (``{dag_id}/{run_id}``,
    shared by every task of the run). ``truncated`` says a limit cut a list short.
    """

    task_key: str
    execution_id: str
    receipts: tuple[TaskReceipt, ...]
    claimed: tuple[TaskRow, ...]
    run_rows: tuple[TaskRow, ...]
    tables_searched: int
    tables: int
    truncated: bool

    @property
    def used(self) -> bool:
        return bool(self.receipts or self.claimed or self.run_rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_key": self.task_key,
            "execution_id": self.execution_id,
            "used": self.used,
            "receipts": [receipt.to_dict() for receipt in self.receipts],
            "claimed": [row.to_dict() for row in self.claimed],
            "run_rows": [row.to_dict() for row in self.run_rows],
            "tables_searched": self.tables_searched,
            "tables": self.tables,
            "truncated": self.truncated,
        }
