"""What a trigger watches: a table's rows matching ``where``, parsed before any I/O.

Pure, like the rest of the spec layer: a trigger validates its arguments here at
construction (in the DAG file, so a bad spec is an import error naming the
field), and again when the triggerer rebuilds it from its serialized kwargs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec.conditions import Condition, parse_match, parse_where
from airflow_atomic_store.spec.options import parse_limit, parse_table

#: A count stops here: "is there work?" never walks a whole queue.
COUNT_CAP = 1000
#: Seconds; below this a poll is a busy loop, above it a trigger looks dead.
POLL_BOUNDS = (0.05, 3600.0)


@dataclass(frozen=True)
class RowWatch:
    """Rows of ``table`` matching ``where``/``match``; ``min_rows`` of them make work."""

    table: str
    where: tuple[Condition, ...]
    match: str
    min_rows: int


def parse_watch(table: Any, where: Any, match: Any, min_rows: Any) -> RowWatch:
    return RowWatch(
        table=parse_table(table),
        where=parse_where(where),
        match=parse_match(match),
        min_rows=parse_limit(min_rows, (1, COUNT_CAP), field="min_rows"),
    )


def parse_seconds(value: Any, field: str, bounds: tuple[float, float] = POLL_BOUNDS) -> float:
    """A number of seconds within ``bounds`` (a ``timedelta`` is accepted too)."""
    seconds = value.total_seconds() if hasattr(value, "total_seconds") else value
    low, high = bounds
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not math.isfinite(seconds)
        or not low <= seconds <= high
    ):
        raise SpecError(
            field, f"must be a number of seconds from {low:g} to {high:g}, got {value!r}"
        )
    return float(seconds)
