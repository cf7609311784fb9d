"""Where a trigger's counts and wake-ups come from, per backend; nothing here blocks the loop.

A :class:`RowSource` answers two questions for a :class:`~airflow_atomic_store.spec.watch.RowWatch`:
how many rows match now (``count``), and "wait until something may have changed, or
``timeout`` seconds" (``wait``).

* Counting is the store's own ``count`` (its where compiler, its claimable sets),
  run in a worker thread with ``asyncio.to_thread``: one SQL dialect for where
  clauses, and the triggerer's event loop never waits on the database.
* Waking is per backend, asked of it (``Backend.notifications``). PostgreSQL: the
  backend's listener (``store/postgres/listener.py``) ``LISTEN``s on the table's
  channel, which the store's writes notify when they commit; when that connection
  is lost, the source falls back to sleeping and tries to listen again every
  second of each later wait (``RECONNECT_SECONDS``), counting as soon as it
  listens. SQLite has no notifications: ``wait`` sleeps, so the trigger polls.

So on PostgreSQL a watched table holds one connection, the ``LISTEN`` one, and
counts on it too: the store compiles the count (its where compiler, its claimable
sets) and the statement runs on the listening connection between waits
(notifications that arrive meanwhile are kept by psycopg for the next wait). The
store's own connection is opened only when it must read its catalog of claimable
sets, to look up the row a fired trigger announced (``matches``: once each time
the head changed while the trigger is quiet), or while the listening connection
is lost, and closed after each use. On
SQLite it costs none between polls but an open file.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from airflow.providers.common.compat.connection import get_async_connection

from airflow_atomic_store.exceptions import ConnectionConfigError, StoreUnavailableError
from airflow_atomic_store.hooks.atomic_store import (
    missing_connection_message,
    postgres_connect_args,
    store_from_connection,
)
from airflow_atomic_store.spec.conditions import evaluate, parse_where
from airflow_atomic_store.spec.watch import COUNT_CAP
from airflow_atomic_store.store import AtomicStore
from airflow_atomic_store.store.notify import Listener, Notifications
from airflow_atomic_store.store.plumbing import plumbing

log = logging.getLogger(__name__)

#: While the listening connection is lost, how often a wait tries to listen again.
RECONNECT_SECONDS = 1.0


class RowSource(Protocol):
    async def start(self) -> None:
        """Be ready to wake: called before the first count, so no write falls between."""
        ...

    async def count(self) -> tuple[int, str | None]:
        """How many rows match (at most 1000), and the key the watched claim order takes next."""
        ...

    async def matches(self, key: str) -> bool:
        """Whether the row ``key`` still matches (False once it was claimed or deleted)."""
        ...

    async def wait(self, timeout: float) -> None: ...

    async def close(self) -> None: ...


async def open_source(conn_id: str, watch: Watched) -> RowSource:
    """The source for ``conn_id``'s backend; the connection is looked up asynchronously."""
    try:
        conn = await get_async_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException, whichever line it comes from
        if type(exc).__name__ != "AirflowNotFoundException":
            raise
        raise ConnectionConfigError(missing_connection_message(conn_id)) from exc
    store = await asyncio.to_thread(store_from_connection, conn_id, conn)
    notifications = plumbing(store).notifications
    listen_args = await asyncio.to_thread(postgres_connect_args, conn_id, conn)
    if listen_args is None or notifications is None:
        return PollingSource(store, watch)
    listener = notifications.listener(watch.table, listen_args)
    return ListeningSource(store, watch, notifications, listener)


class Watched(Protocol):
    """The trigger's (validated) spec as the user gave it: the store parses it again."""

    @property
    def table(self) -> str: ...

    @property
    def where(self) -> list[dict[str, Any]]: ...

    @property
    def match(self) -> str: ...

    @property
    def order_by(self) -> str: ...

    @property
    def direction(self) -> str: ...


