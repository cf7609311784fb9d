"""Retention: finished rows retired in bounded batches of delete-claims.

A queue that marks rows in place keeps every row it ever consumed. Retiring is a
loop of delete-claims (``mode="delete"``) over the finished statuses and a finish
timestamp older than the threshold: each batch is one short statement that skips
rows other claims hold (``SKIP LOCKED`` on PostgreSQL; one writer at a time on
SQLite), walks the table oldest first (a queue's oldest rows are its finished
ones; a set declared over the finished statuses serves it where they are not),
and never matches a ``pending`` or ``in_flight`` row. Optionally
each batch is copied into an archive table in the same statement, as pgmq's
``archive`` does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from airflow_atomic_store import timestamps
from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec import (
    Condition,
    parse_limit,
    parse_ordering,
    parse_table,
    parse_where,
)
from airflow_atomic_store.spec.paths import parse_path
from airflow_atomic_store.store.contract import Selection

#: Statuses a queue is working on: retention never retires them.
UNFINISHED: Final = frozenset({"pending", "in_flight"})
#: Rows one batch retires at most, and the longest time budget (a day).
BATCH_LIMIT: Final = (1, 10_000)
MAX_BUDGET_SECONDS: Final = 86_400.0
#: Oldest first, so each run retires the longest-kept rows.
FIFO = parse_ordering("createdAt", "asc")


@dataclass(frozen=True)
class RetentionPlan:
    """What one ``retire`` call deletes: its filter, batch size, budget and archive."""

    table: str
    where: tuple[Condition, ...]
    limit: int
    time_budget: float
    archive_table: str | None

    @property
    def selection(self) -> Selection:
        """The rows one batch takes: the oldest retirable ones, at most ``limit``."""
        return Selection(self.table, self.where, "all", FIFO, self.limit)

    def run(
        self,
        take_batch: Callable[[RetentionPlan], int],
        count_left: Callable[[RetentionPlan], int],
    ) -> dict[str, Any]:
        """Delete-claim batches until one comes back short or the budget is spent.

        A batch comes back short when nothing more is retirable, and also when it
        stepped past rows other transactions hold (``SKIP LOCKED``): so a short batch
        is followed by ``count_left`` (one statement a run where rows can be stepped
        past), and ``complete`` is True only when nothing is left. ``stopped`` says
        why the run ended.
        """
        deadline = time.monotonic() + self.time_budget
        retired = batches = 0
        while True:
            taken = take_batch(self)
            retired, batches = retired + taken, batches + 1
            if taken < self.limit:
                stopped = "held" if count_left(self) else "done"
                break
            if time.monotonic() >= deadline:
                stopped = "time_budget"
                break
        return {
            "retired": retired,
            "batches": batches,
            "complete": stopped == "done",
            "stopped": stopped,
        }


def plan_retention(
    table: Any,
    older_than: Any,
    statuses: Any,
    finished_field: Any,
    limit: Any,
    time_budget: Any,
    archive_table: Any,
) -> RetentionPlan:
    """The parsed ``retire`` arguments; every error names its field, before any I/O."""
    table = parse_table(table)
    seconds = _seconds(older_than, "older_than", low=0.0, high=100 * 365 * 86_400.0)
    finished = _statuses(statuses)
    parse_path(finished_field, field="finished_field")
    cutoff = timestamps.shifted(-timedelta(seconds=seconds))
    where = parse_where(
        [
            {"field": "status", "operator": "in", "value": list(finished)},
            {"field": finished_field, "operator": "lt", "value": cutoff},
        ]
    )
    budget = _seconds(time_budget, "time_budget", low=0.0, high=MAX_BUDGET_SECONDS)
    archive = None if archive_table is None else parse_table(archive_table, "archive_table")
    if archive == table:
        raise SpecError("archive_table", "must not be the table being retired")
    count = parse_limit(limit, BATCH_LIMIT)
    return RetentionPlan(table, where, count, budget, archive)


def _statuses(statuses: Any) -> tuple[str, ...]:
    if isinstance(statuses, str) or not isinstance(statuses, Sequence) or not statuses:
        raise SpecError("statuses", f"must be a non-empty list of statuses, got {statuses!r}")
    if not all(isinstance(status, str) and status for status in statuses):
        raise SpecError("statuses", f"each status must be a non-empty string, got {statuses!r}")
    working = sorted(UNFINISHED.intersection(statuses))
    if working:
        raise SpecError(
            "statuses", f"retention never retires rows a queue is working on: {working}"
        )
    return tuple(statuses)


def _seconds(value: Any, field: str, *, low: float, high: float) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise SpecError(
            field, f"must be a timedelta or seconds from {low:g} to {high:g}, got {value!r}"
        )
    return float(value)
