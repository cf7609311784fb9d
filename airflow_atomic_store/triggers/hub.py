"""What every waiter of a triggerer process shares, per store: one :class:`Hub`.

Airflow runs every deferred trigger of a triggerer process in one asyncio loop.
The waits of one store (the same resolved connection, so the same database and
storage table) share a hub, opened by the first and closed after the last:

* **one store** (:class:`~airflow_atomic_store.AtomicStore`), built once: its
  own connection reads the claimable sets' catalog when a watch's count is
  compiled (once per watch every ``COMPILE_SECONDS``, closed again after), and on
  SQLite runs the polls;
* where the backend's writes notify (PostgreSQL), **one notifier** (one ``LISTEN``
  connection, ``store/notify.py``) and **one reader** (one asynchronous
  connection for every count and row read). So a triggerer holds two
  connections per store however many wait: the listener and the reader (and the
  store's own for a few milliseconds when a watch is compiled);
* **shared probes** (``probes.py``): one per watch (table, filter, order) for
  the counts, one per table for the awaited rows (every awaited key in one
  statement), woken by their table's notifications and polling every interval.

Nothing here blocks the loop: the reads are asynchronous (PostgreSQL) or one
thread hop per probe and interval (SQLite, and a watch's compilation); nothing
is done in a thread per waiter. No driver is imported here: the backend's
capability (``AtomicStore.notifications()``) hands out the listener and reader.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

from airflow.providers.common.compat.connection import get_async_connection

from airflow_atomic_store.exceptions import ConnectionConfigError, StoreUnavailableError
from airflow_atomic_store.hooks.atomic_store import (
    missing_connection_message,
    postgres_connect_args,
    store_from_connection,
)
from airflow_atomic_store.spec.watch import COUNT_CAP
from airflow_atomic_store.store import AtomicStore
from airflow_atomic_store.store.contract import Selection
from airflow_atomic_store.store.notify import Backoff, Notifications, Notifier, Reader

#: Seconds a watch's compiled count (its claimable set chosen) is used before it is
#: compiled again: a set declared meanwhile serves the count within this time.
COMPILE_SECONDS: Final = 30.0

#: Seconds an Airflow connection, once looked up, serves the waits that start meanwhile.
LOOKUP_SECONDS: Final = 5.0
#: Seconds a shared read may take (queued behind the others on its connection included).
READ_TIMEOUT: Final = 30.0
#: Seconds a closing hub lets its probes' last reads end before closing their connection.
CLOSE_SECONDS: Final = 5.0

T = TypeVar("T")


class Watch:
    """What a count watches: a trigger's spec as the user gave it (the store parses it)."""

    __slots__ = ("direction", "match", "order_by", "table", "where")

    def __init__(
        self, table: str, where: list[dict[str, Any]], match: str, order_by: str, direction: str
    ) -> None:
        self.table, self.where, self.match = table, where, match
        self.order_by, self.direction = order_by, direction

    @property
    def identity(self) -> str:
        return json.dumps(
            [self.table, self.where, self.match, self.order_by, self.direction],
            sort_keys=True,
            separators=(",", ":"),
        )


