"""Put a row into a store from a separate OS process, after a delay (``python -m``).

    python -m devkit.late_writer URL TABLE KEY DELAY JSON_VALUE [AFTER_RECEIPT]

What a producer on another machine does while a trigger or a deferred task waits.
It prints the wall-clock moment (``time.time()``) at which its write committed, which
the waiting-latency measure (``e2e/waiting_latency.py``) starts its clock from.
With ``AFTER_RECEIPT`` (an SQL ``LIKE`` pattern) the delay starts only once an
idempotency receipt whose key matches exists: a keyed claim has run and found
nothing, so the row cannot have been there for it (a loaded machine can take half
a minute to start a ``dag.test()`` task; a plain delay would race it). Imports
only the store, so it starts in a fraction of a second.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAIT_LIMIT = 300.0


def start(
    url: str,
    table: str,
    key: str,
    delay: float,
    value: dict | None = None,
    *,
    after_receipt: str | None = None,
    stdout: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start the writer process; the caller waits for it (``.wait()``).

    ``stdout=subprocess.PIPE`` to read the moment of the write (``.communicate()``).
    """
    command = [
        sys.executable,
        "-m",
        "devkit.late_writer",
        url,
        table,
        key,
        str(delay),
        json.dumps(value or {"status": "pending"}),
    ]
    return subprocess.Popen(
        [*command, *([after_receipt] if after_receipt else [])], cwd=ROOT, stdout=stdout
    )


def receipt_exists(url: str, pattern: str) -> bool:
    query = "SELECT 1 FROM atomic_store_rows_receipts WHERE idempotency_key LIKE {}"
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
            try:
                return connection.execute(query.format("?"), (pattern,)).fetchone() is not None
            except sqlite3.OperationalError:  # no store yet
                return False
    import psycopg

    with psycopg.connect(url) as connection:
        try:
            return connection.execute(query.format("%s"), (pattern,)).fetchone() is not None
        except psycopg.errors.UndefinedTable:
            return False


def main(argv: list[str]) -> None:
    url, table, key, delay, value, *after = argv
    from airflow_atomic_store import AtomicStore

    deadline = time.monotonic() + WAIT_LIMIT
    while after and not receipt_exists(url, after[0]):
        if time.monotonic() > deadline:
            raise SystemExit(f"no receipt like {after[0]!r} within {WAIT_LIMIT:g} s")
        time.sleep(0.1)
    time.sleep(float(delay))
    with AtomicStore(url) as store:
        store.put(table, key, json.loads(value))
    print(time.time(), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
