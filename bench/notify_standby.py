"""The NOTIFY lock behind a synchronous standby: ``python -m bench.notify_standby``.

A transaction that ran ``NOTIFY`` (``pg_notify``) takes PostgreSQL's database-wide
notify lock (``pg_locks``: ``AccessExclusiveLock`` on ``object`` ``pg_database``/0)
before its commit and holds it until the commit returns, and with a synchronous
standby a commit returns when the standby has acknowledged it. So every notifying
write of the database waits for the ones before it, one standby round trip each.

This measures it: a primary and its synchronous standby on loopback
(devkit/standby.py), the replication stream through a relay that adds a round trip
of ``--rtt-ms`` (devkit/relay.py), and 1 or 4 writer processes doing ``put``s to
keys of their own for ``--seconds``, with the store's ``notify`` option at:

- ``writes`` (the default: every put notifies in its own statement),
- ``off`` (no notification),
- ``after`` (a design sketch, not the store's: ``notify="off"`` and then a second,
  notify-only transaction with ``synchronous_commit = local``, which holds the lock
  for a local flush instead of a standby round trip; notifications are not
  replicated, so nothing waits for the standby there).

While the 4-writer runs go, the parent samples ``pg_locks`` for sessions waiting
on the notify lock. Not part of ``make bench``: about 30 s per round trip asked.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.store.notify import channel_for
from bench.timing import percentile, progress
from devkit.processes import run_in_processes
from devkit.standby import StandbyPair

MODES = ("writes", "off", "after")
TABLE = "jobs"
_NOTIFY_LOCK_WAITERS = (
    "SELECT count(*) FILTER (WHERE NOT granted) FROM pg_locks WHERE locktype = 'object' "
    "AND classid = 'pg_database'::regclass AND objid = 0 AND mode = 'AccessExclusiveLock'"
)


@dataclass(frozen=True)
class Row:
    """One measured configuration."""

    rtt_ms: float
    mode: str
    writers: int
    writes_per_second: float
    p50_ms: float
    p99_ms: float
    lock_waiters_mean: float | None
    lock_waiters_max: int | None


def write_for(barrier: Any, url: str, mode: str, writer: int, seconds: float) -> list[float]:
    """Put rows for ``seconds``; return each write's latency in seconds."""
    store = AtomicStore(url, notify="off" if mode == "after" else mode)
    notifier = psycopg.connect(url, autocommit=False) if mode == "after" else None
    channel = channel_for("atomic_store_rows", TABLE)
    latencies: list[float] = []
    try:
        store.put(TABLE, f"warm-{writer}", {"n": 0})
        barrier.wait(timeout=60)
        end = time.monotonic() + seconds
        n = 0
        while (started := time.monotonic()) < end:
            store.put(TABLE, f"w{writer}-{n}", {"n": n})
            if notifier is not None:  # the notify after the write's commit, on its own
                notifier.execute("SET LOCAL synchronous_commit = local")
                notifier.execute("SELECT pg_notify(%s, '')", (channel,))
                notifier.commit()
            latencies.append(time.monotonic() - started)
            n += 1
    finally:
        store.close()
        if notifier is not None:
            notifier.close()
    return latencies


def _sample_waiters(url: str, stop: threading.Event, samples: list[int]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute(_NOTIFY_LOCK_WAITERS).fetchone()
            samples.append(int(row[0]) if row else 0)
            time.sleep(0.005)


def measure(pair: StandbyPair, rtt_ms: float, mode: str, writers: int, seconds: float) -> Row:
    url = pair.primary.url
    samples: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_waiters, args=(url, stop, samples), daemon=True)
    sampler.start()
    try:
        results = run_in_processes(
            write_for, [(url, mode, w, seconds) for w in range(writers)], timeout=seconds + 120
        )
    finally:
        stop.set()
        sampler.join(timeout=10)
    latencies = [latency for result in results for latency in result]
    return Row(
        rtt_ms=rtt_ms,
        mode=mode,
        writers=writers,
        writes_per_second=round(len(latencies) / seconds, 1),
        p50_ms=round(percentile(latencies, 50) * 1000, 2),
        p99_ms=round(percentile(latencies, 99) * 1000, 2),
        lock_waiters_mean=round(sum(samples) / len(samples), 2) if samples else None,
        lock_waiters_max=max(samples) if samples else None,
    )


def run(rtts_ms: list[float], writer_counts: list[int], seconds: float) -> list[Row]:
    rows: list[Row] = []
    for rtt in rtts_ms:
        with StandbyPair(synchronous=True, replication_delay=rtt / 2000) as pair:
            for writers in writer_counts:
                for mode in MODES:
                    progress(f"rtt {rtt} ms, {writers} writer(s), notify {mode}")
                    rows.append(measure(pair, rtt, mode, writers, seconds))
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| added round trip | writers | notify | writes/s | p50 ms | p99 ms | waiting on the lock (mean / max) |",
        "|---:|---:|---|---:|---:|---:|---|",
    ]
    for row in rows:
        waiting = f"{row.lock_waiters_mean} / {row.lock_waiters_max}"
        lines.append(
            f"| {row.rtt_ms:g} ms | {row.writers} | `{row.mode}` | {row.writes_per_second:g} "
            f"| {row.p50_ms:g} | {row.p99_ms:g} | {waiting} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.notify_standby", description=__doc__)
    parser.add_argument("--rtt-ms", type=float, nargs="+", default=[2.0, 10.0])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--json", help="also write the rows to this file")
    options = parser.parse_args(argv)
    rows = run(options.rtt_ms, options.writers, options.seconds)
    print(table(rows))
    if options.json:
        with open(options.json, "w") as out:
            json.dump([asdict(row) for row in rows], out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
