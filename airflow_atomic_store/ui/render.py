"""HTML out of the inspector's answers: templates, durations, JSON values, the status chart.

Every value on the page is user data (row keys and values, table names,
statuses, ``claimedBy``), so the Jinja environment escapes everything it
prints and the page runs no script at all: :data:`SECURITY_HEADERS` forbids
scripts, and any resource not from the page itself, even if escaping failed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

#: Sent with every page: no script may run, nothing loads from elsewhere, only Airflow may frame it.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

#: Bar colours of the statuses the recipes use; any other status is grey.
STATUS_COLOURS = {
    "pending": "#d08c00",
    "in_flight": "#1f6feb",
    "done": "#2da44e",
    "failed": "#cf222e",
    "dead": "#8250df",
}
_OTHER_COLOUR = "#6e7781"


def format_duration(delta: timedelta | None) -> str:
    """``timedelta(seconds=3725)`` -> ``"1 h 2 min"``: two units at most, as people read ages."""
    if delta is None:
        return "\N{EN DASH}"
    seconds = int(delta.total_seconds())
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    units = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
    parts: list[str] = []
    for name, size in units:
        amount, seconds = divmod(seconds, size)
        if amount or parts:
            parts.append(f"{amount} {name}")
        if len(parts) == 2:
            break
    parts = [part for part in parts if not part.startswith("0 ")] or ["0 s"]
    return sign + " ".join(parts)


def format_moment(moment: datetime | None) -> str:
    """A moment in UTC to the second: ``2026-12-01 14:20:00 UTC``."""
    if moment is None:
        return "\N{EN DASH}"
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_json(value: Any) -> str:
    """A row value as indented JSON (escaped by the template like any other text)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class Statuses:
    """The statuses a page lists, and what it leaves out (summed, never dropped silently)."""

    shown: dict[str, int]
    other_statuses: int
    other_rows: int


def largest(counts: dict[str, int], limit: int) -> Statuses:
    """At most ``limit`` statuses, the largest counts (ties by name), listed by name."""
    if len(counts) <= limit:
        return Statuses(counts, 0, 0)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    kept, rest = ranked[:limit], ranked[limit:]
    return Statuses(dict(sorted(kept)), len(rest), sum(count for _, count in rest))


@dataclass(frozen=True)
class Bar:
    label: str
    count: int
    width: float
    y: int
    colour: str


@dataclass(frozen=True)
class Chart:
    """A horizontal bar chart of counts per status, drawn as inline SVG."""

    bars: tuple[Bar, ...]
    width: int
    height: int
    label_width: int
    bar_area: int


def status_chart(counts: dict[str, int]) -> Chart:
    label_width, bar_area, row = 130, 360, 28
    biggest = max(counts.values(), default=0) or 1
    bars = tuple(
        Bar(
            label=status,
            count=count,
            width=round(bar_area * count / biggest, 1),
            y=index * row,
            colour=STATUS_COLOURS.get(status, _OTHER_COLOUR),
        )
        for index, (status, count) in enumerate(counts.items())
    )
    return Chart(bars, label_width + bar_area + 70, max(len(bars), 1) * row, label_width, bar_area)


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("airflow_atomic_store.ui", "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["duration"] = format_duration
    env.filters["as_json"] = format_json
    env.filters["moment"] = format_moment
    return env