class Hub:
    """One store's shared waiting in one process; see the module docstring."""

    def __init__(
        self,
        key: str,
        store: AtomicStore,
        notifications: Notifications | None,
        connect_args: dict[str, Any] | None,
    ) -> None:
        self.key = key
        self.store = store
        self._notifications = notifications if connect_args is not None else None
        self.notifier: Notifier | None = None
        self._reader: Reader | None = None
        if self._notifications is not None and connect_args is not None:
            self.notifier = Notifier(self._notifications.listener(connect_args))
            self._reader = self._notifications.reader(connect_args)
        self.users = 0
        self._probes: dict[tuple[str, str], SharedProbe] = {}  # (kind, identity)
        self._by_table: dict[str, dict[tuple[str, str], SharedProbe]] = {}
        self._stopping: set[SharedProbe] = set()  # left by their last waiter, maybe reading
        self._table_probes: dict[str, int] = {}
        self._subscribing: dict[str, asyncio.Future[None]] = {}
        self._callbacks: dict[str, Callable[[], None]] = {}
        self._thread = asyncio.Lock()  # the store is used by one thread at a time
        self._compiled: dict[str, tuple[float, Selection]] = {}
        self._reader_backoff = Backoff()
        self._reader_retry_at = 0.0
        self._reader_error: StoreUnavailableError | None = None

    @property
    def probes(self) -> list[SharedProbe]:
        return list(self._probes.values())

    @property
    def probe_keys(self) -> list[tuple[str, str]]:
        """``("count", watch)`` and ``("rows", table)`` of the probes that have waiters."""
        return list(self._probes)

    # -- joining -----------------------------------------------------------------------

    async def join_count(self, watch: Watch, interval: float) -> Waiter:
        """A waiter on ``watch``'s count: ``(count, first key)`` values."""
        identity = watch.identity

        async def read(keys: Mapping[str, str | None]) -> Mapping[str, tuple[Any, None]]:
            return {"": (await self._count(identity, watch), None)}

        return await self._join(watch.table, ("count", identity), "", interval, read)

    async def join_row(self, table: str, key: str, interval: float) -> Waiter:
        """A waiter on one row of ``table``: its value (None while it does not exist)."""

        async def read(keys: Mapping[str, str | None]) -> Mapping[str, tuple[Any, Any]]:
            return await self._rows(table, keys)

        return await self._join(table, ("rows", table), key, interval, read)

    async def read_row(self, table: str, key: str, interval: float) -> Any:
        """One row's value now, read with the table's other awaited rows."""
        waiter = await self.join_row(table, key, interval)
        try:
            while True:
                value = await waiter.observe(None)
                if value is not NOTHING:
                    return value
        finally:
            waiter.leave()

    async def _join(
        self,
        table: str,
        probe_key: tuple[str, str],
        key: str,
        interval: float,
        read: Read,
    ) -> Waiter:
        self._table_probes[table] = self._table_probes.get(table, 0) + 1
        try:
            await self._subscribed(table)
        except BaseException:
            self._table_left(table)
            raise
        probe = self._probes.get(probe_key)
        if probe is None:
            probe = SharedProbe(
                read, on_empty=lambda gone: self._probe_empty(table, probe_key, gone)
            )
            self._probes[probe_key] = probe
            self._by_table.setdefault(table, {})[probe_key] = probe
        return probe.join(key, interval, left=lambda: self._table_left(table))

    def _probe_empty(self, table: str, probe_key: tuple[str, str], probe: SharedProbe) -> None:
        if probe.running:
            self._stopping.add(probe)
            probe.when_stopped(lambda: self._stopping.discard(probe))
        if self._probes.get(probe_key) is probe:
            del self._probes[probe_key]
            self._compiled.pop(probe_key[1], None)
            on_table = self._by_table.get(table, {})
            on_table.pop(probe_key, None)
            if not on_table:
                self._by_table.pop(table, None)

    # -- notifications -----------------------------------------------------------------

    async def _subscribed(self, table: str) -> None:
        """The table's channel is listened to (or the notifier is down: probes poll)."""
        if self.notifier is None or self._notifications is None:
            return
        subscribing = self._subscribing.get(table)
        if subscribing is None:
            channel = self._notifications.channel(table)
            callback = self._callbacks[table] = self._woken(table)
            subscribing = asyncio.ensure_future(self.notifier.subscribe(channel, callback))
            self._subscribing[table] = subscribing
        await asyncio.shield(subscribing)

    def _woken(self, table: str) -> Callable[[], None]:
        def woken() -> None:
            if self.notifier is not None and self.notifier.healthy:
                self._reader_retry_at = 0.0  # the server answers again: read at once
            for probe in tuple(self._by_table.get(table, {}).values()):
                probe.request()

        return woken

    def _table_left(self, table: str) -> None:
        users = self._table_probes.get(table, 0) - 1
        if users > 0:
            self._table_probes[table] = users
            return
        self._table_probes.pop(table, None)
        self._subscribing.pop(table, None)
        callback = self._callbacks.pop(table, None)
        if self.notifier is not None and self._notifications is not None and callback:
            self.notifier.unsubscribe(self._notifications.channel(table), callback)

    # -- reads -------------------------------------------------------------------------

    async def _count(self, identity: str, watch: Watch) -> tuple[int, str | None]:
        if self._reader is None:  # SQLite: the store counts, in a thread
            backlog = await self._in_thread(
                self.store.backlog,
                watch.table,
                watch.where,
                watch.match,
                at_most=COUNT_CAP,
                order_by=watch.order_by,
                direction=watch.direction,
            )
            return backlog["count"], backlog["first"]
        selection = await self._selection(identity, watch)
        reader = self._reader
        counted = await self._read(lambda: reader.count(selection))
        return counted.count, counted.first

    async def _rows(
        self, table: str, seen: Mapping[str, str | None]
    ) -> Mapping[str, tuple[Any, str | None]]:
        """The awaited rows that changed since they were last read (PostgreSQL: only
        those, so a wake costs the rows it changed, not every awaited row); SQLite reads
        them all, in a thread."""
        if self._reader is None:
            rows = await self._in_thread(self.store.get_many, table, sorted(seen))
            return {key: (rows.get(key), None) for key in seen}
        reader = self._reader
        return await self._read(lambda: reader.get_changed(table, seen))

    async def _selection(self, identity: str, watch: Watch) -> Selection:
        """The watch's count, with its claimable set chosen (a catalog read): once per
        ``COMPILE_SECONDS`` per watch, for all its waiters."""
        compiled = self._compiled.get(identity)
        now = time.monotonic()
        if compiled is not None and now - compiled[0] < COMPILE_SECONDS:
            return compiled[1]
        selection = await self._in_thread(self._compile, watch)
        self._compiled[identity] = (time.monotonic(), selection)
        return selection

    def _compile(self, watch: Watch) -> Selection:
        """In a thread. The store's connection is closed again: it is needed once per
        watch every ``COMPILE_SECONDS``, so a waiting process holds two, not three."""
        try:
            return self.store.watch_selection(
                watch.table,
                watch.where,
                watch.match,
                at_most=COUNT_CAP,
                order_by=watch.order_by,
                direction=watch.direction,
            )
        finally:
            self.store.close()  # opened again, lazily, by the next compilation

    async def _read(self, read: Callable[[], Awaitable[T]]) -> T:
        """A read on the reader, or the last outage's error while its backoff lasts: in an
        outage the process tries the server once per backoff step, not once per probe."""
        if self._reader_error is not None and time.monotonic() < self._reader_retry_at:
            raise self._reader_error.with_traceback(None)
        try:
            try:
                result = await asyncio.wait_for(read(), READ_TIMEOUT)
            except asyncio.TimeoutError:
                # A connection whose peer vanished without a word: made again next time.
                if self._reader is not None:
                    await self._reader.close()
                raise StoreUnavailableError(
                    f"a read did not answer within {READ_TIMEOUT:g} s"
                ) from None
        except StoreUnavailableError as exc:
            self._reader_error = exc
            self._reader_retry_at = time.monotonic() + self._reader_backoff.next()
            raise
        self._reader_error = None
        self._reader_backoff.reset()
        return result

    async def _in_thread(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        async with self._thread:
            return await asyncio.to_thread(call, *args, **kwargs)

    async def close(self) -> None:
        """Close the listener, the reader and the store, all three even when cancelled
        meanwhile (the triggerer cancels a trigger that it no longer needs)."""
        await asyncio.shield(asyncio.ensure_future(self._close()))

    async def _close(self) -> None:
        try:
            stopping = [probe.stopped() for probe in (*self._stopping, *self._probes.values())]
            await asyncio.wait_for(asyncio.gather(*stopping), CLOSE_SECONDS)
        except asyncio.TimeoutError:
            pass  # a read stuck on the server: the connection closes under it
        finally:
            await self._close_connections()

    async def _close_connections(self) -> None:
        try:
            if self.notifier is not None:
                await self.notifier.close()
        finally:
            try:
                if self._reader is not None:
                    await self._reader.close()
            finally:
                # In a thread: the store's lock may be held by a read still inside the store.
                await asyncio.to_thread(self.store.close)


# -- the process's hubs ------------------------------------------------------------------

_HUBS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Hub]] = (
    weakref.WeakKeyDictionary()
)
_LOOKUPS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, tuple[float, asyncio.Future[tuple[Any, str]]]]
] = weakref.WeakKeyDictionary()
_OPENING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Future[Hub]]] = (
    weakref.WeakKeyDictionary()
)