class PollingSource:
    """Counts through the store in a thread; waking is a sleep (SQLite)."""

    def __init__(self, store: AtomicStore, watch: Watched) -> None:
        self._store = store
        self._watch = watch

    async def start(self) -> None:
        return None

    async def count(self) -> tuple[int, str | None]:
        return await asyncio.to_thread(self._count)

    def _count(self) -> tuple[int, str | None]:
        watch = self._watch
        backlog = self._store.backlog(
            watch.table,
            watch.where,
            watch.match,
            at_most=COUNT_CAP,
            order_by=watch.order_by,
            direction=watch.direction,
        )
        return backlog["count"], backlog["first"]

    async def matches(self, key: str) -> bool:
        return await asyncio.to_thread(self._matches, key)

    def _matches(self, key: str) -> bool:
        value = self._store.get(self._watch.table, key)
        return value is not None and self._satisfies(value)

    def _satisfies(self, value: dict[str, Any]) -> bool:
        return evaluate(parse_where(self._watch.where), self._watch.match, value)

    async def wait(self, timeout: float) -> None:
        await asyncio.sleep(timeout)

    async def close(self) -> None:
        # In a thread: the store's lock may be held by a count still inside the store
        # (waiting on a lock, a connect in an outage), and closing inline would stall
        # the triggerer's whole event loop until it ends. Shielded, so a cancellation
        # (the triggerer cancels a trigger it no longer needs) cannot leave it open.
        await asyncio.shield(asyncio.to_thread(self._store.close))


class ListeningSource(PollingSource):
    """Wakes on the table's notifications, with the sleep as the fallback (PostgreSQL)."""

    def __init__(
        self,
        store: AtomicStore,
        watch: Watched,
        notifications: Notifications,
        listener: Listener,
    ) -> None:
        super().__init__(store, watch)
        self._notifications = notifications
        self._listener = listener
        self._unreachable = False  # failed to listen since it last listened: log once

    async def start(self) -> None:
        await self._listening()

    async def count(self) -> tuple[int, str | None]:
        if not self._listener.listening:
            return await super().count()  # through the store's connection, closed after
        try:
            lookup = self._notifications.written_query(self._watch.table)
            if not await self._listener.written(lookup):
                return 0, None  # nothing wrote the table yet: nothing matches
            statement, params = await asyncio.to_thread(self._count_query)
            backlog = await self._listener.count(statement, params)
        except StoreUnavailableError as exc:
            log.warning("atomic store trigger: %s; polling", exc)
            return await super().count()
        return backlog.count, backlog.first

    async def matches(self, key: str) -> bool:
        """On the listening connection: a trigger waiting for one row's guard reads it on
        every wake-up, which through the store would open a connection each time."""
        if not self._listener.listening:
            return await super().matches(key)
        table = self._watch.table
        try:
            if not await self._listener.written(self._notifications.written_query(table)):
                return False  # nothing wrote the table yet: the row is not there
            statement, params = await asyncio.to_thread(self._value_query, key)
            row = await self._listener.fetch_one(statement, params)
        except StoreUnavailableError as exc:
            log.warning("atomic store trigger: %s; polling", exc)
            return await super().matches(key)
        return row is not None and self._satisfies(row[0])

    def _value_query(self, key: str) -> tuple[bytes, dict[str, Any]]:
        try:
            return self._notifications.value_query(self._watch.table, key)
        finally:  # reading the catalog may have opened it; it reconnects when next needed
            self._store.close()

    def _count_query(self) -> tuple[bytes, dict[str, Any]]:
        watch = self._watch
        try:
            selection = plumbing(self._store).queues.backlog_selection(
                watch.table,
                watch.where,
                watch.match,
                at_most=COUNT_CAP,
                order_by=watch.order_by,
                direction=watch.direction,
            )
            return self._notifications.count_query(selection)
        finally:  # reading the catalog may have opened it; it reconnects when next needed
            self._store.close()

    def _count(self) -> tuple[int, str | None]:
        try:
            return super()._count()
        finally:
            self._store.close()

    def _matches(self, key: str) -> bool:
        try:
            return super()._matches(key)
        finally:
            self._store.close()

    async def wait(self, timeout: float) -> None:
        if not self._listener.listening:
            # Retry within the wait, not once per wait: a server back after a second
            # would otherwise be listened to only after a whole poll_interval, and
            # writes meanwhile wait for that poll (59 s of 60 after a restart).
            deadline = time.monotonic() + timeout
            while not await self._listening():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                await asyncio.sleep(min(RECONNECT_SECONDS, left))
            return  # listening again: count at once, writes may have come meanwhile
        try:
            await self._listener.wait(timeout)
        except StoreUnavailableError as exc:
            log.warning("atomic store trigger: %s; polling", exc)

    async def _listening(self) -> bool:
        """Whether it listens now (connected and ``LISTEN`` issued, if it was not)."""
        if self._listener.listening:
            return True
        try:
            await self._listener.listen()
        except StoreUnavailableError as exc:
            # One warning per outage (a wait retries every second), the rest at debug level.
            level = logging.DEBUG if self._unreachable else logging.WARNING
            log.log(level, "atomic store trigger: %s; polling", exc)
            self._unreachable = True
            return False
        if self._unreachable:
            log.info("atomic store trigger: listening again")
        self._unreachable = False
        return True

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self._listener.close()
