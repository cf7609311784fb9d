"""``RowWaitTrigger``: what a deferred ``AtomicUpdateOperator`` waits on in the triggerer.

One-shot, like ``ClaimWaitTrigger``: it yields one event and ends:
``{"status": "matches", …}`` as soon as the row ``key`` exists and its guard holds,
``{"status": "timeout", …}`` at its deadline, or ``{"status": "rerender", …}`` at
``rerender_at`` (a guard rendered from the clock, ``expiresAt lte {{ atomic.now }}``,
goes stale by the clock alone: the task renders it again, tries, and waits anew). On
PostgreSQL it wakes on the table's notifications (writes notify by default); the
row is read with every other awaited row of the table, one statement per wake for
all the triggerer's waits (``hub.py``); on SQLite they are polled together. It never writes: the
resumed task runs the guarded update, which may still lose the race and wait again.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec import parse_key
from airflow_atomic_store.spec.conditions import evaluate, parse_where
from airflow_atomic_store.triggers.watching import (
    WatchArguments,
    earliest_end,
    parse_ends,
    row_values,
)


class RowWaitTrigger(BaseTrigger):
    """Wait until the row ``key`` of ``table`` exists and ``where`` holds, or ``deadline``.

    :param deadline: a canonical UTC timestamp, or None to wait for ever.
    :param rerender_at: a canonical UTC timestamp before which the wait ends so that
        the task renders its templates again, or None.
    """

    def __init__(
        self,
        *,
        conn_id: str,
        table: str,
        key: str,
        where: Sequence[Mapping[str, Any]] | str | None = None,
        match: str = "all",
        poll_interval: float = 2.0,
        deadline: str | None = None,
        rerender_at: str | None = None,
    ) -> None:
        super().__init__()
        self.watch = WatchArguments.parse(conn_id, table, where, match, 1, poll_interval)
        self.key = parse_key(key)
        self.deadline = deadline
        self.rerender_at = rerender_at
        self._ends = parse_ends(deadline=deadline, rerender_at=rerender_at)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs = self.watch.to_kwargs()
        del kwargs["min_rows"]
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {**kwargs, "key": self.key, "deadline": self.deadline, "rerender_at": self.rerender_at},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        status, deadline = earliest_end(self._ends)
        conditions = parse_where(self.watch.where)
        stream = row_values(self.watch, self.key, self.log, deadline=deadline)
        async with aclosing(stream) as values:
            async for value in values:
                if value is not None and evaluate(conditions, self.watch.match, value):
                    yield self._event("matches")
                    return
                if deadline is not None and time.monotonic() >= deadline:
                    yield self._event(status)
                    return
        # The stream ended: the store was unavailable at the deadline.
        yield self._event(status)

    def _event(self, status: str) -> TriggerEvent:
        return TriggerEvent(
            {"status": status, "table": self.watch.table, "key": self.key, "at": timestamps.now()}
        )
