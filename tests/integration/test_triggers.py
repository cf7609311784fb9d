"""``ClaimableRowsTrigger`` against real stores (both backends): when it fires, when it
stays quiet, and what it serializes.

Each test runs the trigger's ``run()`` in an event loop, as the triggerer does, with
the store behind an ``AIRFLOW_CONN_*`` connection (tests/support/trigger_events.py).
Rows "from elsewhere" are written by a separate OS process (devkit/late_writer.py).
Its outages are in test_trigger_outages.py, the deferral's ``ClaimWaitTrigger`` in
test_claim_wait_trigger.py.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from airflow.triggers.base import TriggerEvent

from airflow_atomic_store import AtomicStore, SpecError, timestamps
from airflow_atomic_store.triggers import ClaimableRowsTrigger, ClaimWaitTrigger
from devkit import late_writer
from tests.support.specs import PENDING
from tests.support.trigger_events import QUIET, Events, first_event, rows_trigger

# -- firing --------------------------------------------------------------------------------


def test_fires_for_a_row_written_after_it_started(store_conn: str, store_url: str) -> None:
    async def scenario() -> TriggerEvent | None:
        events = Events(rows_trigger(store_conn))
        first = asyncio.ensure_future(events.next(60))
        writer = await asyncio.to_thread(late_writer.start, store_url, "jobs", "fresh", 1.0)
        event = await first
        await asyncio.to_thread(writer.wait, 60)
        await events.aclose()
        return event

    event = asyncio.run(scenario())
    assert event is not None
    assert event.payload["table"] == "jobs"
    assert event.payload["count"] == 1
    timestamps.parse_timestamp(event.payload["at"])


def test_fires_for_rows_there_before_it_started(store_conn: str, store: AtomicStore) -> None:
    for n in range(3):
        store.put("jobs", f"old-{n}", {"status": "pending"})

    event = asyncio.run(first_event(rows_trigger(store_conn, min_rows=3), 30))
    assert event is not None and event.payload["count"] == 3


def test_stays_quiet_on_an_empty_queue_and_for_rows_that_do_not_match(
    store_conn: str, store: AtomicStore
) -> None:
    store.put("jobs", "done", {"status": "done"})
    store.put("jobs", "no-status", {"payload": 1})
    store.put("other", "pending-elsewhere", {"status": "pending"})

    async def scenario() -> TriggerEvent | None:
        events = Events(rows_trigger(store_conn))
        try:
            await asyncio.sleep(0.3)
            await asyncio.to_thread(store.put, "jobs", "done-2", {"status": "done"})
            return await events.next(QUIET)
        finally:
            await events.aclose()

    assert asyncio.run(scenario()) is None


def test_min_rows_holds_the_event_until_that_many_match(
    store_conn: str, store: AtomicStore
) -> None:
    async def scenario() -> list[int | None]:
        events = Events(rows_trigger(store_conn, min_rows=2))
        try:
            store.put("jobs", "a", {"status": "pending"})
            one = await events.next(QUIET)
            store.put("jobs", "b", {"status": "pending"})
            two = await events.next(30)
            return [None if e is None else e.payload["count"] for e in (one, two)]
        finally:
            await events.aclose()

    assert asyncio.run(scenario()) == [None, 2]


# -- storm control ---------------------------------------------------------------------


def test_a_queue_filling_up_fires_once_until_a_claim_moves_its_head(
    store_conn: str, store: AtomicStore
) -> None:
    async def scenario() -> list[Any]:
        seen: list[Any] = []
        events = Events(rows_trigger(store_conn))
        try:
            for n in range(20):  # a burst: one event, not twenty
                await asyncio.to_thread(store.put, "jobs", f"r{n:02d}", {"status": "pending"})
            seen.append(await events.next(30))
            seen.append(await events.next(QUIET))
            # The run it caused claims a batch: the rows left are work for another run.
            claimed = await asyncio.to_thread(store.atomic_claim, "jobs", where=PENDING, limit=10)
            seen.append(claimed["count"])
            seen.append(await events.next(30))
            # Drained entirely: the trigger re-arms and the next row fires at once.
            await asyncio.to_thread(store.atomic_claim, "jobs", where=PENDING, limit=100)
            await asyncio.sleep(0.5)
            await asyncio.to_thread(store.put, "jobs", "next", {"status": "pending"})
            seen.append(await events.next(30))
            seen.append(await events.next(QUIET))
            return seen
        finally:
            await events.aclose()

    first, quiet, claimed, after_claim, after_drain, quiet_again = asyncio.run(scenario())
    assert first is not None and quiet is None
    assert claimed == 10
    assert after_claim is not None and after_claim.payload["count"] == 10
    assert after_drain is not None and after_drain.payload["count"] == 1
    assert quiet_again is None


def test_a_lifo_claim_on_a_backlog_over_the_count_cap_fires_again_at_once(
    store_conn: str, store: AtomicStore
) -> None:
    """The count stays at its cap and the oldest row stays put: only the marker shows the claim.

    Arrivals (the head of a LIFO queue) fire nothing; the dispatcher's claim,
    which takes them and the row announced as next, fires again well before
    ``rearm_after``.
    """
    for n in range(1100):
        store.put("jobs", f"r{n:04d}", {"status": "pending"})

    async def scenario() -> list[Any]:
        seen: list[Any] = []
        events = Events(rows_trigger(store_conn, direction="desc", rearm_after=600))
        try:
            seen.append(await events.next(30))
            for n in range(5):  # newer than the announced row: the head of a LIFO queue
                await asyncio.to_thread(store.put, "jobs", f"new{n}", {"status": "pending"})
            seen.append(await events.next(QUIET))
            claimed = await asyncio.to_thread(
                store.atomic_claim, "jobs", where=PENDING, limit=10, direction="desc"
            )
            seen.append(claimed["count"])
            seen.append(await events.next(30))
            seen.append(await events.next(QUIET))
            return seen
        finally:
            await events.aclose()

    first, quiet, claimed, after_claim, quiet_again = asyncio.run(scenario())
    assert first is not None and first.payload["count"] == 1000
    assert quiet is None
    assert claimed == 10
    assert after_claim is not None and after_claim.payload["count"] == 1000
    assert quiet_again is None


def test_work_nobody_claims_fires_again_after_rearm_after(
    store_conn: str, store: AtomicStore
) -> None:
    store.put("jobs", "stuck", {"status": "pending"})

    async def scenario() -> list[TriggerEvent | None]:
        events = Events(rows_trigger(store_conn, rearm_after=1.0))
        try:
            return [await events.next(30), await events.next(0.5), await events.next(30)]
        finally:
            await events.aclose()

    first, too_soon, again = asyncio.run(scenario())
    assert first is not None and too_soon is None and again is not None


class AssetState:
    """One asset's state store as the triggerer hands it to a watcher's trigger (3.3).

    Airflow's ``AssetStateStoreAccessor`` is one key-value namespace per asset
    (``airflow/sdk/execution_time/context.py``), shared by every watcher of the
    asset; here its two async calls over a dict, without the supervisor behind it.
    """

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_a_restarted_trigger_keeps_its_own_state_beside_another_watcher_of_its_asset(
    store_conn: str, store: AtomicStore
) -> None:
    """Two watchers of one asset (other filters) fire; the first, restarted, stays quiet.

    It announced its row before the restart, and nothing changed since: an event
    now would be a duplicate (with one key per asset it loaded the other
    watcher's state, whose announced row is not its work, and fired).
    """
    store.put("jobs", "pending-1", {"status": "pending"})
    store.put("jobs", "urgent-1", {"status": "urgent"})
    urgent = [{"field": "status", "operator": "equals", "value": "urgent"}]
    asset_state = AssetState()

    def watcher(where: list[dict[str, Any]]) -> ClaimableRowsTrigger:
        trigger = ClaimableRowsTrigger(
            conn_id=store_conn, table="jobs", where=where, poll_interval=0.1, rearm_after=600
        )
        trigger.asset_state_store = asset_state  # type: ignore[attr-defined]
        return trigger

    async def scenario() -> list[TriggerEvent | None]:
        return [
            await first_event(watcher(urgent), 30),
            await first_event(watcher(PENDING), 30),
            await first_event(watcher(urgent), QUIET),  # restarted from its kwargs
        ]

    urgent_event, pending_event, after_restart = asyncio.run(scenario())
    assert urgent_event is not None and pending_event is not None
    assert after_restart is None
    assert len(asset_state.values) == 2


# -- serialization and validation ------------------------------------------------------


def test_serialized_kwargs_hold_the_connection_id_and_the_spec_only() -> None:
    trigger = ClaimableRowsTrigger(
        conn_id="atomic_store_prod", table="jobs", where=PENDING, min_rows=5, poll_interval=3
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_atomic_store.triggers.claimable_rows.ClaimableRowsTrigger"
    assert kwargs == {
        "conn_id": "atomic_store_prod",
        "table": "jobs",
        "where": '[{"field":"status","operator":"equals","value":"pending"}]',
        "match": "all",
        "min_rows": 5,
        "poll_interval": 3.0,
        "rearm_after": 120.0,
        "order_by": "createdAt",
        "direction": "asc",
    }
    # Plain scalars only (see WatchArguments): what the serialized DAG stores as it is.
    assert all(isinstance(value, (str, int, float)) for value in kwargs.values())
    assert ClaimableRowsTrigger(**kwargs).serialize() == (classpath, kwargs)
    wait = ClaimWaitTrigger(conn_id="c", table="jobs", where=PENDING, deadline=timestamps.now())
    wait_path, wait_kwargs = wait.serialize()
    assert set(wait_kwargs) == {
        "conn_id",
        "table",
        "where",
        "match",
        "min_rows",
        "poll_interval",
        "deadline",
        "rerender_at",
    }
    assert ClaimWaitTrigger(**wait_kwargs).serialize() == (wait_path, wait_kwargs)


def test_a_trigger_defined_in_an_asset_watcher_serializes_with_the_dag() -> None:
    from airflow.sdk import Asset, AssetWatcher
    from airflow.serialization.serialized_objects import BaseSerialization

    asset = Asset(
        "jobs_work", watchers=[AssetWatcher(name="jobs", trigger=rows_trigger("atomic_store_prod"))]
    )
    text = json.dumps(BaseSerialization.serialize(asset))
    assert "atomic_store_prod" in text and "ClaimableRowsTrigger" in text


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"table": ""}, "table"),
        ({"where": [{"field": "status", "operator": "like", "value": 1}]}, "where[0].operator"),
        ({"match": "some"}, "match"),
        ({"min_rows": 0}, "min_rows"),
        ({"min_rows": 1001}, "min_rows"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"poll_interval": "fast"}, "poll_interval"),
        ({"rearm_after": -1}, "rearm_after"),
        ({"order_by": "priority"}, "order_by"),
        ({"direction": "sideways"}, "direction"),
        ({"conn_id": ""}, "conn_id"),
    ],
)
def test_a_bad_spec_fails_at_construction_naming_the_field(kwargs: dict, field: str) -> None:
    arguments: dict[str, Any] = {"conn_id": "c", "table": "jobs", "where": PENDING, **kwargs}
    with pytest.raises(SpecError) as raised:
        ClaimableRowsTrigger(**arguments)
    assert raised.value.field == field
