"""Canonical timestamps: ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC.

One fixed-width form means timestamps stored in JSON values order correctly
as plain strings, so ``claimedAt lt {{ atomic.ago(minutes=5) }}`` works on
both backends without any date parsing in SQL.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

CANONICAL_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_timestamp(moment: datetime) -> str:
    """Render an aware (or UTC-naive) datetime in the canonical form."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment.strftime(CANONICAL_FORMAT)


def parse_timestamp(text: str) -> datetime:
    """Parse a canonical timestamp back into an aware UTC datetime."""
    return datetime.strptime(text, CANONICAL_FORMAT).replace(tzinfo=timezone.utc)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def now() -> str:
    """The current time in the canonical form.

    ``isoformat`` writes the same text as :func:`format_timestamp` for any year
    from 1000 on, in half the time of ``strftime`` (a claim stamps every call).
    The ``+00:00`` an aware UTC time ends with becomes the ``Z``.
    """
    return utc_now().isoformat(timespec="microseconds")[:-6] + "Z"


def shifted(delta: timedelta) -> str:
    """Now plus ``delta`` (negative for the past) in the canonical form."""
    return format_timestamp(utc_now() + delta)


def series(count: int) -> list[str]:
    """``count`` canonical timestamps from now, one microsecond apart: the ``createdAt`` of
    a bulk call's rows, which keeps them in the order given (FIFO) whatever their keys.

    Each second's text is formatted once (``strftime`` per row cost 10,000 rows 15 ms).
    """
    start = utc_now().replace(tzinfo=None)
    first = start.replace(microsecond=0)
    offset = start.microsecond
    stamps: list[str] = []
    second, prefix = -1, ""
    for n in range(offset, offset + count):
        whole, micro = divmod(n, 1_000_000)
        if whole != second:
            second = whole
            prefix = (first + timedelta(seconds=whole)).strftime("%Y-%m-%dT%H:%M:%S.")
        stamps.append(f"{prefix}{micro:06d}Z")
    return stamps
