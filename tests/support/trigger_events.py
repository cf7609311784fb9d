"""A trigger running as the triggerer runs it, and its events as they come.

Shared by the tests of ``ClaimableRowsTrigger`` and ``ClaimWaitTrigger``
(tests/integration/test_trigger*.py, test_claim_wait_trigger.py): each runs the
trigger's ``run()`` in an event loop against a real store behind an
``AIRFLOW_CONN_*`` connection, and reads its events with a time limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_atomic_store.triggers import ClaimableRowsTrigger
from tests.support.specs import PENDING

QUIET = 1.5  # seconds in which a trigger that should stay quiet is watched


def rows_trigger(conn_id: str, **kwargs: Any) -> ClaimableRowsTrigger:
    """A trigger on the ``jobs`` queue's pending rows, polling every 0.1 s unless told."""
    kwargs.setdefault("poll_interval", 0.1)
    return ClaimableRowsTrigger(conn_id=conn_id, table="jobs", where=PENDING, **kwargs)


class Events:
    """A trigger running in the background, as in the triggerer; its events, as they come.

    ``await events.next(within)`` is the next event, or None if none came in time
    (the trigger keeps running: timing out a wait does not cancel it).
    """

    def __init__(self, trigger: Any) -> None:
        self._queue: asyncio.Queue[TriggerEvent] = asyncio.Queue()
        self._task = asyncio.ensure_future(self._pump(trigger.run()))

    async def _pump(self, events: AsyncIterator[TriggerEvent]) -> None:
        async for event in events:
            await self._queue.put(event)

    async def next(self, within: float) -> TriggerEvent | None:
        getter = asyncio.ensure_future(self._queue.get())
        done, _ = await asyncio.wait(
            {getter, self._task}, timeout=within, return_when="FIRST_COMPLETED"
        )
        if getter in done:
            return getter.result()
        getter.cancel()
        if self._task in done:
            self._task.result()  # the trigger raised: show why
            raise AssertionError("the trigger ended without an event")
        return None

    async def aclose(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def first_event(trigger: Any, within: float) -> TriggerEvent | None:
    """The trigger's first event within ``within`` seconds (None if none came); then it stops."""
    events = Events(trigger)
    try:
        return await events.next(within)
    finally:
        await events.aclose()
