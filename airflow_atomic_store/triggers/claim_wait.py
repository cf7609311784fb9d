"""``ClaimWaitTrigger``: what a deferred ``AtomicClaimOperator`` waits on in the triggerer.

One-shot: it yields one event, ``{"status": "rows", …}`` as soon as at least
``min_rows`` rows match, ``{"status": "timeout", …}`` at its deadline, or
``{"status": "rerender", …}`` at ``rerender_at`` (its ``where`` was rendered
from the clock, so the task renders and claims again, then waits anew), and
ends. An end that comes while the store is unavailable carries ``count`` None:
the resumed task claims, or fails and is retried as any store outage is. The deadline is an absolute time in its kwargs, not a duration, so a
trigger restarted by the triggerer keeps the task's original deadline. The
operator's own deadline is this one: Airflow's ``defer(timeout=)`` fails the
task on expiry, while a claim that waited in vain returns the empty result.
It never claims; the resumed task does.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_atomic_store import timestamps
from airflow_atomic_store.triggers.watching import (
    WatchArguments,
    counts,
    earliest_end,
    parse_ends,
)


class ClaimWaitTrigger(BaseTrigger):
    """Wait until ``min_rows`` rows of ``table`` match ``where``, or until ``deadline``.

    :param deadline: a canonical UTC timestamp (``timestamps.now()`` form), or None
        to wait for ever.
    :param rerender_at: a canonical UTC timestamp before which the wait ends so that
        the task renders its templates again, or None.
    """

    def __init__(
        self,
        *,
        conn_id: str,
        table: str,
        where: Sequence[Mapping[str, Any]] | str | None = None,
        match: str = "all",
        min_rows: int = 1,
        poll_interval: float = 2.0,
        deadline: str | None = None,
        rerender_at: str | None = None,
    ) -> None:
        super().__init__()
        self.watch = WatchArguments.parse(conn_id, table, where, match, min_rows, poll_interval)
        self.deadline = deadline
        self.rerender_at = rerender_at
        self._ends = parse_ends(deadline=deadline, rerender_at=rerender_at)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {**self.watch.to_kwargs(), "deadline": self.deadline, "rerender_at": self.rerender_at},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        watch = self.watch
        status, deadline = earliest_end(self._ends)
        async with aclosing(counts(watch, self.log, deadline=deadline)) as stream:
            async for count, _, _ in stream:
                if count >= watch.min_rows:
                    yield self._event("rows", count)
                    return
                if deadline is not None and time.monotonic() >= deadline:
                    yield self._event(status, count)
                    return
        # The stream ended: the store was unavailable at the deadline (no count).
        yield self._event(status, None)

    def _event(self, status: str, count: int | None) -> TriggerEvent:
        return TriggerEvent(
            {"status": status, "table": self.watch.table, "count": count, "at": timestamps.now()}
        )
