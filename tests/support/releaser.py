"""Release slot rows and add one pending job, from a separate OS process (``python -m``).

    python -m tests.support.releaser URL COUNT

What other workers do while many deferred tasks wait in one triggerer: each of
the ``COUNT`` rows ``slots/slot-N`` (``{"free": false}``) is released with a
guarded update (``free`` set to true), one after another, then one pending row
``claims/job`` is put. Imports only the store, so it starts in a fraction of a second.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TAKEN = [{"field": "free", "operator": "equals", "value": False}]
RELEASE = [{"field": "free", "operation": "set", "value": True}]


def start(url: str, count: int) -> subprocess.Popen[bytes]:
    """Start the releasing process; the caller waits for it (``.wait()``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.releaser", url, str(count)], cwd=ROOT
    )


def main(argv: list[str]) -> None:
    url, count = argv
    from airflow_atomic_store import AtomicStore

    with AtomicStore(url) as store:
        for n in range(int(count)):
            store.atomic_update("slots", f"slot-{n}", where=TAKEN, mutations=RELEASE)
        store.put("claims", "job", {"status": "pending"})


if __name__ == "__main__":
    main(sys.argv[1:])
