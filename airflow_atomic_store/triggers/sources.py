"""Where a trigger's counts and wake-ups come from, per backend; nothing here blocks the loop.

A :class:`RowSource` answers two questions for a :class:`~airflow_atomic_store.spec.watch.RowWatch`:
how many rows match now (``count``), and "wait until something may have changed, or
``timeout`` seconds" (``wait``).

* Counting is the store's own ``count`` (its where compiler, its claimable sets),
  run in a worker thread with ``asyncio.to_thread``: one SQL dialect for where
  clauses, and the triggerer's event loop never waits on the database.
* Waking is per backend. PostgreSQL: a ``psycopg.AsyncConnection`` that
  ``LISTEN``s on the table's channel (``store/notify.py``), which the store's
  writes notify when they commit; when that connection is lost, the source falls
  back to sleeping and tries to listen again every second of each later wait
  (``RECONNECT_SECONDS``), counting as soon as it listens. SQLite has no
  notifications: ``wait`` sleeps, so the trigger polls.

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

from airflow_atomic_store.exceptions import ConnectionConfigError
from airflow_atomic_store.hooks.atomic_store import (
    _missing_message,
    postgres_connect_args,
    store_from_connection,
)
from airflow_atomic_store.spec.conditions import evaluate, parse_where
from airflow_atomic_store.spec.watch import COUNT_CAP
from airflow_atomic_store.store import AtomicStore
from airflow_atomic_store.store.backend import counted

log = logging.getLogger(__name__)

#: After the first notification, how long more may arrive and be folded into one count.
COALESCE_SECONDS = 0.005
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
        raise ConnectionConfigError(_missing_message(conn_id)) from exc
    store = await asyncio.to_thread(store_from_connection, conn_id, conn)
    listen_args = await asyncio.to_thread(postgres_connect_args, conn_id, conn)
    channel = store.notify_channel(watch.table)
    if listen_args is None or channel is None:
        return PollingSource(store, watch)
    return ListeningSource(store, watch, listen_args, channel)


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
        watch = self._watch
        value = self._store.get(watch.table, key)
        return value is not None and evaluate(parse_where(watch.where), watch.match, value)

    async def wait(self, timeout: float) -> None:
        await asyncio.sleep(timeout)

    async def close(self) -> None:
        # In a thread: the store's lock may be held by a count still inside the store
        # (waiting on a lock, a connect in an outage), and closing inline would stall
        # the triggerer's whole event loop until it ends. Shielded, so a cancellation
        # (the triggerer cancels a trigger it no longer needs) cannot leave it open.
        await asyncio.shield(asyncio.to_thread(self._store.close))


class ListeningSource(PollingSource):
    """PostgreSQL: wakes on the table's notifications, with the sleep as the fallback."""

    def __init__(
        self, store: AtomicStore, watch: Watched, connect_args: dict[str, Any], channel: str
    ) -> None:
        super().__init__(store, watch)
        self._connect_args = connect_args
        self._channel = channel
        self._listener: Any = None  # psycopg.AsyncConnection while it listens
        self._unreachable = False  # failed to listen since it last listened: log once

    async def start(self) -> None:
        await self._listening()

    async def count(self) -> tuple[int, str | None]:
        import psycopg

        listener = self._listener
        if listener is None or listener.closed:
            return await super().count()  # through the store's connection, closed after
        try:
            if not await self._written(listener):
                return 0, None  # nothing wrote the table yet: nothing matches
            statement, params = await asyncio.to_thread(self._count_query)
            row = await (await listener.execute(statement, params)).fetchone()
        except psycopg.Error as exc:
            log.warning("atomic store trigger: lost the LISTEN connection (%s); polling", exc)
            await self._drop_listener()
            return await super().count()
        return counted(row)

    async def _written(self, listener: Any) -> bool:
        """Whether the table was written, asked on the listening connection while unknown.

        So a table nobody wrote yet costs no connection per count, and one written
        later (by any writer, notifying or not) is found at the next count.
        """
        import psycopg

        lookup = self._store.written_query(self._watch.table)
        if lookup is None:
            return True
        try:
            found = await (await listener.execute(*lookup)).fetchone()
        except psycopg.errors.UndefinedTable:  # no store schema yet: the store's count makes it
            return True
        return found is not None

    def _count_query(self) -> tuple[Any, list[Any]]:
        watch = self._watch
        try:
            return self._store.backlog_query(
                watch.table,
                watch.where,
                watch.match,
                at_most=COUNT_CAP,
                order_by=watch.order_by,
                direction=watch.direction,
            )
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
        import psycopg

        listener = self._listener
        if listener is None or listener.closed:
            # Retry within the wait, not once per wait: a server back after a second
            # would otherwise be listened to only after a whole poll_interval, and
            # writes meanwhile wait for that poll (59 s of 60 after a restart).
            deadline = time.monotonic() + timeout
            while await self._listening() is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                await asyncio.sleep(min(RECONNECT_SECONDS, left))
            return  # listening again: count at once, writes may have come meanwhile
        try:
            woken = False
            async for _ in listener.notifies(timeout=timeout, stop_after=1):
                woken = True
            if woken:  # fold a burst into one count: take what arrived just behind it
                # (not inside the loop above: each notifies() holds the connection's lock)
                async for _ in listener.notifies(timeout=COALESCE_SECONDS):
                    pass
        except psycopg.Error as exc:
            log.warning("atomic store trigger: lost the LISTEN connection (%s); polling", exc)
            await self._drop_listener()

    async def _listening(self) -> Any:
        """The listening connection, connected (and ``LISTEN`` issued) if it is not."""
        import psycopg
        from psycopg import sql

        if self._listener is not None and not self._listener.closed:
            return self._listener
        try:
            listener = await psycopg.AsyncConnection.connect(**self._connect_args, autocommit=True)
        except psycopg.Error as exc:
            self._cannot_listen("cannot LISTEN", exc)
            return None
        try:
            await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        except psycopg.Error as exc:
            await listener.close()
            self._cannot_listen("LISTEN failed", exc)
            return None
        if self._unreachable:
            log.info("atomic store trigger: listening again")
        self._listener, self._unreachable = listener, False
        return listener

    def _cannot_listen(self, what: str, exc: Exception) -> None:
        """One warning per outage (a wait retries every second), the rest at debug level."""
        log.log(
            logging.DEBUG if self._unreachable else logging.WARNING,
            "atomic store trigger: %s (%s); polling",
            what,
            exc,
        )
        self._unreachable = True

    async def _drop_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self._drop_listener()
