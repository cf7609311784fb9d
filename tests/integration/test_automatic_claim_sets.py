"""Sets the store declares by itself: one per queue filter for the whole store, at most
``MAX_AUTOMATIC_SETS`` of them, dropped once idle.

Red-team finding: with a set per table and filter, one logical table per run or
tenant, each claimed once, made one index per table (300 tables: 302 indexes on the
rows table), and every write of every table maintained all of them (18-24x slower on
PostgreSQL, 10x on SQLite). These tests count indexes, not time.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.store.claim_sets import MAX_AUTOMATIC_SETS
from devkit.processes import run_in_processes
from tests.integration.set_helpers import (
    PENDING,
    STALE,
    age_set,
    aged_queue,
    manual,
    set_indexes,
)
from tests.support import workers
from tests.support.physical import index_names


def test_the_store_declares_a_set_for_a_queue_filter_the_first_time_it_claims(store):
    aged_queue(store)
    assert store.claim_sets() == []
    assert store.atomic_claim("queue", where=PENDING, limit=1)["count"] == 1
    (declared,) = store.claim_sets("queue")
    assert declared["origin"] == "automatic" and declared["state"] == "ready"
    assert declared["where"] == PENDING
    assert declared["name"] in store.explain_claim("queue", where=PENDING, generic=True)
    # The stale-claim pass: its status condition forms a set, claimedAt stays bound.
    store.atomic_claim("queue", where=STALE, limit=1)
    recovery = [s for s in store.claim_sets("queue") if s["where"] == STALE[:1]]
    assert recovery and recovery[0]["name"] in store.explain_claim("queue", where=STALE)


@pytest.mark.parametrize(
    "where, match, mutations",
    [
        ([{"field": "status", "operator": "not_equals", "value": "done"}], "all", None),
        ([{"field": "n", "operator": "gt", "value": 3}], "all", None),
        ([{"field": "status", "operator": "starts_with", "value": "pend"}], "all", None),
        ([{"field": "status", "operator": "equals", "value": {"an": "object"}}], "all", None),
        ([{"field": "status", "operator": "equals", "value": 1.5}], "all", None),
        ([{"field": "status", "operator": "equals", "value": "x" * 300}], "all", None),
        ([PENDING[0], {"field": "n", "operator": "gt", "value": 3}], "any", None),
        # A filter on a field the claim never writes (a batch id) is not a queue's state.
        ([{"field": "batch", "operator": "equals", "value": "b-1"}], "all", None),
        (PENDING, "all", [{"field": "owner", "operation": "set", "value": "me"}]),
    ],
)
def test_an_unsafe_filter_is_never_declared_automatically(store, where, match, mutations):
    aged_queue(store, done=10, pending=3)
    store.atomic_claim("queue", where=where, match=match, mutations=mutations, limit=2)
    assert store.claim_sets() == []


def _status(value: str) -> list[dict[str, Any]]:
    return [{"field": "status", "operator": "equals", "value": value}]


def test_automatic_sets_can_be_turned_off_and_are_bounded_for_the_whole_store(store_url):
    with manual(store_url) as store:
        aged_queue(store, done=10, pending=3)
        store.atomic_claim("queue", where=PENDING, limit=1)
        assert store.claim_sets() == []
    with AtomicStore(store_url) as store:
        for number in range(MAX_AUTOMATIC_SETS + 3):  # one filter each, on two tables
            store.atomic_claim(f"queue-{number % 2}", where=_status(f"s{number}"))
        automatic = [s for s in store.claim_sets() if s["origin"] == "automatic"]
        assert len(automatic) == MAX_AUTOMATIC_SETS
        # Declared sets are the user's: they do not count against the bound.
        store.ensure_claim_index(table="queue", where=[{"field": "kind", "operator": "exists"}])
        assert len(store.claim_sets()) == MAX_AUTOMATIC_SETS + 1


def test_three_hundred_tables_claimed_once_share_one_set(store, store_url):
    """Red-team finding: 300 tables each claimed once made 300 indexes."""
    for number in range(300):
        store.put(f"run-{number}", "job", {"status": "pending"})
    before = index_names(store_url)
    for number in range(300):
        assert store.atomic_claim(f"run-{number}", where=PENDING)["count"] == 1
    (listed,) = store.claim_sets()
    assert index_names(store_url) == before | {listed["name"]}


def test_three_hundred_tables_with_a_filter_each_build_at_most_the_bound(store, store_url):
    """Each table claims with its own status value: the indexes every write of the
    store maintains stop at the bound, however many tables and filters there are."""
    for number in range(300):
        store.put(f"run-{number}", "job", {"status": f"ready-{number}"})
    before = index_names(store_url)
    for number in range(300):
        claimed = store.atomic_claim(f"run-{number}", where=_status(f"ready-{number}"))
        assert claimed["count"] == 1
    added = index_names(store_url) - before
    assert len(added) == MAX_AUTOMATIC_SETS
    assert added == {s["name"] for s in store.claim_sets()}


def test_an_idle_automatic_set_is_dropped_by_the_next_process_that_lists_the_sets(store_url):
    with AtomicStore(store_url) as first:
        aged_queue(first, done=5, pending=2)
        first.atomic_claim("queue", where=PENDING, limit=1)
        first.ensure_claim_index(table="queue", where=_status("retry"))
        automatic, declared = sorted(first.claim_sets(), key=lambda s: s["origin"] != "automatic")
        assert (automatic["origin"], declared["origin"]) == ("automatic", "declared")
    for name in (automatic["name"], declared["name"]):
        age_set(store_url, name)
    with AtomicStore(store_url) as second:  # a new process: an Airflow task
        assert second.atomic_claim("other", where=_status("new"))["count"] == 0
        names = {s["name"] for s in second.claim_sets()}
    assert automatic["name"] not in names | set_indexes(store_url)
    assert declared["name"] in names & set_indexes(store_url)  # declared sets stay


def test_a_claim_through_a_set_notes_its_use_so_it_never_turns_idle(store_url):
    """Uses are noted at most hourly: a set last noted two hours ago is noted again by
    the next process that claims through it."""
    with AtomicStore(store_url) as first:
        aged_queue(first, done=5, pending=3)
        first.atomic_claim("queue", where=PENDING, limit=1)
        (listed,) = first.claim_sets()
    age_set(store_url, listed["name"], seconds=7200)
    with AtomicStore(store_url) as second:
        (aged,) = second.claim_sets()
        assert aged["idle_seconds"] >= 7200
        assert second.atomic_claim("queue", where=PENDING, limit=1)["count"] == 1
        (noted,) = second.claim_sets()
    assert noted["name"] == listed["name"] and noted["idle_seconds"] < 60


def test_at_the_bound_an_idle_set_makes_room_for_a_new_filter(store, store_url):
    for number in range(MAX_AUTOMATIC_SETS):
        store.atomic_claim("queue", where=_status(f"s{number}"))
    oldest = next(s["name"] for s in store.claim_sets() if s["where"] == _status("s0"))
    store.atomic_claim("queue", where=_status("full"))
    assert not [s for s in store.claim_sets() if s["where"] == _status("full")]
    age_set(store_url, oldest)
    store._claim_sets._attempted.clear()  # type: ignore[attr-defined]  # no 60 s retry pause
    store.atomic_claim("queue", where=_status("full"))
    listed = {s["name"]: s["where"] for s in store.claim_sets()}
    assert len(listed) == MAX_AUTOMATIC_SETS and oldest not in listed
    assert _status("full") in listed.values()
    assert set_indexes(store_url) == set(listed)


def _drain_or_clean(barrier: Any, url: str, role: str) -> Any:
    """A drainer, or a process dropping every automatic set (idle after 0 s) while they drain."""
    if role == "drain":
        return workers.drain_queue(barrier, url, "queue", 5)
    import time

    with AtomicStore(url) as store:
        barrier.wait(timeout=60)
        dropped = 0
        while store.query("queue", where=PENDING, limit=1):
            dropped += len(store._backend.drop_idle_claim_sets(0.0))  # type: ignore[attr-defined]
            time.sleep(0.02)
        return dropped


def test_claims_stay_exactly_once_while_their_sets_are_dropped_as_idle(store_url):
    """No claim fails or goes wrong because a cleanup drops the set it runs through
    (a SQLite claim naming a dropped index claims again without it)."""
    with manual(store_url) as loader:
        for number in range(1500):
            loader.put("queue", f"{number:05}", {"status": "pending" if number % 3 else "done"})
    roles = ["clean", "drain", "drain", "drain"]
    results = run_in_processes(
        _drain_or_clean, [(url, role) for url, role in [(store_url, r) for r in roles]], timeout=300
    )
    claims = Counter(key for result in results[1:] for key in result)
    assert max(claims.values()) == 1
    assert len(claims) == 1000


def _declare(barrier: Any, url: str) -> str:
    with manual(url) as store:
        store.get("queue", "warm-up")
        barrier.wait()
        return store.ensure_claim_index(table="queue", where=PENDING)


def test_many_processes_declaring_one_set_agree_on_it(store_url):
    names = run_in_processes(_declare, [(store_url,)] * 4)
    assert len(set(names)) == 1


def _drain_or_declare(barrier: Any, url: str, role: str) -> Any:
    if role == "declare":
        return _declare(barrier, url)
    return workers.drain_queue(barrier, url, "queue", 7)


def test_claims_stay_exactly_once_while_a_set_is_built_concurrently(store, store_url):
    with manual(store_url) as loader:
        for number in range(3000):
            loader.put("queue", f"{number:05}", {"status": "pending" if number % 3 else "done"})
    roles = ["declare", "drain", "drain", "drain", "drain"]
    results = run_in_processes(
        _drain_or_declare, [(store_url, role) for role in roles], timeout=300
    )
    claims = Counter(key for result in results[1:] for key in result)
    assert max(claims.values()) == 1
    assert len(claims) == 2000
    assert results[0] in {s["name"] for s in store.claim_sets("queue")}
    assert store.query("queue", where=PENDING, limit=1) == []
