"""Separate OS processes, each with its own store and connection, racing on shared rows."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from airflow_atomic_store import AtomicStore
from devkit.processes import run_in_processes
from tests.support import workers

PROCESSES = 8


def test_claim_never_returns_the_same_row_to_two_processes(
    store: AtomicStore, store_url: str
) -> None:
    rows = 10_000
    keys = [f"op-{i:05d}" for i in range(rows)]
    for key in keys:
        store.put("pending_ops", key, {"status": "pending", "payload": key})

    started = time.monotonic()
    won = run_in_processes(
        workers.drain_queue, [(store_url, "pending_ops", 25)] * PROCESSES, timeout=300
    )
    elapsed = time.monotonic() - started

    claims = Counter(key for batch in won for key in batch)
    duplicates = {key: n for key, n in claims.items() if n > 1}
    assert not duplicates, f"rows claimed more than once: {list(duplicates.items())[:10]}"
    assert set(claims) == set(keys)
    assert store.query("pending_ops", where=workers.PENDING, limit=1) == []
    busy = [batch for batch in won if batch]
    assert len(busy) >= 2, f"only {len(busy)} of {PROCESSES} processes claimed anything"
    for batch in won:  # each process saw its own claims in FIFO order
        assert batch == sorted(batch)
    print(f"drained {rows} rows with {PROCESSES} processes in {elapsed:.1f}s")


def test_concurrent_increments_lose_no_count(store: AtomicStore, store_url: str) -> None:
    per_process = 1_000
    store.atomic_upsert("counters", "hits", insert_value={"n": 0})
    seen = run_in_processes(
        workers.increment_counter,
        [(store_url, "counters", "hits", per_process)] * PROCESSES,
        timeout=300,
    )
    total = PROCESSES * per_process
    assert store.get("counters", "hits") == {"n": total}
    every_result = sorted(n for values in seen for n in values)
    assert every_result == list(range(1, total + 1))


def test_token_bucket_admits_exactly_its_capacity(store: AtomicStore, store_url: str) -> None:
    capacity, attempts = 100, 400
    seeded = store.atomic_upsert("rate_limits", "external-api", insert_value={"tokens": capacity})
    assert seeded["inserted"] is True
    wins = run_in_processes(
        workers.take_tokens,
        [(store_url, "rate_limits", "external-api", attempts // PROCESSES)] * PROCESSES,
    )
    left_after_each_win = sorted(n for values in wins for n in values)
    assert len(left_after_each_win) == capacity
    assert left_after_each_win == list(range(capacity))
    assert store.get("rate_limits", "external-api") == {"tokens": 0}


def test_only_one_of_many_concurrent_seeds_inserts(store: AtomicStore, store_url: str) -> None:
    contenders = 16
    results = run_in_processes(
        workers.seed_once, [(store_url, "leases", "dispatcher", me) for me in range(contenders)]
    )
    winners = [result for result in results if result["inserted"]]
    assert len(winners) == 1
    winner = winners[0]["value"]["owner"]
    assert all(result["value"] == {"owner": winner} for result in results)
    assert all(result["key"] == "dispatcher" for result in results)
    assert store.get("leases", "dispatcher") == {"owner": winner}


# Races, run again for more chances to interleave: one round in make test, three in
# make test-all.
@pytest.mark.parametrize(
    "round_", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)]
)
def test_first_use_of_a_fresh_store_is_safe_from_many_processes(
    store_url: str, round_: int
) -> None:
    results = run_in_processes(
        workers.seed_once,
        [(store_url, f"fresh-{round_}", "k", me, False) for me in range(PROCESSES)],
    )
    assert sum(result["inserted"] for result in results) == 1
