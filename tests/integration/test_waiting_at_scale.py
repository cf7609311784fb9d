"""Hundreds of deferred waits in one event loop, as a triggerer runs them (issue 40).

Every trigger here is built as its operator builds it and run in a task of its own
in one loop (``tests/support/trigger_events.py``). They share the process's hub
(``triggers/hub.py``): on PostgreSQL one ``LISTEN`` connection and one reader (the
store's own connection only while a watch is compiled), whatever their number, with
the store's role limited to four connections (those three and the writer's) so that
a connection per waiter would be refused; on SQLite one poll per watch and table. Rows are released by
another OS process (``tests/support/releaser.py``).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from airflow.triggers.base import TriggerEvent

from airflow_atomic_store import AtomicStore, timestamps
from airflow_atomic_store.triggers import ClaimWaitTrigger
from airflow_atomic_store.triggers.hub import open_hubs
from airflow_atomic_store.triggers.row_wait import RowWaitTrigger
from devkit.postgres_server import PostgresServer
from tests.support import releaser
from tests.support.specs import PENDING
from tests.support.trigger_events import Events

FREE = [{"field": "free", "operator": "equals", "value": True}]
#: Seconds between polls on PostgreSQL: longer than any test waits, so only the
#: notifications can wake its waiters in time. SQLite polls.
POLL = {"postgres": 60.0, "sqlite": 0.3}


def _role(store_url: str) -> str:
    return store_url.split("://", 1)[1].split("@", 1)[0]


def _connections(server: PostgresServer, role: str) -> int:
    with psycopg.connect(server.url_for("atomic_store"), autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (role,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def _slots(store: AtomicStore, count: int) -> None:
    for n in range(count):
        store.put("slots", f"slot-{n}", {"free": False})
    store.put("claims", "done", {"status": "done"})


def _row_wait(conn_id: str, n: int, poll: float, **kwargs: Any) -> RowWaitTrigger:
    return _reinflated(
        RowWaitTrigger(
            conn_id=conn_id,
            table="slots",
            key=f"slot-{n}",
            where=FREE,
            poll_interval=poll,
            **kwargs,
        )
    )


def _claim_wait(conn_id: str, poll: float, table: str = "claims") -> ClaimWaitTrigger:
    return _reinflated(
        ClaimWaitTrigger(conn_id=conn_id, table=table, where=PENDING, poll_interval=poll)
    )


def _reinflated(trigger: Any) -> Any:
    """As the triggerer gets it: re-created from what ``serialize()`` stored."""
    _, kwargs = trigger.serialize()
    return type(trigger)(**kwargs)


async def _all_joined(count: int, within: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        probes = [probe for hub in open_hubs() for probe in hub.probes]
        if sum(p.waiters for p in probes) == count and all(p.answered for p in probes):
            return
        assert loop.time() < deadline, "the waiters did not all start waiting"
        await asyncio.sleep(0.05)


def test_hundreds_of_waits_in_one_loop_share_the_listener_and_all_wake(
    backend: str,
    store_conn: str,
    store_url: str,
    store: AtomicStore,
    request: pytest.FixtureRequest,
) -> None:
    """300 guarded updates (a row each) and 300 claims (one filter) wake on 301 writes.

    PostgreSQL: the store's role may hold four connections; the waiters hold two
    (and another client of the role still connects), and the writes cost the
    shared probes about one read each, not one per waiter.
    """
    rows = claims = 300
    poll = POLL[backend]
    _slots(store, rows)
    server: PostgresServer | None = None
    if backend == "postgres":
        server = request.getfixturevalue("postgres_server")
        server.execute(f'ALTER ROLE "{_role(store_url)}" CONNECTION LIMIT 4')
    store.close()

    async def scenario() -> tuple[list[TriggerEvent | None], int | None, int, int]:
        waits = [Events(_row_wait(store_conn, n, poll)) for n in range(rows)]
        waits += [Events(_claim_wait(store_conn, poll)) for _ in range(claims)]
        try:
            await _all_joined(rows + claims)
            hubs = len(open_hubs())
            probes = [p for hub in open_hubs() for p in hub.probes]
            held = None
            if server is not None:
                held = await asyncio.to_thread(_connections, server, _role(store_url))
                await asyncio.to_thread(_another_client, store_url)
            reads = sum(p.reads for p in probes)
            writer = await asyncio.to_thread(releaser.start, store_url, rows)
            events = await asyncio.gather(*(each.next(60) for each in waits))
            assert await asyncio.to_thread(writer.wait, 60) == 0
            return events, held, sum(p.reads for p in probes) - reads, hubs
        finally:
            for each in waits:
                await each.aclose()

    events, held, reads, hubs = asyncio.run(scenario())
    statuses = [None if e is None else e.payload["status"] for e in events]
    assert statuses == ["matches"] * rows + ["rows"] * claims
    assert hubs == 1  # and in it, one probe per watch and table
    if backend == "postgres":
        assert held == 2
        assert reads <= 2 * (rows + 1) + 10  # about one per write, never one per waiter


def _another_client(store_url: str) -> None:
    with psycopg.connect(store_url) as other:
        other.execute("SELECT 1")


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_terminating_the_listening_connection_mid_wait_still_wakes_every_waiter(
    store_conn: str, store_url: str, store: AtomicStore, postgres_server: PostgresServer
) -> None:
    """Every connection of the waiters is terminated; the rows are released after it.
    Their poll is a minute away: only listening again (and the look every waiter
    takes then) wakes them in time."""
    rows = 100
    _slots(store, rows)
    store.close()
    role = _role(store_url)

    async def scenario() -> tuple[list[TriggerEvent | None], int]:
        waits = [Events(_row_wait(store_conn, n, POLL["postgres"])) for n in range(rows)]
        waits.append(Events(_claim_wait(store_conn, POLL["postgres"])))
        try:
            await _all_joined(rows + 1)
            notifier = open_hubs()[0].notifier
            assert notifier is not None
            await asyncio.to_thread(
                postgres_server.execute,
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'",
                dbname="atomic_store",
            )
            writer = await asyncio.to_thread(releaser.start, store_url, rows)
            events = await asyncio.gather(*(each.next(40) for each in waits))
            assert await asyncio.to_thread(writer.wait, 60) == 0
            return events, notifier.reconnections
        finally:
            for each in waits:
                await each.aclose()

    events, reconnections = asyncio.run(scenario())
    statuses = [None if e is None else e.payload["status"] for e in events]
    assert statuses == ["matches"] * rows + ["rows"]
    assert reconnections >= 1


def test_a_waiter_that_leaves_unsubscribes_and_the_last_unlistens_its_channel(
    backend: str, store_conn: str, store: AtomicStore
) -> None:
    """Two waits on ``slots`` (one times out, one is cancelled) and one on ``other``:
    ``slots`` is listened to until its last waiter left; when every waiter is gone
    the hub closes (its connections with it)."""
    _slots(store, 2)
    store.close()
    poll = POLL[backend]

    async def channels() -> set[str] | None:
        hub = open_hubs()[0]
        if hub.notifier is None:
            return None
        return await hub.notifier.server_channels()

    def probes() -> set[str]:
        return {kind_and_table(p) for hub in open_hubs() for p in hub.probe_keys}

    def kind_and_table(key: tuple[str, str]) -> str:
        return key[1] if key[0] == "rows" else "count"

    async def scenario() -> list[Any]:
        seen: list[Any] = []
        deadline = timestamps.shifted(timedelta(seconds=1.5))
        timing_out = Events(_row_wait(store_conn, 0, poll, deadline=deadline))
        cancelled = Events(_row_wait(store_conn, 1, poll))
        staying = Events(_claim_wait(store_conn, poll, table="other"))
        await _all_joined(3)
        seen.append((await channels(), probes()))
        event = await timing_out.next(30)
        seen.append(None if event is None else event.payload["status"])
        await asyncio.sleep(0.2)
        seen.append((await channels(), probes()))
        await cancelled.aclose()
        await asyncio.sleep(0.2)
        seen.append((await channels(), probes()))
        await staying.aclose()
        await timing_out.aclose()
        seen.append(len(open_hubs()))
        return seen

    both, status, one_left, none_left, hubs = asyncio.run(scenario())
    assert status == "timeout"
    assert both[1] == one_left[1] == {"slots", "count"}
    assert none_left[1] == {"count"}
    assert hubs == 0
    notifications = store.notifications()
    if notifications is not None:  # PostgreSQL: what the listening session has, says the server
        slots, other = notifications.channel("slots"), notifications.channel("other")
        assert both[0] == one_left[0] == {slots, other}
        assert none_left[0] == {other}
    else:
        assert both[0] is None
