"""Shared probes: one read for every waiter on the same thing, however many wait.

A :class:`SharedProbe` reads a set of keys in one call: the count of one watch
(one key, ``""``), or the rows awaited on one table (one key per row). It reads
when asked (a notification of its table, a waiter joining, the notifier back
after an outage) and every poll interval (the smallest of its waiters'), never
twice at once: a request made while a read runs is served by one more read
after it, so a burst of N writes costs at most N reads and usually fewer, not
one per write and waiter. The old triggers each counted on every notification
of their table: N writes woke N waiters, N times N counts.

Each waiter (:class:`Waiter`) sees the first read that *began after it joined*
(so it never acts on a read older than itself), then only reads that changed
its key's value, or an outage's start and end. A thousand row waits on one table
are therefore one statement per wake, and a write wakes only the waiter whose
row it changed. A waiter that wants to look again at the same value (a deadline,
a re-arming clock) uses its own timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

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
