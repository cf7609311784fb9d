"""A trigger's PostgreSQL connection: ``LISTEN`` on a table's channel, count between waits.

The backend hands one out (``PostgresBackend.listener``) so that the code that
waits (``triggers/sources.py``) knows nothing of the driver: it sees
:class:`ListenerLost` when the connection is gone and falls back to polling.
psycopg keeps notifications that arrive while a count runs for the next wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

from airflow_atomic_store.exceptions import StoreUnavailableError
from airflow_atomic_store.store.contract import Backlog

#: After the first notification, how long more may arrive and be folded into one count.
COALESCE_SECONDS = 0.005


class ListenerLost(StoreUnavailableError):
    """The listening connection could not be made, or was lost."""


class PostgresListener:
    """One ``psycopg.AsyncConnection`` in autocommit that listens on ``channel``."""

    def __init__(self, connect_args: dict[str, Any], channel: str) -> None:
        self._connect_args = connect_args
        self._channel = channel
        self._connection: psycopg.AsyncConnection[Any] | None = None

    @property
    def listening(self) -> bool:
        return self._connection is not None and not self._connection.closed

    async def listen(self) -> None:
        """Connect and ``LISTEN``, unless listening already; :class:`ListenerLost` if not."""
        if self.listening:
            return
        try:
            connection = await psycopg.AsyncConnection.connect(
                **self._connect_args, autocommit=True
            )
        except psycopg.Error as exc:
            raise ListenerLost(f"cannot LISTEN ({exc})") from exc
        try:
            await connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        except psycopg.Error as exc:
            await connection.close()
            raise ListenerLost(f"LISTEN failed ({exc})") from exc
        self._connection = connection

    async def written(self, lookup: tuple[bytes, Mapping[str, Any]] | None) -> bool:
        """Whether the catalog ``lookup`` (``Notifications.written_query``) finds the table.

        So a table nobody wrote yet costs no connection per count, and one written
        later (by any writer, notifying or not) is found at the next count.
        """
        if lookup is None:
            return True
        try:
            return await self._fetch_one(*lookup) is not None
        except psycopg.errors.UndefinedTable:  # no store schema yet: the store's count makes it
            return True
        except psycopg.Error as exc:
            raise await self._lost(exc) from exc

    async def count(self, statement: bytes, params: Mapping[str, Any]) -> Backlog:
        """Run a count statement (``Notifications.count_query``) on this connection."""
        return Backlog.from_row(await self.fetch_one(statement, params))

    async def fetch_one(self, statement: bytes, params: Mapping[str, Any]) -> Any:
        try:
            return await self._fetch_one(statement, params)
        except psycopg.Error as exc:
            raise await self._lost(exc) from exc

    async def wait(self, timeout: float) -> None:
        """Until a notification (a burst folded into one) or ``timeout`` seconds."""
        connection = self._live()
        try:
            woken = False
            async for _ in connection.notifies(timeout=timeout, stop_after=1):
                woken = True
            if woken:  # take what arrived just behind it
                # (not inside the loop above: each notifies() holds the connection's lock)
                async for _ in connection.notifies(timeout=COALESCE_SECONDS):
                    pass
        except psycopg.Error as exc:
            raise await self._lost(exc) from exc

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

    async def _fetch_one(self, statement: bytes, params: Mapping[str, Any]) -> Any:
        return await (await self._live().execute(statement, params)).fetchone()

    def _live(self) -> psycopg.AsyncConnection[Any]:
        if self._connection is None or self._connection.closed:
            raise ListenerLost("not listening")
        return self._connection

    async def _lost(self, exc: psycopg.Error) -> ListenerLost:
        await self.close()
        return ListenerLost(f"lost the LISTEN connection ({exc})")
