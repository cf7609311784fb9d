"""Eight processes on one store: no lock error surfaces, counts stay exact, first use is safe.

SQLite serialises writers on one file lock; with the default busy timeout (60 s)
a writer waits its turn instead of failing with "database is locked", so heavy
contention costs throughput, never correctness. (PostgreSQL's row-level
concurrency is exercised by tests/integration/test_concurrency.py.)

Concurrent first use extends tests/integration/test_concurrency.py (upsert as the
first call) to every primitive, ``ensure_claim_index`` included, as some
process's very first call on a fresh database: a SQLite file in a directory that
does not exist yet, or a fresh PostgreSQL role and schema.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from airflow_atomic_store import AtomicStore
from tests.reliability import workers
from tests.reliability.support import scaled
from tests.support.processes import run_in_processes

PROCESSES = 8


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_eight_processes_hammering_one_sqlite_file_see_no_lock_error_and_exact_counts(
    store: AtomicStore, store_url: str
) -> None:
    iterations = scaled(40, 400)
    queue = [f"q-{i:04d}" for i in range(PROCESSES * iterations // 2)]
    for key in queue:
        store.put("queue", key, {"status": "pending"})

    results = run_in_processes(
        workers.hammer,
        [(store_url, worker, iterations, 15) for worker in range(PROCESSES)],
        timeout=300,
    )

    total = PROCESSES * iterations
    assert store.get("counters", "hits") == {"n": total}
    own = store.query("own", limit=10_000)
    assert len(own) == total
    assert Counter(row["value"]["worker"] for row in own) == dict.fromkeys(
        range(PROCESSES), iterations
    )
    claimed = Counter(key for result in results for key in result["claimed"])
    assert not [key for key, n in claimed.items() if n > 1], "a row was claimed twice"
    assert set(claimed) == set(queue), "every queued row was claimed"
    rows = store.query("queue", limit=10_000)
    assert all(row["value"]["status"] == "done" for row in rows)
    assert all(row["value"]["completions"] == 1 for row in rows)


@pytest.fixture
def fresh_database_url(backend: str, store_url: str, tmp_path: Path) -> str:
    """A database nobody has opened; for SQLite, in a directory yet to be created."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'not' / 'yet' / 'there' / 'store.db'}"
    return store_url


@pytest.mark.parametrize("round_", range(scaled(1, 10)))
def test_every_primitive_can_be_the_first_call_on_a_fresh_database_in_eight_processes(
    fresh_database_url: str, round_: int
) -> None:
    assert len(workers.FIRST_CALLS) == PROCESSES
    counts = run_in_processes(
        workers.first_call,
        [(fresh_database_url, which) for which in workers.FIRST_CALLS],
        timeout=180,
    )
    assert sorted(counts) == list(range(1, PROCESSES + 1))
    with AtomicStore(fresh_database_url) as store:
        assert store.get("first", "count") == {"n": PROCESSES}
        assert store.get("first", "put") == {"by": "put"}
        assert store.get("first", "seed") == {"by": "seed"}
