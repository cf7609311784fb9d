"""Clocks, percentiles and progress lines.

``time.monotonic`` is CLOCK_MONOTONIC on Linux, one clock for every process
on the machine, so workers' start and end stamps can be compared to get the
wall time of a whole multi-process drain.
"""

from __future__ import annotations

import sys
import time

_STARTED = time.monotonic()


def now() -> float:
    return time.monotonic()


def percentile(samples: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation; ``nan`` if empty."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def progress(message: str) -> None:
    """One line on stderr with the seconds since the harness started."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)
