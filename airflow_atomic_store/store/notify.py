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

import hashlib
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, Protocol

from airflow_atomic_store.exceptions import SpecError

if TYPE_CHECKING:
    from airflow_atomic_store.store.requests import Backlog, Selection

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
    subscribers; :class:`~airflow_atomic_store.store.notifier.Notifier` (one per
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
