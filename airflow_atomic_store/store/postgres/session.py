"""The store's PostgreSQL session settings: its timeout options, checked before any
I/O, and the bounds an index build runs under before the session gets its own back.

A session's timeouts need not be the store's: with none given, they are whatever
``ALTER DATABASE/ROLE … SET`` or the connection's ``options=-c …`` made them, and
nothing the store does may lose them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from typing import Any, Final

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from airflow_atomic_store.exceptions import SpecError

#: The store's PostgreSQL timeout options (seconds, each optional).
TIMEOUT_OPTIONS: Final = ("lock_timeout", "statement_timeout")
#: The longest timeout PostgreSQL takes (it counts in 32-bit milliseconds: about 24.8 days).
MAX_TIMEOUT_SECONDS: Final = 2_147_483

_CURRENT = "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
_SET = sql.SQL(
    "SELECT set_config('statement_timeout', {}, false), set_config('lock_timeout', {}, false)"
)


def parse_timeout(name: str, seconds: object) -> int | None:
    """A timeout option as whole milliseconds (None: not given), or a ``SpecError``.

    Checked when the store is made: a bad value used to surface at the first call,
    as a bare ``ValueError`` or a server error. A positive value under a millisecond
    rounds up to 1 ms, since to PostgreSQL 0 ms means no timeout at all.
    """
    if seconds is None:
        return None
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_SECONDS)
    ):
        raise SpecError(
            name,
            f"must be a positive number of seconds, at most {MAX_TIMEOUT_SECONDS} "
            f"(PostgreSQL's longest timeout, about 24 days), got {seconds!r}",
        )
    return max(1, round(seconds * 1000))


def parse_timeouts(options: Mapping[str, object]) -> dict[str, int | None]:
    """Each of ``TIMEOUT_OPTIONS`` in ``options`` as milliseconds (see ``parse_timeout``)."""
    return {name: parse_timeout(name, options.get(name)) for name in TIMEOUT_OPTIONS}


def is_idle(connection: psycopg.Connection[Any]) -> bool:
    """Whether the connection can take a statement: not closed, broken or mid-query.

    A statement interrupted by a Python exception (a signal handler's) leaves it
    ``ACTIVE``; a lost server leaves it ``UNKNOWN``.
    """
    return not connection.broken and connection.info.transaction_status == TransactionStatus.IDLE


@contextlib.contextmanager
def bounded(cursor: psycopg.Cursor[Any], statement: str, lock: str) -> Iterator[None]:
    """The block under these ``statement_timeout`` and ``lock_timeout`` values, then the
    session's own again, read before (not the store's options: see the module).

    A session left mid-statement is not touched: its connection is discarded
    (``PostgresConnection.cursor``), and a statement sent now would replace the
    exception on its way out.
    """
    had = cursor.execute(_CURRENT).fetchone()
    assert had is not None
    set_timeouts(cursor, statement, lock)
    try:
        yield
    finally:
        if is_idle(cursor.connection):
            set_timeouts(cursor, *had)


def set_timeouts(cursor: psycopg.Cursor[Any], statement: str, lock: str) -> None:
    """Set the session's timeouts to these values (``set_config``'s text: ``"2s"``, ``"0"``)."""
    cursor.execute(_SET.format(sql.Literal(statement), sql.Literal(lock)))