@asynccontextmanager
async def hub_for(conn_id: str) -> AsyncIterator[Hub]:
    """The hub of ``conn_id``'s store in this event loop, held while the block runs."""
    hub = await _acquire(conn_id)
    try:
        yield hub
    finally:
        await _release(hub)


def open_hubs() -> list[Hub]:
    """This event loop's hubs (tests and the benchmark look at what they hold)."""
    return list(_HUBS.get(asyncio.get_running_loop(), {}).values())


async def _acquire(conn_id: str) -> Hub:
    conn, key = await _connection(conn_id)
    loop = asyncio.get_running_loop()
    hubs = _HUBS.setdefault(loop, {})
    opening = _OPENING.setdefault(loop, {})
    while True:
        hub = hubs.get(key)
        if hub is not None:
            hub.users += 1
            return hub
        pending = opening.get(key)
        if pending is None:
            pending = opening[key] = asyncio.ensure_future(_open(key, conn_id, conn))
        try:
            hub = await asyncio.shield(pending)
        finally:
            if pending.done() and opening.get(key) is pending:
                del opening[key]
        hubs.setdefault(key, hub)


async def _release(hub: Hub) -> None:
    hub.users -= 1
    if hub.users > 0:
        return
    hubs = _HUBS.get(asyncio.get_running_loop(), {})
    if hubs.get(hub.key) is hub:
        del hubs[hub.key]
    await hub.close()


