"""CPU a drain costs per row: its claimer processes' own, and their server backends'.

On 2 cores a drain's rate is bounded by 2 CPU seconds over the CPU one row
costs, client and server together, so these two figures say why one drain
beats another (bench/analysis.md, the thirteenth run). The harness's
server runs on this machine, so a backend's CPU is read from ``/proc``; each
claimer process tags its connections with an ``application_name`` of its own
and finds its backends by it.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

_TICKS = os.sysconf("SC_CLK_TCK")


def tagged_url(url: str, tag: str) -> str:
    """``url`` whose connections report ``tag`` as their ``application_name``."""
    return f"{url}{'&' if '?' in url else '?'}application_name={tag}"


def backend_pids(url: str, tag: str) -> list[int]:
    """The server processes serving the connections tagged ``tag``."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (tag,)
        ).fetchall()
    return [pid for (pid,) in rows]


def _process_cpu(pid: int) -> float:
    """Seconds a process has run on a CPU.

    ``/proc/<pid>/schedstat`` counts nanoseconds, up to the process's last
    switch (a backend switches at every statement); ``/proc/<pid>/stat`` counts
    clock ticks (10 ms here), too coarse for a drain of a second, so it only
    serves where the kernel keeps no scheduler statistics.
    """
    try:
        with open(f"/proc/{pid}/schedstat") as schedstat:
            return int(schedstat.read().split()[0]) / 1e9
    except FileNotFoundError:
        if not os.path.exists(f"/proc/{pid}"):
            raise
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


class CpuMeter:
    """This process's CPU and its backends' between :meth:`start` and :meth:`stop`."""

    def __init__(self, backends: list[int]) -> None:
        self._backends = backends
        self._client = 0.0
        self._server: float | None = None

    def _server_now(self) -> float | None:
        """None when there is nothing to read: no backend, or a server on another machine."""
        if not self._backends:
            return None
        try:
            return sum(_process_cpu(pid) for pid in self._backends)
        except OSError:
            return None

    def start(self) -> None:
        self._client, self._server = time.process_time(), self._server_now()

    def stop(self) -> dict[str, Any]:
        client, server = time.process_time(), self._server_now()
        return {
            "client_cpu": client - self._client,
            "server_cpu": None if server is None or self._server is None else server - self._server,
        }


def per_row(results: list[dict[str, Any]], rows: int) -> dict[str, float]:
    """Client and server CPU µs per row over a drain's processes (when each measured both)."""
    if not rows or any(r.get("server_cpu") is None for r in results):
        return {}
    return {
        "client_us_per_row": sum(r["client_cpu"] for r in results) / rows * 1e6,
        "server_us_per_row": sum(r["server_cpu"] for r in results) / rows * 1e6,
    }
