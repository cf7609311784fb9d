"""``ClaimableRowsTrigger`` and ``ClaimWaitTrigger`` against real stores (both backends).

Each test runs the trigger's ``run()`` in an event loop, as the triggerer does, with
the store behind an ``AIRFLOW_CONN_*`` connection. Rows "from elsewhere" are written
by a separate OS process (tests/support/late_writer.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from airflow.triggers.base import TriggerEvent

from airflow_atomic_store import AtomicStore, SpecError, timestamps
from airflow_atomic_store.triggers import ClaimableRowsTrigger, ClaimWaitTrigger
from devkit.postgres_server import PostgresServer
from tests.support import late_writer
from tests.support.specs import PENDING

QUIET = 1.5  # seconds in which a trigger that should stay quiet is watched


def _trigger(conn_id: str, **kwargs: Any) -> ClaimableRowsTrigger:
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


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# -- firing --------------------------------------------------------------------------------


def test_fires_for_a_row_written_after_it_started(store_conn: str, store_url: str) -> None:
    async def scenario() -> TriggerEvent | None:
        events = Events(_trigger(store_conn))
        first = asyncio.ensure_future(events.next(60))
        writer = await asyncio.to_thread(late_writer.start, store_url, "jobs", "fresh", 1.0)
        event = await first
        await asyncio.to_thread(writer.wait, 60)
        await events.aclose()
        return event

    event = _run(scenario())
    assert event is not None
    assert event.payload["table"] == "jobs"
    assert event.payload["count"] == 1
    timestamps.parse_timestamp(event.payload["at"])


def test_fires_for_rows_there_before_it_started(store_conn: str, store: AtomicStore) -> None:
    for n in range(3):
        store.put("jobs", f"old-{n}", {"status": "pending"})

    async def scenario() -> TriggerEvent | None:
        events = Events(_trigger(store_conn, min_rows=3))
        try:
            return await events.next(30)
        finally:
            await events.aclose()

    event = _run(scenario())
    assert event is not None and event.payload["count"] == 3


def test_stays_quiet_on_an_empty_queue_and_for_rows_that_do_not_match(
    store_conn: str, store: AtomicStore
) -> None:
    store.put("jobs", "done", {"status": "done"})
    store.put("jobs", "no-status", {"payload": 1})
    store.put("other", "pending-elsewhere", {"status": "pending"})

    async def scenario() -> TriggerEvent | None:
        events = Events(_trigger(store_conn))
        try:
            await asyncio.sleep(0.3)
            await asyncio.to_thread(store.put, "jobs", "done-2", {"status": "done"})
            return await events.next(QUIET)
        finally:
            await events.aclose()

    assert _run(scenario()) is None


def test_min_rows_holds_the_event_until_that_many_match(
    store_conn: str, store: AtomicStore
) -> None:
    async def scenario() -> list[int | None]:
        events = Events(_trigger(store_conn, min_rows=2))
        try:
            store.put("jobs", "a", {"status": "pending"})
            one = await events.next(QUIET)
            store.put("jobs", "b", {"status": "pending"})
            two = await events.next(30)
            return [None if e is None else e.payload["count"] for e in (one, two)]
        finally:
            await events.aclose()

    assert _run(scenario()) == [None, 2]


# -- storm control ---------------------------------------------------------------------


def test_a_queue_filling_up_fires_once_until_a_claim_moves_its_head(
    store_conn: str, store: AtomicStore
) -> None:
    async def scenario() -> list[Any]:
        seen: list[Any] = []
        events = Events(_trigger(store_conn))
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

    first, quiet, claimed, after_claim, after_drain, quiet_again = _run(scenario())
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
        events = Events(_trigger(store_conn, direction="desc", rearm_after=600))
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

    first, quiet, claimed, after_claim, quiet_again = _run(scenario())
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
        events = Events(_trigger(store_conn, rearm_after=1.0))
        try:
            return [await events.next(30), await events.next(0.5), await events.next(30)]
        finally:
            await events.aclose()

    first, too_soon, again = _run(scenario())
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

    async def first_event(trigger: ClaimableRowsTrigger, within: float) -> TriggerEvent | None:
        events = Events(trigger)
        try:
            return await events.next(within)
        finally:
            await events.aclose()

    async def scenario() -> list[TriggerEvent | None]:
        return [
            await first_event(watcher(urgent), 30),
            await first_event(watcher(PENDING), 30),
            await first_event(watcher(urgent), QUIET),  # restarted from its kwargs
        ]

    urgent_event, pending_event, after_restart = _run(scenario())
    assert urgent_event is not None and pending_event is not None
    assert after_restart is None
    assert len(asset_state.values) == 2


# -- outages (PostgreSQL) --------------------------------------------------------------


def _role(store_url: str) -> str:
    """The database role the store's URL signs in as (its sessions in ``pg_stat_activity``)."""
    return store_url.split("://", 1)[1].split("@", 1)[0]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_survives_its_connections_being_terminated(
    store_conn: str, store_url: str, postgres_server: PostgresServer
) -> None:
    role = _role(store_url)

    async def scenario() -> TriggerEvent | None:
        events = Events(_trigger(store_conn, poll_interval=0.5))
        pending = asyncio.ensure_future(events.next(60))
        await asyncio.sleep(1.0)  # listening, and counted once
        await asyncio.to_thread(
            postgres_server.execute,
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'",
            dbname="atomic_store",
        )
        await asyncio.sleep(0.5)
        writer = await asyncio.to_thread(late_writer.start, store_url, "jobs", "after-kill", 0.0)
        event = await pending
        await asyncio.to_thread(writer.wait, 60)
        await events.aclose()
        return event

    event = _run(scenario())
    assert event is not None and event.payload["count"] == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_holds_one_connection_per_watched_table_while_it_waits(
    store_conn: str, store_url: str, postgres_server: PostgresServer
) -> None:
    role = _role(store_url)

    def connections() -> int:
        """The store role's open connections (the superuser's own is not one)."""
        with psycopg.connect(postgres_server.url_for("atomic_store"), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (role,)
            ).fetchone()
        assert row is not None
        return int(row[0])

    async def scenario() -> tuple[int, int, TriggerEvent | None]:
        before = await asyncio.to_thread(connections)
        events = Events(_trigger(store_conn, poll_interval=0.2))
        await asyncio.sleep(1.0)  # listening, and counted several times
        waiting = await asyncio.to_thread(connections)
        writer = await asyncio.to_thread(late_writer.start, store_url, "jobs", "one", 0.0)
        event = await events.next(60)
        await asyncio.to_thread(writer.wait, 60)
        await asyncio.sleep(0.5)  # counted again after the event, and waiting
        after = await asyncio.to_thread(connections)
        await events.aclose()
        return waiting - before, after - before, event

    waiting, after_event, event = _run(scenario())
    assert event is not None
    assert (waiting, after_event) == (1, 1)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_table_nobody_wrote_yet_is_counted_without_a_connection_per_count(
    store_conn: str, store_url: str, postgres_server: PostgresServer
) -> None:
    """Sessions opened on the database (``pg_stat_database.sessions``) while it polls.

    About twenty counts of a table no write has named yet, then a write from
    another process with ``notify`` off (only a count can find it): the
    trigger fires for it.
    """

    def sessions() -> int:
        """Sessions ever opened on the store's database; this one included."""
        with psycopg.connect(postgres_server.url_for("atomic_store"), autocommit=True) as conn:
            conn.execute("SELECT pg_stat_force_next_flush()")
            row = conn.execute(
                "SELECT sessions FROM pg_stat_database WHERE datname = 'atomic_store'"
            ).fetchone()
        assert row is not None
        return int(row[0])

    def write_silently() -> None:
        with AtomicStore(store_url, notify="off") as writer:
            writer.put("jobs", "silent", {"status": "pending"})

    async def scenario() -> tuple[int, TriggerEvent | None]:
        events = Events(_trigger(store_conn, poll_interval=0.1))
        await asyncio.sleep(1.0)  # listening, and counted several times
        before = await asyncio.to_thread(sessions)
        await asyncio.sleep(2.0)  # about twenty more counts
        opened = await asyncio.to_thread(sessions) - before
        await asyncio.to_thread(write_silently)
        event = await events.next(30)
        await events.aclose()
        return opened, event

    opened, event = _run(scenario())
    assert opened <= 2  # the second sessions() call's own, and at most one of the trigger's
    assert event is not None and event.payload["count"] == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_listens_on_the_channel_of_its_connections_storage_table(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``storage_table`` extra moves the rows and their channel: the write wakes the trigger.

    The poll is a minute away, so only the notification can bring the event in time.
    """
    conn_id = "trigger_queue_rows"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", f"{store_url}?storage_table=queue_rows")

    def write() -> None:
        with AtomicStore(store_url, storage_table="queue_rows") as store:
            store.put("jobs", "in-queue-rows", {"status": "pending"})

    async def scenario() -> TriggerEvent | None:
        events = Events(_trigger(conn_id, poll_interval=60))
        pending = asyncio.ensure_future(events.next(20))
        await asyncio.sleep(1.0)  # listening, and counted once
        await asyncio.to_thread(write)
        event = await pending
        await events.aclose()
        return event

    event = _run(scenario())
    assert event is not None and event.payload["count"] == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_survives_a_postgresql_restart(
    store_conn: str, store_url: str, postgres_server: PostgresServer
) -> None:
    async def scenario() -> tuple[TriggerEvent | None, TriggerEvent | None]:
        events = Events(_trigger(store_conn, poll_interval=0.3))
        pending = asyncio.ensure_future(events.next(90))
        await asyncio.sleep(1.0)
        await asyncio.to_thread(postgres_server.restart, "immediate")
        quiet = None  # nothing matched across the restart: no event yet
        writer = await asyncio.to_thread(late_writer.start, store_url, "jobs", "after-restart", 1.0)
        event = await pending
        await asyncio.to_thread(writer.wait, 60)
        await events.aclose()
        return quiet, event

    _, event = _run(scenario())
    assert event is not None and event.payload["count"] == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_listens_again_soon_after_a_postgresql_restart_not_at_its_next_poll(
    store_conn: str, store_url: str, postgres_server: PostgresServer
) -> None:
    """The poll is a minute away: only listening again brings the write's event in time.

    (It waited out the outage with one sleep of ``poll_interval``, and tried to
    listen only after it: the write's event came 59 s after the write.)
    """

    async def scenario() -> TriggerEvent | None:
        events = Events(_trigger(store_conn, poll_interval=60))
        await asyncio.sleep(1.0)  # listening, and counted once
        await asyncio.to_thread(postgres_server.restart, "immediate")
        await asyncio.sleep(3.0)  # back, and listened to again
        writer = await asyncio.to_thread(late_writer.start, store_url, "jobs", "after", 0.0)
        event = await events.next(30)
        await asyncio.to_thread(writer.wait, 60)
        await events.aclose()
        return event

    event = _run(scenario())
    assert event is not None and event.payload["count"] == 1


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
        "jobs_work", watchers=[AssetWatcher(name="jobs", trigger=_trigger("atomic_store_prod"))]
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


# -- the deferral's one-shot trigger ---------------------------------------------------


def test_the_wait_trigger_fires_once_for_rows_or_at_its_deadline(
    store_conn: str, store: AtomicStore
) -> None:
    async def first(deadline_in: float) -> TriggerEvent | None:
        from datetime import timedelta

        trigger = ClaimWaitTrigger(
            conn_id=store_conn,
            table="jobs",
            where=PENDING,
            poll_interval=0.1,
            deadline=timestamps.shifted(timedelta(seconds=deadline_in)),
        )
        events = Events(trigger)
        try:
            return await events.next(30)
        finally:
            await events.aclose()

    timed_out = _run(first(0.5))
    store.put("jobs", "a", {"status": "pending"})
    rows = _run(first(30))
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
    from datetime import timedelta

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
        events = Events(trigger)
        try:
            return await events.next(20)
        finally:
            await events.aclose()

    event = _run(first())
    assert event is not None and event.payload["status"] == status


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_wait_trigger_ends_at_its_deadline_through_an_outage_without_retrying_hot(
    store_conn: str, store: AtomicStore, postgres_server: PostgresServer, monkeypatch: Any
) -> None:
    """Counting again every ``poll_interval``, and at the deadline the timeout event
    (its count unknown): the resumed task claims, or fails and is retried by Airflow.
    Before, the deadline was never seen in an outage and counts ran back to back."""
    from datetime import timedelta

    from airflow_atomic_store.triggers import sources

    store.put("jobs", "done", {"status": "done"})
    attempts = []
    count = sources.PollingSource._count

    def counted(self: Any) -> Any:
        attempts.append(1)
        return count(self)

    monkeypatch.setattr(sources.PollingSource, "_count", counted)

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

    event, during = _run(scenario())
    assert event is not None and event.payload["status"] == "timeout"
    assert event.payload["count"] is None
    assert during <= 5


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_cancelling_a_trigger_whose_count_waits_on_a_lock_does_not_stall_the_event_loop(
    store_conn: str, store: AtomicStore, store_url: str
) -> None:
    """The triggerer cancels triggers it no longer needs; closing the store waited, on
    the event loop, for a count inside the store to finish (every trigger stalled)."""
    import threading
    import time

    store.put("other", "a", {"status": "done"})  # "jobs" has no id: each count reads the catalog

    async def heartbeat(gaps: list[float]) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    def release_later(locker: psycopg.Connection[Any]) -> None:
        time.sleep(3)
        locker.rollback()

    async def scenario() -> list[float]:
        gaps: list[float] = []
        beat = asyncio.ensure_future(heartbeat(gaps))
        events = Events(_trigger(store_conn, poll_interval=0.2))
        await asyncio.sleep(1.0)
        locker = psycopg.connect(store_url)
        locker.execute("LOCK TABLE atomic_store_rows_tables IN ACCESS EXCLUSIVE MODE")
        releaser = threading.Thread(target=release_later, args=(locker,))
        try:
            await asyncio.sleep(0.6)  # the next count now waits on the lock, inside the store
            gaps.clear()
            releaser.start()
            await events.aclose()
            await asyncio.sleep(0.2)
        finally:
            await asyncio.to_thread(releaser.join, 30)
            locker.close()
            beat.cancel()
        return gaps

    gaps = _run(scenario())
    assert max(gaps) < 1.0