async def _connection(conn_id: str) -> tuple[Any, str]:
    """The Airflow connection and its target (:func:`_target`), looked up once per ``LOOKUP_SECONDS`` for all the waits
    starting meanwhile: a thousand waits starting together looked it up a thousand
    times (about a millisecond each, on the loop)."""
    lookups = _LOOKUPS.setdefault(asyncio.get_running_loop(), {})
    cached = lookups.get(conn_id)
    if cached is None or time.monotonic() - cached[0] >= LOOKUP_SECONDS:
        cached = lookups[conn_id] = (time.monotonic(), asyncio.ensure_future(_look_up(conn_id)))
    try:
        return await asyncio.shield(cached[1])
    except BaseException:
        if cached[1].done() and lookups.get(conn_id) is cached:
            del lookups[conn_id]  # a failed lookup is not kept
        raise


async def _look_up(conn_id: str) -> tuple[Any, str]:
    try:
        conn = await get_async_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException, whichever line it comes from
        if type(exc).__name__ != "AirflowNotFoundException":
            raise
        raise ConnectionConfigError(missing_connection_message(conn_id)) from exc
    return conn, _target(conn)


def _target(conn: Any) -> str:
    """The resolved connection, as a digest: waits on the same database and storage
    table (an extra) share a hub whatever their connection ids."""
    fields = [
        getattr(conn, name, None)
        for name in ("conn_type", "host", "port", "schema", "login", "password", "extra")
    ]
    return hashlib.sha256(json.dumps(fields, default=str).encode()).hexdigest()


async def _open(key: str, conn_id: str, conn: Any) -> Hub:
    def build() -> Hub:
        store = store_from_connection(conn_id, conn)
        notifications = store.notifications()
        args = None if notifications is None else postgres_connect_args(conn_id, conn)
        return Hub(key, store, notifications, args)

    # May block: the hook builds the store, the provider may fetch an IAM token.
    return await asyncio.to_thread(build)


