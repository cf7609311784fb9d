"""``ClaimWaitTrigger``, the deferrable claim's one-shot trigger, against real stores.

It fires once: for rows, at its deadline, or at its re-render time, whichever comes
first, and at its deadline even through an outage (both backends, outage on
PostgreSQL).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from airflow.triggers.base import TriggerEvent

from airflow_atomic_store import AtomicStore, timestamps
from airflow_atomic_store.triggers import ClaimWaitTrigger
from devkit.postgres_server import PostgresServer
from tests.support.specs import PENDING
from tests.support.trigger_events import Events, first_event

# -- the deferral's one-shot trigger ---------------------------------------------------


def test_the_wait_trigger_fires_once_for_rows_or_at_its_deadline(
    store_conn: str, store: AtomicStore
) -> None:
    async def first(deadline_in: float) -> TriggerEvent | None:
        trigger = ClaimWaitTrigger(
            conn_id=store_conn,
            table="jobs",
            where=PENDING,
            poll_interval=0.1,
            deadline=timestamps.shifted(timedelta(seconds=deadline_in)),
        )
        return await first_event(trigger, 30)

    timed_out = asyncio.run(first(0.5))
    store.put("jobs", "a", {"status": "pending"})
    rows = asyncio.run(first(30))
    assert timed_out is not None and timed_out.payload["status"] == "timeout"
    assert timed_out.payload["count"] == 0
    assert rows is not None and (rows.payload["status"], rows.payload["count"]) == ("rows", 1)


@pytest.mark.parametrize(
    ("deadline_in", "rerender_in", "status"),
    [(None, 0.5, "rerender"), (30, 0.5, "rerender"), (0.5, 30, "timeout"), (0.5, 0.5, "timeout")],
)
def test_the_wait_trigger_ends_at_the_earlier_of_its_deadline_and_its_rerender_time(
    store_conn: str, deadline_in: float | None, rerender_in: float, status: str
) -> None:
    """A claim whose ``where`` read the clock is rendered again before its deadline
    (the stale-claim pass: rows match by the clock, not by a write); at a tie the
    deadline wins, so the task claims once more and returns."""

    def at(seconds: float | None) -> str | None:
        return None if seconds is None else timestamps.shifted(timedelta(seconds=seconds))

    async def first() -> TriggerEvent | None:
        trigger = ClaimWaitTrigger(
            conn_id=store_conn,
            table="jobs",
            where=PENDING,
            poll_interval=0.1,
            deadline=at(deadline_in),
            rerender_at=at(rerender_in),
        )
        assert trigger.serialize()[1]["rerender_at"] == trigger.rerender_at
        return await first_event(trigger, 20)

    event = asyncio.run(first())
    assert event is not None and event.payload["status"] == status


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_wait_trigger_ends_at_its_deadline_through_an_outage_without_retrying_hot(
    store_conn: str, store: AtomicStore, postgres_server: PostgresServer, monkeypatch: Any
) -> None:
    """Counting again every ``poll_interval``, and at the deadline the timeout event
    (its count unknown): the resumed task claims, or fails and is retried by Airflow.
    Before, the deadline was never seen in an outage and counts ran back to back."""
    from airflow_atomic_store.triggers.hub import Hub

    store.put("jobs", "done", {"status": "done"})
    attempts = []
    count = Hub._count

    async def counted(self: Any, *args: Any) -> Any:
        attempts.append(1)
        return await count(self, *args)

    monkeypatch.setattr(Hub, "_count", counted)

    async def scenario() -> tuple[TriggerEvent | None, int]:
        trigger = ClaimWaitTrigger(
            conn_id=store_conn,
            table="jobs",
            where=PENDING,
            poll_interval=1.0,
            deadline=timestamps.shifted(timedelta(seconds=2.5)),
        )
        events = Events(trigger)
        await asyncio.sleep(0.7)
        await asyncio.to_thread(postgres_server.shutdown, "immediate")
        try:
            before = len(attempts)
            event = await events.next(8)
            during = len(attempts) - before
        finally:
            await events.aclose()
            await asyncio.to_thread(postgres_server.start)
        return event, during

    event, during = asyncio.run(scenario())
    assert event is not None and event.payload["status"] == "timeout"
    assert event.payload["count"] is None
    assert during <= 5
