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
    """A connection that listens on one table's channel and counts between waits.

    Its methods raise :class:`~airflow_atomic_store.exceptions.StoreUnavailableError`
    when the connection cannot be made or is lost; the next :meth:`listen` tries again.
    """

    @property
    def listening(self) -> bool: ...

    async def listen(self) -> None: ...

    async def written(self, lookup: tuple[bytes, Mapping[str, Any]] | None) -> bool: ...

    async def count(self, statement: bytes, params: Mapping[str, Any]) -> Backlog: ...

    async def fetch_one(self, statement: bytes, params: Mapping[str, Any]) -> Any:
        """A statement's first row (None when it has none), on the listening connection."""
        ...

    async def wait(self, timeout: float) -> None: ...

    async def close(self) -> None: ...


class Notifications(Protocol):
    """A backend whose committed writes wake listeners (PostgreSQL ``LISTEN``/``NOTIFY``).

    River's ``SupportsListener``: asked of a backend (``Backend.notifications``),
    not assumed. A trigger listens with the backend's own :class:`Listener` and
    runs its counts on the listener's connection.
    """

    def listener(self, table: str, connect_args: dict[str, Any]) -> Listener:
        """A listener on ``table``'s channel, connecting with ``connect_args``."""
        ...

    def count_query(self, selection: Selection) -> tuple[bytes, dict[str, Any]]:
        """The backend's count statement and parameters, to run on a listener."""
        ...

    def value_query(self, table: str, key: str) -> tuple[bytes, dict[str, Any]]:
        """The backend's read of one row's value, to run on a listener."""
        ...

    def written_query(self, table: str) -> tuple[bytes, dict[str, Any]] | None:
        """A statement returning a row once something wrote ``table``; None when
        :meth:`count_query` needs no catalog read for it (the table's id is known)."""
        ...
