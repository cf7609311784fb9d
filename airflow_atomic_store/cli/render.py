"""Human-readable output: aligned columns, short durations, and nothing a terminal obeys.

Keys and values are user data: a control character or a bidirectional
override in a row could rewrite what the terminal shows, so every cell is
printed with non-printable characters escaped (``\\x1b``, ``\\u202e``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow_atomic_store.timestamps import format_timestamp


def safe(text: str) -> str:
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, timedelta):
        return duration(value)
    if isinstance(value, datetime):
        return format_timestamp(value)
    if isinstance(value, (dict, list)):
        return safe(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")))
    return safe(str(value))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Columns padded to their widest cell; numbers right-aligned; the last column not padded."""
    cells = [[cell(value) for value in row] for row in rows]
    numeric = [
        bool(rows)
        and all(isinstance(row[i], (int, float)) and not isinstance(row[i], bool) for row in rows)
        for i in range(len(headers))
    ]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        padded = [
            value.rjust(widths[i]) if numeric[i] else value.ljust(widths[i])
            for i, value in enumerate(values)
        ]
        return "  ".join(padded).rstrip()

    return [line(list(headers)), *(line(row) for row in cells)]


def fields(pairs: Sequence[tuple[str, Any]]) -> list[str]:
    """``name  value`` lines, names aligned."""
    width = max(len(name) for name, _ in pairs)
    return [f"{name.ljust(width)}  {cell(value)}" for name, value in pairs]


def duration(delta: timedelta) -> str:
    """``0.25s``, ``45s``, ``15m 3s``, ``2h 5m``, ``3d 4h``, ``2h``: the two largest units."""
    seconds = delta.total_seconds()
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 60:
        text = f"{seconds:.3f}" if seconds < 10 else f"{seconds:.0f}"
        return f"{sign}{text.rstrip('0').rstrip('.') if '.' in text else text}s"
    parts: list[str] = []
    remaining = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, remaining = divmod(remaining, size)
        if amount or parts:
            parts.append(f"{amount}{unit}")
    shown = parts[:2]
    if len(shown) == 2 and shown[1].startswith("0"):
        shown = shown[:1]
    return sign + " ".join(shown)
