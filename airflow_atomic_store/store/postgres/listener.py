"""PostgreSQL's notifications capability: the listening connection and the readers' one.

A process that waits holds two asynchronous connections per store, whatever the
number of waiters: :class:`PostgresListener` (``LISTEN``, driven by the shared
:class:`~airflow_atomic_store.store.notify.Notifier`) and :class:`PostgresReader`
(the waiters' shared counts and row reads, ``triggers/hub.py``). The backend
hands them out (``PostgresDriver.listener``/``reader``) so that the code that
waits knows nothing of psycopg.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from airflow_atomic_store.exceptions import AtomicStoreError, StoreUnavailableError
from airflow_atomic_store.store.contract import Backlog, Selection
from airflow_atomic_store.store.postgres.connection import translate

if TYPE_CHECKING:
    from airflow_atomic_store.store.postgres.driver import PostgresDriver


#: Seconds a connection attempt may take unless the connection says otherwise: an
#: unreachable host must not hold every waiter for the operating system's TCP timeout.
CONNECT_TIMEOUT = 10


class ListenerLost(StoreUnavailableError):
    """The listening connection could not be made, or was lost."""


class PostgresListener:
    """One ``psycopg.AsyncConnection`` in autocommit that ``LISTEN``s on many channels."""

    def __init__(self, connect_args: dict[str, Any]) -> None:
        self._connect_args = {"connect_timeout": CONNECT_TIMEOUT, **connect_args}
        self._secrets = _secrets(connect_args)
        self._connection: psycopg.AsyncConnection[Any] | None = None
        #: Channels received but not yet handed out (kept across a cancelled wait).
        self._received: set[str] = set()

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.closed

    async def connect(self) -> None:
        if self.connected:
            return
        self._received = set()
        try:
            self._connection = await psycopg.AsyncConnection.connect(
                **self._connect_args, autocommit=True
            )
        except psycopg.Error as exc:
            raise ListenerLost(f"cannot connect to LISTEN ({self._text(exc)})") from exc

    async def listen(self, channel: str) -> None:
        await self._execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

    async def unlisten(self, channel: str) -> None:
        await self._execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(channel)))

    async def ping(self) -> None:
        await self._execute(sql.SQL("SELECT 1"))

    async def channels(self) -> set[str]:
        connection = self._live()
        try:
            cursor = await connection.execute("SELECT pg_listening_channels()")
            return {row[0] for row in await cursor.fetchall()}
        except psycopg.Error as exc:
            raise await self._lost(exc) from exc

    async def wait(self, timeout: float) -> set[str]:
        connection = self._live()
        try:
            if not self._received:
                async for notify in connection.notifies(timeout=timeout, stop_after=1):
                    self._received.add(notify.channel)
            if self._received:  # and whatever arrived just behind (one poll, no wait)
                async for notify in connection.notifies(timeout=0):
                    self._received.add(notify.channel)
        except psycopg.Error as exc:
            raise await self._lost(exc) from exc
        received, self._received = self._received, set()
        return received

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

    async def _execute(self, statement: sql.SQL | sql.Composed) -> None:
        connection = self._live()
        try:
            await connection.execute(statement)
        except psycopg.Error as exc:
            raise await self._lost(exc) from exc

    def _live(self) -> psycopg.AsyncConnection[Any]:
        if self._connection is None or self._connection.closed:
            raise ListenerLost("not listening")
        return self._connection

    async def _lost(self, exc: psycopg.Error) -> ListenerLost:
        await self.close()
        return ListenerLost(f"lost the LISTEN connection ({self._text(exc)})")

    def _text(self, exc: psycopg.Error) -> str:
        return str(translate(exc, self._secrets))


class PostgresReader:
    """One ``psycopg.AsyncConnection`` in autocommit for the waiters' shared reads.

    Opened on the first read and again after it is lost, one attempt per read; the
    statements are the backend's (``count_query``, ``get_changed_query``), run as they
    are: each looks its table up by name.
    """

    def __init__(self, connect_args: dict[str, Any], backend: PostgresDriver) -> None:
        self._connect_args = {"connect_timeout": CONNECT_TIMEOUT, **connect_args}
        self._secrets = _secrets(connect_args)
        self._backend = backend
        self._connection: psycopg.AsyncConnection[Any] | None = None
        self._connecting = asyncio.Lock()  # reads that find it closed make one connection

    async def count(self, selection: Selection) -> Backlog:
        statement, params = self._backend.count_query(selection)
        rows = await self._fetch(statement, params)
        return Backlog.from_row(rows[0] if rows else None)

    async def get_changed(
        self, table: str, seen: Mapping[str, str | None]
    ) -> dict[str, tuple[dict[str, Any] | None, str | None]]:
        statement, params = self._backend.get_changed_query(table, seen)
        rows = await self._fetch(statement, params)
        return {key: (value, version) for key, value, version in rows}

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

    async def _fetch(self, statement: bytes, params: Any) -> list[Any]:
        """Rows of a read; a connection found dead (terminated, idle-killed) is made again
        and the read made once more on it (it changes nothing), before an outage is told."""
        reused = self._connection is not None and not self._connection.closed
        try:
            return await self._fetch_once(statement, params)
        except StoreUnavailableError:
            if not reused:
                raise
        return await self._fetch_once(statement, params)

    async def _fetch_once(self, statement: bytes, params: Any) -> list[Any]:
        try:
            connection = await self._connected()
            cursor = await connection.execute(statement, params)
            return await cursor.fetchall()
        except psycopg.errors.UndefinedTable:
            return []  # no store here yet: nothing to count or read
        except psycopg.Error as exc:
            error: AtomicStoreError = translate(exc, self._secrets)
            if isinstance(error, StoreUnavailableError) or self._broken():
                await self.close()
            raise error from exc

    async def _connected(self) -> psycopg.AsyncConnection[Any]:
        async with self._connecting:
            if self._connection is None or self._connection.closed:
                self._connection = await psycopg.AsyncConnection.connect(
                    **self._connect_args, autocommit=True
                )
            return self._connection

    def _broken(self) -> bool:
        return self._connection is not None and self._connection.broken


def _secrets(connect_args: dict[str, Any]) -> tuple[str, ...]:
    password = connect_args.get("password")
    return (password,) if isinstance(password, str) and password else ()
