"""Bulk verbs raced by separate OS processes, each with its own store and connection."""

from __future__ import annotations

from collections import Counter

from airflow_atomic_store import AtomicStore
from devkit.processes import run_in_processes
from tests.support import bulk_workers

PROCESSES = 8


def test_bulk_upserts_racing_over_overlapping_keys_insert_each_key_once(
    store: AtomicStore, store_url: str, backend: str
) -> None:
    # Process p enqueues keys [100p, 100p + 400): every key is wanted by up to four.
    wanted = [[f"item-{n:04d}" for n in range(100 * p, 100 * p + 400)] for p in range(PROCESSES)]
    reported = run_in_processes(
        bulk_workers.enqueue_overlapping,
        [(store_url, "q", keys, 40, seed) for seed, keys in enumerate(wanted)],
        timeout=300,
    )
    inserted_by = [dict(entry.split(":", 1)[::-1] for entry in entries) for entries in reported]
    counts = Counter(key for keys in inserted_by for key in keys)
    everything = {key for keys in wanted for key in keys}
    assert set(counts) == everything
    assert max(counts.values()) == 1, [key for key, n in counts.items() if n > 1][:10]
    rows = {row["key"]: row["value"] for row in store.query("q", limit=10_000)}
    assert set(rows) == everything
    for keys, by_process in zip(wanted, inserted_by, strict=True):
        assert set(by_process) <= set(keys)
        for key, who in by_process.items():  # the row holds the value of who inserted it
            assert rows[key] == {"by": who}
    owners = {value["by"] for value in rows.values()}
    # Several processes inserted (SQLite: see the guarded-update race below).
    assert len(owners) >= 2 or backend == "sqlite", "the processes did not overlap"


def test_bulk_guarded_updates_racing_apply_each_row_once(
    store: AtomicStore, store_url: str, backend: str
) -> None:
    keys = [f"job-{n:04d}" for n in range(400)]
    store.atomic_upsert_many("jobs", [(key, {"status": "pending", "n": 0}) for key in keys])
    won = run_in_processes(
        bulk_workers.finish_all_pending,
        [(store_url, "jobs", keys, seed) for seed in range(PROCESSES)],
        timeout=300,
    )
    winners = dict(entry.split(":", 1)[::-1] for entries in won for entry in entries)
    assert sum(len(entries) for entries in won) == len(keys)  # each row applied once, in all
    assert set(winners) == set(keys)
    for row in store.query("jobs", limit=1000):
        assert row["value"]["status"] == "done"
        assert row["value"]["n"] == 1  # the guard held for one update only
        assert row["value"]["doneBy"] == winners[row["key"]]
    # SQLite has one writer, and its busy handler lets the process holding the lock take
    # turn after turn while the others back off: there one process may win every row.
    overlapped = sum(1 for entries in won if entries) >= 2
    assert overlapped or backend == "sqlite", "the processes did not overlap"
