"""``RowWaitTrigger``, what a deferred guarded update waits on (both backends).

Its ``run()`` goes in an event loop, as in the triggerer, with the store behind an
``AIRFLOW_CONN_*`` connection; the write that makes the guard true comes from a
separate OS process (devkit/late_writer.py).
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from airflow.triggers.base import TriggerEvent

from airflow_atomic_store import AtomicStore, SpecError, timestamps
from airflow_atomic_store.triggers.row_wait import RowWaitTrigger
from devkit import late_writer

FREE = [{"field": "holder", "operator": "equals", "value": None}]


def _trigger(conn_id: str, **kwargs: Any) -> RowWaitTrigger:
    return RowWaitTrigger(conn_id=conn_id, table="leases", key="dispatcher", where=FREE, **kwargs)


async def _first_event(trigger: RowWaitTrigger, within: float) -> TriggerEvent:
    events = trigger.run()
    try:
        return await asyncio.wait_for(events.__anext__(), within)
    finally:
        await events.aclose()


def test_it_fires_when_another_process_makes_the_guard_true(
    store_conn: str, store: AtomicStore, store_url: str, backend: str
) -> None:
    """On PostgreSQL the table's notification wakes it: its poll (30 s) never comes."""
    store.put("leases", "dispatcher", {"holder": "run-1"})
    poll = 30.0 if backend == "postgres" else 0.1

    async def scenario() -> tuple[TriggerEvent, float]:
        started = time.monotonic()
        waiting = asyncio.ensure_future(_first_event(_trigger(store_conn, poll_interval=poll), 60))
        writer = await asyncio.to_thread(
            late_writer.start, store_url, "leases", "dispatcher", 1.0, {"holder": None}
        )
        event = await waiting
        await asyncio.to_thread(writer.wait, 60)
        return event, time.monotonic() - started

    event, waited = asyncio.run(scenario())
    assert event.payload["status"] == "matches"
    assert event.payload["key"] == "dispatcher"
    assert waited < 20


def test_it_fires_at_once_when_the_guard_already_holds_and_waits_for_a_missing_row(
    store_conn: str, store: AtomicStore
) -> None:
    deadline = timestamps.shifted(timedelta(seconds=0.5))
    missing = asyncio.run(
        _first_event(_trigger(store_conn, poll_interval=0.1, deadline=deadline), 30)
    )
    assert missing.payload["status"] == "timeout"
    store.put("leases", "dispatcher", {"holder": None})
    present = asyncio.run(_first_event(_trigger(store_conn, poll_interval=0.1), 30))
    assert present.payload["status"] == "matches"


def test_it_ends_at_its_rerender_time_before_its_deadline(
    store_conn: str, store: AtomicStore
) -> None:
    store.put("leases", "dispatcher", {"holder": "run-1"})
    trigger = _trigger(
        store_conn,
        poll_interval=0.1,
        deadline=timestamps.shifted(timedelta(seconds=30)),
        rerender_at=timestamps.shifted(timedelta(seconds=0.5)),
    )
    assert asyncio.run(_first_event(trigger, 30)).payload["status"] == "rerender"


def test_it_serializes_to_kwargs_that_rebuild_it() -> None:
    trigger = _trigger("c", poll_interval=0.5, deadline="2030-01-01T00:00:00.000000Z")
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_atomic_store.triggers.row_wait.RowWaitTrigger"
    assert all(not isinstance(value, (dict, list)) for value in kwargs.values())
    assert RowWaitTrigger(**kwargs).serialize() == (classpath, kwargs)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"key": ""}, "key"),
        ({"deadline": "tomorrow"}, "deadline"),
        ({"poll_interval": 0}, "poll_interval"),
    ],
)
def test_bad_arguments_are_spec_errors_naming_the_field(arguments: dict, field: str) -> None:
    with pytest.raises(SpecError) as raised:
        RowWaitTrigger(**{"conn_id": "c", "table": "t", "key": "k", **arguments})
    assert raised.value.field == field