# -- shared probes (the waiters of one watch share one read) ------------------------------
#
# Shared probes: one read for every waiter on the same thing, however many wait.
#
# A :class:`SharedProbe` reads a set of keys in one call: the count of one watch
# (one key, ``""``), or the rows awaited on one table (one key per row). It reads
# when asked (a notification of its table, a waiter joining, the notifier back
# after an outage) and every poll interval (the smallest of its waiters'), never
# twice at once: a request made while a read runs is served by one more read
# after it, so a burst of N writes costs at most N reads and usually fewer, not
# one per write and waiter. The old triggers each counted on every notification
# of their table: N writes woke N waiters, N times N counts.
#
# Each waiter (:class:`Waiter`) sees the first read that *began after it joined*
# (so it never acts on a read older than itself), then only reads that changed
# its key's value, or an outage's start and end. A thousand row waits on one table
# are therefore one statement per wake, and a write wakes only the waiter whose
# row it changed. A waiter that wants to look again at the same value (a deadline,
# a re-arming clock) uses its own timeout.


#: Seconds at least between two reads of one probe while requests keep coming.
MIN_GAP: Final = 0.01
#: Waiters woken in one turn of the event loop (each then runs its trigger's step).
WAKE_CHUNK: Final = 50
#: What :meth:`Waiter.observe` returns when its timeout passes with nothing new.
NOTHING: Final = object()

#: A probe's read: given each key's version as last read (None: none yet), the
#: ``(value, version)`` of every key whose version differs. A key left out kept its
#: value; a read that knows no versions answers every key, with version None.
Read = Callable[[Mapping[str, "str | None"]], Awaitable[Mapping[str, tuple[Any, "str | None"]]]]


class Waiter:
    """One waiter's view of a probe: the value of its key, as the probe reads it."""

    __slots__ = ("_left", "_news", "_probe", "_signal", "interval", "key", "needs", "told")

    def __init__(
        self,
        probe: SharedProbe,
        key: str,
        needs: int,
        interval: float,
        left: Callable[[], None] | None = None,
    ) -> None:
        self._probe = probe
        self._left = left
        self.key = key
        self.interval = interval
        self.needs = needs  # the first read (ticket) that began after it joined
        self.told = False  # it was given a read (or an outage) since it joined
        self._news = False
        self._signal: asyncio.Future[None] | None = None

    def wake(self) -> None:
        self.told = True
        self._news = True
        if self._signal is not None and not self._signal.done():
            self._signal.set_result(None)

    async def observe(self, timeout: float | None) -> Any:
        """The key's value (None: no such row) from a read newer than the last one seen,
        or :data:`NOTHING` when ``timeout`` seconds pass first.

        Raises the probe's error while its reads fail (when told, and again at each
        timeout while the outage lasts): the caller decides how to wait it out.
        """
        if not self._news:
            signal = self._signal = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait({signal}, timeout=timeout)
            finally:
                self._signal = None
        error = self._probe.error
        if not self._news:
            if self.told and error is not None:
                raise error.with_traceback(None)
            return NOTHING
        self._news = False
        if error is not None:
            raise error.with_traceback(None)
        return self._probe.value(self.key)

    def leave(self) -> None:
        """Stop waiting (idempotent); ``left`` (given at joining) is called once."""
        self._probe.leave(self)
        left, self._left = self._left, None
        if left is not None:
            left()


