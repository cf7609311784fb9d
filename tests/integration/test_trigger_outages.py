"""``ClaimableRowsTrigger`` through PostgreSQL outages, and the connections it holds.

Connections terminated, the server restarted, a count waiting on a lock while the
triggerer cancels the trigger: the trigger fires for the next write, listens again
soon, and never stalls the event loop; while triggers wait, a process holds two
connections per store whatever they watch, and opens no session per count. PostgreSQL only (SQLite has no
server to lose and polls).
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from airflow.triggers.base import TriggerEvent

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.triggers import ClaimableRowsTrigger
from devkit import late_writer
from devkit.postgres_server import PostgresServer
from tests.support.specs import PENDING
from tests.support.trigger_events import Events, rows_trigger

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
        events = Events(rows_trigger(store_conn, poll_interval=0.5))
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

    event = asyncio.run(scenario())
    assert event is not None and event.payload["count"] == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_holds_two_connections_per_store_whatever_its_triggers_watch(
    store_conn: str, store_url: str, postgres_server: PostgresServer
) -> None:
    """Six triggers on three tables: the listener and the reader, while they wait and
    after an event (the store's own connection reads the claimable sets' catalog when
    a watch is compiled, and is closed again)."""
    role = _role(store_url)

    def connections() -> int:
        """The store role's open connections (the superuser's own is not one)."""
        with psycopg.connect(postgres_server.url_for("atomic_store"), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (role,)
            ).fetchone()
        assert row is not None
        return int(row[0])

    def trigger(table: str) -> ClaimableRowsTrigger:
        return ClaimableRowsTrigger(
            conn_id=store_conn, table=table, where=PENDING, poll_interval=0.2
        )

    async def scenario() -> tuple[int, int, TriggerEvent | None]:
        before = await asyncio.to_thread(connections)
        events = Events(rows_trigger(store_conn, poll_interval=0.2))
        others = [Events(trigger(table)) for table in ("jobs", "jobs", "mail", "mail", "logs")]
        await asyncio.sleep(1.0)  # listening, and counted several times
        waiting = await asyncio.to_thread(connections)
        writer = await asyncio.to_thread(late_writer.start, store_url, "jobs", "one", 0.0)
        event = await events.next(60)
        await asyncio.to_thread(writer.wait, 60)
        await asyncio.sleep(0.5)  # counted again after the event, and waiting
        after = await asyncio.to_thread(connections)
        for each in (events, *others):
            await each.aclose()
        return waiting - before, after - before, event

    waiting, after_event, event = asyncio.run(scenario())
    assert event is not None
    assert (waiting, after_event) == (2, 2)


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
        events = Events(rows_trigger(store_conn, poll_interval=0.1))
        await asyncio.sleep(1.0)  # listening, and counted several times
        before = await asyncio.to_thread(sessions)
        await asyncio.sleep(2.0)  # about twenty more counts
        opened = await asyncio.to_thread(sessions) - before
        await asyncio.to_thread(write_silently)
        event = await events.next(30)
        await events.aclose()
        return opened, event

    opened, event = asyncio.run(scenario())
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
        events = Events(rows_trigger(conn_id, poll_interval=60))
        pending = asyncio.ensure_future(events.next(20))
        await asyncio.sleep(1.0)  # listening, and counted once
        await asyncio.to_thread(write)
        event = await pending
        await events.aclose()
        return event

    event = asyncio.run(scenario())
    assert event is not None and event.payload["count"] == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_survives_a_postgresql_restart(
    store_conn: str, store_url: str, postgres_server: PostgresServer
) -> None:
    async def scenario() -> tuple[TriggerEvent | None, TriggerEvent | None]:
        events = Events(rows_trigger(store_conn, poll_interval=0.3))
        pending = asyncio.ensure_future(events.next(90))
        await asyncio.sleep(1.0)
        await asyncio.to_thread(postgres_server.restart, "immediate")
        quiet = None  # nothing matched across the restart: no event yet
        writer = await asyncio.to_thread(late_writer.start, store_url, "jobs", "after-restart", 1.0)
        event = await pending
        await asyncio.to_thread(writer.wait, 60)
        await events.aclose()
        return quiet, event

    _, event = asyncio.run(scenario())
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
        events = Events(rows_trigger(store_conn, poll_interval=60))
        await asyncio.sleep(1.0)  # listening, and counted once
        await asyncio.to_thread(postgres_server.restart, "immediate")
        await asyncio.sleep(3.0)  # back, and listened to again
        writer = await asyncio.to_thread(late_writer.start, store_url, "jobs", "after", 0.0)
        event = await events.next(30)
        await asyncio.to_thread(writer.wait, 60)
        await events.aclose()
        return event

    event = asyncio.run(scenario())
    assert event is not None and event.payload["count"] == 1


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
        events = Events(rows_trigger(store_conn, poll_interval=0.2))
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

    gaps = asyncio.run(scenario())
    assert max(gaps) < 1.0
