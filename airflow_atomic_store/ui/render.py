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

from airflow_atomic_store.inspection import QueueActivity

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


@dataclass(frozen=True)
class Column:
    """One stretch of the activity chart: a bar (finished per minute) and a backlog point."""

    x: float
    bar_y: float
    bar_height: float
    backlog_y: float
    label: str


@dataclass(frozen=True)
class ActivityChart:
    """The queue over a window as inline SVG: bars of items finished per minute (left
    scale) and the backlog as a line (right scale), both from the rows' timestamps."""

    title: str
    columns: tuple[Column, ...]
    bar_width: float
    backlog_line: str  # the polyline's points
    width: int
    height: int
    plot_top: int
    plot_bottom: int
    plot_left: int
    plot_right: int
    most_per_minute: str
    most_backlog: int
    first: str
    last: str
    finished: int
    backlog: int


def activity_chart(activity: QueueActivity, title: str) -> ActivityChart:
    left, right, top, bottom, width = 56, 56, 12, 112, 640
    area = width - left - right
    points = activity.points
    minutes = activity.bucket.total_seconds() / 60
    rates = [point.finished / minutes for point in points]
    most_rate = max(rates, default=0) or 1
    most_backlog = max((point.backlog for point in points), default=0) or 1
    step = area / max(len(points), 1)
    columns = []
    for index, (point, rate) in enumerate(zip(points, rates, strict=True)):
        height = (bottom - top) * rate / most_rate
        columns.append(
            Column(
                x=round(left + index * step, 2),
                bar_y=round(bottom - height, 2),
                bar_height=round(height, 2),
                backlog_y=round(bottom - (bottom - top) * point.backlog / most_backlog, 2),
                label=f"{format_moment(point.start)}: {point.finished} finished "
                f"({rate:.3g}/min), backlog {point.backlog}",
            )
        )
    line = " ".join(f"{c.x + step / 2:.2f},{c.backlog_y}" for c in columns)
    return ActivityChart(
        title=title,
        columns=tuple(columns),
        bar_width=round(max(step - 1, 0.5), 2),
        backlog_line=line,
        width=width,
        height=bottom + 22,
        plot_top=top,
        plot_bottom=bottom,
        plot_left=left,
        plot_right=width - right,
        # Two significant digits below 10 a minute, whole above: it fits the left margin.
        most_per_minute=f"{most_rate:.2g}" if most_rate < 10 else f"{round(most_rate)}",
        most_backlog=most_backlog,
        first=format_moment(points[0].start) if points else "",
        last=format_moment(points[-1].start + activity.bucket) if points else "",
        finished=sum(point.finished for point in points),
        backlog=points[-1].backlog if points else 0,
    )


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