class SharedProbe:
    """Reads the keys its waiters wait on; see the module docstring."""

    def __init__(self, read: Read, *, on_empty: Callable[[SharedProbe], None]) -> None:
        self._read = read
        self._on_empty = on_empty
        self._waiters: dict[str, set[Waiter]] = {}
        self._values: dict[str, Any] = {}
        self._versions: dict[str, str | None] = {}
        self._intervals: dict[float, int] = {}
        self.error: BaseException | None = None
        self._requested = 0  # tickets: a read takes the newest at its start
        self._last_join = 0  # the ticket the newest waiter needs
        self._finished = 0
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.reads = 0  # made so far (for tests and the benchmark)

    @property
    def waiters(self) -> int:
        return sum(len(waiters) for waiters in self._waiters.values())

    @property
    def answered(self) -> bool:
        """Every waiter has had a read that began after it joined."""
        return self._finished >= self._last_join

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def when_stopped(self, callback: Callable[[], None]) -> None:
        if self._task is not None:
            self._task.add_done_callback(lambda _: callback())

    async def stopped(self) -> None:
        """Once its task has ended (after its last waiter left)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def value(self, key: str) -> Any:
        return self._values.get(key)

    def join(self, key: str, interval: float, left: Callable[[], None] | None = None) -> Waiter:
        waiter = Waiter(self, key, self._requested + 1, interval, left)
        self._last_join = waiter.needs
        self._waiters.setdefault(key, set()).add(waiter)
        self._intervals[interval] = self._intervals.get(interval, 0) + 1
        self.request()  # its ticket: a read that begins after it joined
        return waiter

    def leave(self, waiter: Waiter) -> None:
        waiters = self._waiters.get(waiter.key)
        if waiters is None or waiter not in waiters:
            return
        waiters.discard(waiter)
        if not waiters:
            del self._waiters[waiter.key]
            self._values.pop(waiter.key, None)
            self._versions.pop(waiter.key, None)
        self._forget_interval(waiter.interval)
        if not self._waiters:
            # Not cancelled: a read in flight on the shared reader ends as it would (a
            # cancelled query makes the driver cancel it on the server, or drop the
            # connection every probe shares). Its task ends after it.
            self._wakeup.set()
            self._on_empty(self)

    def request(self) -> None:
        """Read again soon: after the read that runs now, if one does."""
        self._requested += 1
        self._wakeup.set()
        if self._waiters and (self._task is None or self._task.done()):
            self._task = asyncio.ensure_future(self._run())

    def _forget_interval(self, interval: float) -> None:
        users = self._intervals.get(interval, 0) - 1
        if users > 0:
            self._intervals[interval] = users
        else:
            self._intervals.pop(interval, None)

    def _interval(self) -> float:
        return min(self._intervals, default=60.0)

    async def _run(self) -> None:
        while self._waiters:
            if self._finished < self._requested:
                ticket = self._requested
                keys = {key: self._versions.get(key) for key in self._waiters}
                self.reads += 1
                started = time.monotonic()
                try:
                    values = await self._read(keys)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the waiters decide what an error means
                    self._finished = ticket
                    await self._fail(ticket, exc)
                else:
                    self._finished = ticket
                    await self._publish(ticket, keys, values)
                if self._finished < self._requested:
                    # Writes keep coming: read at most half the time, so the writers (and
                    # the loop) keep the other half; what arrives meanwhile joins the read.
                    await asyncio.sleep(max(MIN_GAP, time.monotonic() - started))
                continue
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), self._interval())
            except asyncio.TimeoutError:
                self._requested += 1  # the poll

    async def _publish(
        self, ticket: int, keys: Mapping[str, str | None], values: Mapping[str, tuple[Any, Any]]
    ) -> None:
        recovered, self.error = self.error is not None, None
        woken = []
        for key in keys:
            if key in values:
                value, self._versions[key] = values[key]
                changed = key not in self._values or self._values[key] != value
            else:  # its version did not move (or, never read, it has no row)
                value, changed = None, key not in self._values
            if changed:  # an unchanged value keeps its old object: the new one dies young
                self._values[key] = value
            for waiter in self._waiters.get(key, ()):
                if waiter.needs <= ticket and (changed or recovered or not waiter.told):
                    woken.append(waiter)
        await _wake(woken)

    async def _fail(self, ticket: int, exc: BaseException) -> None:
        began = self.error is None or type(self.error) is not type(exc)
        self.error = exc
        woken = [
            waiter
            for waiters in self._waiters.values()
            for waiter in waiters
            if waiter.needs <= ticket and (began or not waiter.told)
        ]
        await _wake(woken)


async def _wake(waiters: list[Waiter]) -> None:
    """Wake ``waiters`` a chunk at a time, letting the loop run between chunks: a
    thousand waiters woken by one read would otherwise run in one turn of the loop."""
    for start in range(0, len(waiters), WAKE_CHUNK):
        if start:
            await asyncio.sleep(0)
        for waiter in waiters[start : start + WAKE_CHUNK]:
            waiter.wake()
