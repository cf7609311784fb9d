"""Which PostgreSQL notification channel a logical table's writes are announced on.

A trigger that waits for claimable rows ``LISTEN``s on the channel of its table,
and the store's writes to that table ``pg_notify`` it in the same statement, so a
notification is sent only when the write commits (PostgreSQL delivers
notifications at commit, never for a rolled-back transaction).

The channel is derived, not configured: a hash of the storage table and the
logical table, so that it is a plain identifier of fixed length (a logical table
name is any text, and a channel name is an identifier of at most 63 bytes) and
two stores in one database do not wake each other's triggers. Stores that share
a storage table name in different schemas of one database share channels: a
trigger then wakes for the other schema's writes too, counts, and goes back to
waiting, which costs a count and is never wrong.

Which writes notify is the store's ``notify`` option (:data:`NOTIFY_MODES`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, Protocol

from airflow_atomic_store.exceptions import SpecError, StoreUnavailableError

if TYPE_CHECKING:
    from airflow_atomic_store.store.contract import Backlog, Selection

#: The write families that notify, per ``notify`` mode. A claim marks rows in place, and
#: its new values match another filter only when a pipeline watches a claim's own marks;
#: "writes" keeps claims (the hot path) out of PostgreSQL's commit-time notify lock.
NOTIFY_MODES: Final[dict[str, frozenset[str]]] = {
    "writes": frozenset({"put", "update", "upsert"}),
    "all": frozenset({"put", "update", "upsert", "claim"}),
    "off": frozenset(),
}
DEFAULT_NOTIFY: Final = "writes"


def parse_notify(mode: object) -> frozenset[str]:
    if not isinstance(mode, str) or mode not in NOTIFY_MODES:
        raise SpecError("notify", f"must be one of {', '.join(NOTIFY_MODES)}, got {mode!r}")
    return NOTIFY_MODES[mode]


@lru_cache(maxsize=1024)
def channel_for(storage_table: str, table: str) -> str:
    """The channel of ``table`` in ``storage_table``: ``atomic_store_`` and 32 hex digits."""
    digest = hashlib.sha256(f"{storage_table}\x00{table}".encode()).hexdigest()
    return f"atomic_store_{digest[:32]}"


class Listener(Protocol):
    """One connection that ``LISTEN``s: the driver half of a process's notifier.

    River's driver listener: connect, listen, unlisten, ping, wait. It knows no
    subscribers; :class:`~airflow_atomic_store.store.notify.Notifier` (one per
    process and store) drives it from one task, so only that task ever uses the
    connection. Its methods raise
    :class:`~airflow_atomic_store.exceptions.StoreUnavailableError` when the
    connection cannot be made or is lost (it is then closed; :meth:`connect` again).
    """

    @property
    def connected(self) -> bool: ...

    async def connect(self) -> None: ...

    async def listen(self, channel: str) -> None: ...

    async def unlisten(self, channel: str) -> None: ...

    async def wait(self, timeout: float) -> set[str]:
        """The channels notified, as soon as one is (an empty set after ``timeout`` seconds).

        May be cancelled (the notifier cancels it to LISTEN): what it had received
        is kept for the next call, never lost."""
        ...

    async def ping(self) -> None:
        """A round trip: finds a connection that died silently."""
        ...

    async def channels(self) -> set[str]:
        """The channels the server says this session listens on."""
        ...

    async def close(self) -> None: ...


class Reader(Protocol):
    """One asynchronous connection for the waiters' shared reads: a count, rows by key.

    The reads look each logical table up by name in the statement itself, so they
    hold no table id that a reset of the store could make stale. They raise the
    store's errors (:class:`~airflow_atomic_store.exceptions.StoreUnavailableError`
    for a lost connection, which is then closed and made again on the next read).
    """

    async def count(self, selection: Selection) -> Backlog: ...

    async def get_changed(
        self, table: str, seen: Mapping[str, str | None]
    ) -> dict[str, tuple[dict[str, Any] | None, str | None]]:
        """``(value, version)`` of each of ``seen``'s keys whose row's version is not the
        one given (None: no row, or not read yet), in one statement; a row gone since
        answers ``(None, None)``. A version changes with every write of the row."""
        ...

    async def close(self) -> None: ...


class Notifications(Protocol):
    """A backend whose committed writes wake listeners (PostgreSQL ``LISTEN``/``NOTIFY``).

    River's ``SupportsListener``/``GetListener``: asked of a store
    (``AtomicStore.notifications()``), not assumed; None where writes do not
    announce themselves (SQLite: its waiters poll). A process makes one
    :class:`Listener` and one :class:`Reader` per store, whatever the number of
    waiters (``triggers/hub.py``).
    """

    def channel(self, table: str) -> str:
        """The channel that the writes to ``table`` notify."""
        ...

    def listener(self, connect_args: dict[str, Any]) -> Listener: ...

    def reader(self, connect_args: dict[str, Any]) -> Reader: ...


# -- one notifier per process and store (issue 40) --------------------------------------
#
# One ``LISTEN`` connection per process and store, shared by every waiter (River's notifier).
#
# A triggerer runs up to a thousand deferred waits in one asyncio loop. Each used
# to open its own listening connection, though all the waits on a table listen on
# one channel: a hundred waits took every connection PostgreSQL had. Here one
# :class:`Notifier` drives one :class:`~airflow_atomic_store.store.notify.Listener`
# (the backend's) from one task:
#
# * a channel is ``LISTEN``ed when its first subscriber comes and ``UNLISTEN``ed
#   when its last leaves; a notification calls the channel's subscribers' callbacks
#   (the shared probes, ``triggers/hub.py``), in the loop, without a database call;
# * the connection is watched: a wait that times out pings it (a connection that
#   died silently is found within ``PING_SECONDS``); when it is lost the notifier
#   connects again with exponential backoff and jitter, one attempt per step for
#   the whole process, never one per waiter. While it is down, :attr:`healthy` is
#   False and the probes' own polls carry the waits; when it is back, every channel
#   is listened to again and every subscriber is called once (writes may have
#   committed while nobody listened).
#
# Only the notifier's task uses the listener's connection: a subscription or a
# query asked meanwhile interrupts the task's wait (the listener keeps what it had
# received) and is run by the task itself.
#
# Nothing here knows the driver: it is the backend-neutral half of the backend's
# ``Notifications`` capability, as River keeps ``internal/notifier`` apart from
# each driver's listener.


log = logging.getLogger(__name__)

#: Seconds without a notification after which the connection is pinged.
PING_SECONDS: Final = 10.0
#: Seconds a ping may take before the connection counts as lost.
PING_TIMEOUT: Final = 5.0
#: Reconnection backoff: the first pause, the cap, and the factor between steps.
BACKOFF_FIRST: Final = 0.25
BACKOFF_CAP: Final = 5.0
BACKOFF_FACTOR: Final = 2.0

Callback = Callable[[], None]


class Backoff:
    """Exponential pauses with jitter (each between half and all of its step), capped.

    Jitter spreads the reconnections of many triggerer processes after a server
    restart, so they do not all knock at the same instant.
    """

    def __init__(
        self,
        first: float = BACKOFF_FIRST,
        cap: float = BACKOFF_CAP,
        factor: float = BACKOFF_FACTOR,
    ) -> None:
        self._first, self._cap, self._factor = first, cap, factor
        self._step = 0

    def next(self) -> float:
        ceiling = min(self._cap, self._first * self._factor**self._step)
        self._step += 1
        return ceiling * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self._step = 0


class Notifier:
    """Subscriptions per channel over one listener; see the module docstring."""

    def __init__(
        self,
        listener: Listener,
        *,
        ping_seconds: float = PING_SECONDS,
        backoff: Backoff | None = None,
    ) -> None:
        self._listener = listener
        self._ping_seconds = ping_seconds
        self._backoff = backoff or Backoff()
        self._subscribers: dict[str, set[Callback]] = {}
        self._listened: set[str] = set()  # what the server has, as far as we know
        self._pending: dict[str, list[asyncio.Future[None]]] = {}  # subscribers waiting
        self._requests: list[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]]] = []
        self._nudge = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._healthy = False
        self._lost = False  # a connection failed or was lost, and none made since
        self.reconnections = 0  # made after a loss (for tests and the benchmark)

    @property
    def healthy(self) -> bool:
        """Whether notifications flow now (connected, and every channel listened to)."""
        return self._healthy

    @property
    def channels(self) -> frozenset[str]:
        """The channels that have subscribers."""
        return frozenset(self._subscribers)

    async def subscribe(self, channel: str, callback: Callback) -> None:
        """Call ``callback`` on each notification of ``channel`` from now on.

        Returns once the channel is listened to, so no write that commits after it
        goes unnoticed; or at once while the connection is down (the caller's poll
        covers the outage, and the channel is listened to when it is back).
        """
        subscribers = self._subscribers.setdefault(channel, set())
        subscribers.add(callback)
        self._start()
        if channel in self._listened and self._healthy:
            return
        if self._lost and not self._healthy:
            return  # down since a failure: the caller polls; listened to when back
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(channel, []).append(waiter)
        self._nudge.set()
        await asyncio.shield(waiter)

    def unsubscribe(self, channel: str, callback: Callback) -> None:
        """Stop calling ``callback``; the channel is ``UNLISTEN``ed when it was the last."""
        subscribers = self._subscribers.get(channel)
        if subscribers is None:
            return
        subscribers.discard(callback)
        if not subscribers:
            del self._subscribers[channel]
            self._nudge.set()

    async def server_channels(self) -> set[str]:
        """The channels the server says the listening session listens on (tests, inspection)."""
        return await self._ask(self._listener.channels)

    async def close(self) -> None:
        """Stop listening and close the connection (even when cancelled meanwhile)."""
        task, self._task = self._task, None
        try:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        finally:
            self._healthy = False
            self._release_pending()
            for _, answer in self._requests:
                if not answer.done():
                    answer.set_exception(StoreUnavailableError("the notifier was closed"))
            self._requests.clear()
            await self._listener.close()

    # -- the task ------------------------------------------------------------------------------

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _ask(self, call: Callable[[], Awaitable[Any]]) -> Any:
        self._start()
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._requests.append((call, answer))
        self._nudge.set()
        return await answer

    async def _run(self) -> None:
        while True:
            if not self._listener.connected:
                try:
                    await self._listener.connect()
                except StoreUnavailableError as exc:
                    self._down(exc)
                    await self._pause()
                    continue
                self._listened = set()
            try:
                await self._apply()
                if not self._healthy:
                    self._up()
                channels = await self._wait()
                if channels is None:
                    continue  # nudged: something to apply
                if not channels:
                    await self._ping()
                for channel in channels:
                    for callback in tuple(self._subscribers.get(channel, ())):
                        callback()
            except StoreUnavailableError as exc:
                await self._listener.close()
                self._down(exc)
                await self._pause()
            except Exception as exc:  # a bug must not end the listening of every waiter
                log.exception("atomic store: the notifier failed; listening again")
                await self._listener.close()
                self._down(StoreUnavailableError(str(exc)))
                await self._pause()

    async def _ping(self) -> None:
        """A round trip, bounded: a connection whose peer vanished without a word (no
        reset) would otherwise hang until the operating system gives up on it."""
        try:
            await asyncio.wait_for(self._listener.ping(), PING_TIMEOUT)
        except asyncio.TimeoutError:
            raise StoreUnavailableError(f"no answer to a ping within {PING_TIMEOUT:g} s") from None

    async def _apply(self) -> None:
        """``LISTEN``/``UNLISTEN`` what the subscriptions changed; answer the queued asks."""
        for channel in sorted(set(self._subscribers) - self._listened):
            await self._listener.listen(channel)
            self._listened.add(channel)
        for channel in sorted(self._listened - set(self._subscribers)):
            await self._listener.unlisten(channel)
            self._listened.discard(channel)
        for channel in tuple(self._pending):
            if channel in self._listened or channel not in self._subscribers:
                for waiter in self._pending.pop(channel):
                    if not waiter.done():
                        waiter.set_result(None)
        while self._requests:
            call, answer = self._requests.pop(0)
            try:
                result = await call()
            except StoreUnavailableError:
                self._requests.insert(0, (call, answer))  # asked again once connected
                raise
            except Exception as exc:  # the caller's to see
                if not answer.done():
                    answer.set_exception(exc)
            else:
                if not answer.done():
                    answer.set_result(result)

    async def _wait(self) -> set[str] | None:
        """Notified channels (empty after ``ping_seconds``), or None when nudged."""
        self._nudge.clear()
        if self._requests or set(self._subscribers) != self._listened:
            return None
        waiting = asyncio.ensure_future(self._listener.wait(self._ping_seconds))
        nudged = asyncio.ensure_future(self._nudge.wait())
        try:
            done, _ = await asyncio.wait({waiting, nudged}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            nudged.cancel()
            if not waiting.done():
                waiting.cancel()  # the listener keeps what it received
            await asyncio.gather(nudged, waiting, return_exceptions=True)
        if waiting in done and not waiting.cancelled():
            return waiting.result()  # raises StoreUnavailableError if it was lost
        return None

    def _up(self) -> None:
        self._healthy = True
        self._backoff.reset()
        if self._lost:
            self._lost = False
            self.reconnections += 1
            log.info("atomic store: listening again on %d channel(s)", len(self._listened))
            # Writes may have committed while nobody listened: every subscriber looks.
            for subscribers in tuple(self._subscribers.values()):
                for callback in tuple(subscribers):
                    callback()

    def _down(self, exc: StoreUnavailableError) -> None:
        if self._healthy or not self._lost:
            log.warning("atomic store: not listening (%s); waiters poll until it is back", exc)
        self._healthy = False
        self._lost = True
        self._listened = set()
        self._release_pending()

    def _release_pending(self) -> None:
        """Subscribers waiting for a ``LISTEN`` go on (their poll covers the outage)."""
        pending, self._pending = self._pending, {}
        for waiters in pending.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def _pause(self) -> None:
        """The backoff's next pause; a subscription or ask meanwhile does not cut it short."""
        await asyncio.sleep(self._backoff.next())
