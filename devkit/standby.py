"""A primary and its streaming standby on loopback: failover for tests and benchmarks.

    with StandbyPair(synchronous=True) as pair:
        url = pair.url()  # postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/atomic_store
                          #   ?target_session_attrs=read-write
        ...
        pair.fail_over()  # primary stopped -m immediate, standby promoted

The standby is a base backup of the primary (``pg_basebackup -R``). With
``synchronous=True`` the primary lists it in ``synchronous_standby_names``, set
*after* the backup: the standby's copy of the configuration then names no
standby, so once promoted it does not wait for one it does not have. Both run
with ``synchronous_commit=on`` (the throwaway server's default is off): a commit
the primary acknowledges has been flushed by the standby (synchronous) or has
merely been sent, perhaps (asynchronous).

``replication_delay`` puts a :class:`~devkit.relay.TcpRelay` between them that
holds the replication stream that many seconds each way, as a remote standby's
network does; :attr:`StandbyPair.replication` is that relay (None without one):
``hold_replies()`` on it stops the standby's WAL where it is (and, for a
synchronous standby, every commit). Nothing here imports pytest.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from devkit.postgres_server import PostgresServer, PostgresServerError
from devkit.relay import TcpRelay

__all__ = ["STANDBY_NAME", "StandbyPair"]

#: The standby's ``application_name``: what ``synchronous_standby_names`` lists.
STANDBY_NAME = "atomic_standby"
#: Durable, replicated commits (the throwaway server trades both away for speed).
_PAIR_SETTINGS = {"synchronous_commit": "on", "full_page_writes": "on"}
_WAIT = 30.0


class StandbyPair:
    """A primary (:attr:`primary`) and a streaming standby of it (:attr:`standby`).

    :param synchronous: the primary waits for the standby's flush before a commit returns.
    :param replication_delay: seconds the replication stream is held each way (a relay).
    :param dbname: the database created on the primary (and so on the standby).
    :param settings: more ``-c`` settings for both servers.
    """

    def __init__(
        self,
        *,
        synchronous: bool = True,
        replication_delay: float | None = None,
        dbname: str = "atomic_store",
        settings: dict[str, str] | None = None,
    ) -> None:
        combined = {**_PAIR_SETTINGS, **(settings or {})}
        self.synchronous = synchronous
        self.dbname = dbname
        self.primary = PostgresServer(dbname=dbname, settings=combined)
        self.standby = PostgresServer(dbname=dbname, settings=combined)
        self.replication: TcpRelay | None = None
        self._replication_delay = replication_delay
        self.promoted = False

    def start(self) -> StandbyPair:
        try:
            self.primary.start()
            upstream = self._port(self.primary)
            if self._replication_delay is not None:
                self.replication = TcpRelay(target_port=upstream, delay=self._replication_delay)
                upstream = self._port(self.replication.start())
            self.standby.start_as_standby(upstream, application_name=STANDBY_NAME)
            if self.synchronous:
                self.primary.execute(
                    f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'"
                )
                self.primary.execute("SELECT pg_reload_conf()")
            self.wait_streaming()
        except BaseException:
            self.stop()
            raise
        return self

    def url(
        self, dbname: str | None = None, *, primary_port: int | None = None, **query: Any
    ) -> str:
        """The multi-host URL of both servers; libpq takes the first that accepts writes.

        ``primary_port`` replaces the primary's port (a relay in front of it);
        ``query`` adds parameters (``connect_timeout=2``, ``application_name=...``).
        """
        first = primary_port if primary_port is not None else self._port(self.primary)
        hosts = f"127.0.0.1:{first},127.0.0.1:{self._port(self.standby)}"
        parameters = {"target_session_attrs": "read-write", **query}
        tail = "&".join(f"{name}={value}" for name, value in parameters.items())
        return f"postgresql://postgres@{hosts}/{dbname or self.dbname}?{tail}"

    def replication_state(self) -> tuple[str, str] | None:
        """The standby's ``(state, sync_state)`` as the primary sees it; None when not connected."""
        row = self._query_primary(
            "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
            (STANDBY_NAME,),
        )
        return None if row is None else (str(row[0]), str(row[1]))

    def wait_streaming(self, timeout: float = _WAIT) -> None:
        """Wait until the standby streams (as the synchronous standby, if it is one)."""
        wanted = ("streaming", "sync" if self.synchronous else "async")
        deadline = time.monotonic() + timeout
        while (state := self.replication_state()) != wanted:
            if time.monotonic() > deadline:
                raise PostgresServerError(
                    f"the standby is {state} after {timeout:.0f}s, not {wanted}\n"
                    f"--- standby log ---\n{self.standby.log_tail()}"
                )
            time.sleep(0.02)

    def wait_replayed(self, timeout: float = _WAIT) -> None:
        """Wait until the standby has replayed everything the primary has written so far."""
        row = self._query_primary("SELECT pg_current_wal_lsn()::text", ())
        assert row is not None
        deadline = time.monotonic() + timeout
        while True:
            replayed = self._query(
                self.standby,
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                (row[0],),
            )
            if replayed is not None and replayed[0]:
                return
            if time.monotonic() > deadline:
                raise PostgresServerError(f"the standby did not replay up to {row[0]}")
            time.sleep(0.01)

    def fail_over(self, mode: str = "immediate") -> float:
        """Stop the primary (``immediate``: a crash) and promote the standby; returns seconds."""
        began = time.monotonic()
        self.primary.shutdown(mode)
        self.standby.promote()
        self.promoted = True
        return time.monotonic() - began

    def stop(self) -> None:
        """Stop both servers (and the relay) and remove their directories; safe twice."""
        try:
            self.standby.stop()
        finally:
            try:
                if self.replication is not None:
                    self.replication.stop()
            finally:
                self.primary.stop()

    def __enter__(self) -> StandbyPair:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------

    @staticmethod
    def _port(server: PostgresServer | TcpRelay) -> int:
        if server.port is None:
            raise PostgresServerError(f"{server!r} has no port (not started)")
        return server.port

    def _query_primary(self, statement: str, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self._query(self.primary, statement, args)

    @staticmethod
    def _query(
        server: PostgresServer, statement: str, args: tuple[Any, ...]
    ) -> tuple[Any, ...] | None:
        import psycopg

        with psycopg.connect(
            server.url_for("postgres"), autocommit=True, connect_timeout=10
        ) as conn:
            return conn.execute(statement.encode(), args).fetchone()
