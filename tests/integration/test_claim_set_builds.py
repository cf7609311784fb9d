"""Claimable-set builds across processes on PostgreSQL, where a build takes time and
other processes see it: a claim waits for the live process that builds its set, and
builds it at once when that process dies; the ``record_timestamp`` index's give-up is
remembered for every process.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.spec import parse_where
from devkit.processes import run_in_processes
from tests.integration.set_helpers import PENDING, aged_queue, manual
from tests.support.physical import PHYSICAL_TABLE, index_names

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.parametrize("backend", ["postgres"], indirect=True),
]

BUILD_SECONDS = 1.5  # how long the stand-in builder below keeps its build running


def _build_slowly_or_claim(barrier: Any, url: str, role: str) -> Any:
    """``builder``: what a process building the queue's set does, slowed down; or a claim."""
    from airflow_atomic_store.spec.claim_sets import automatic_claim_set
    from airflow_atomic_store.store.claim_defaults import DEFAULT_WRITTEN
    from airflow_atomic_store.store.postgres import claim_sets, schema, set_catalog
    from airflow_atomic_store.store.postgres.set_locks import build_lock, set_build_lock

    with manual(url) as store:
        store.get("queue", "warm-up")  # the schema exists before either role starts
        if role == "claim":
            barrier.wait(timeout=60)
            time.sleep(0.3)  # the builder holds its set's lock by now
            with AtomicStore(url) as claimer:  # automatic sets on, as by default
                started = time.monotonic()
                claimed = claimer.atomic_claim("queue", where=PENDING, limit=5)
                return time.monotonic() - started, [row["key"] for row in claimed["claimed"]]
        claim_set = automatic_claim_set(parse_where(PENDING), "all", "created_at", DEFAULT_WRITTEN)
        assert claim_set is not None
        name = claim_set.index_name(PHYSICAL_TABLE)
        predicate = claim_sets.predicate(store._backend._sql.where, claim_set)  # type: ignore[attr-defined]
        create = claim_sets.create_index(PHYSICAL_TABLE, name, claim_set, predicate)
        with psycopg.connect(url, autocommit=True) as builder:
            cursor = builder.cursor()
            with (
                set_build_lock(cursor, claim_set, wait=True),
                build_lock(cursor, wait=True),
            ):
                set_catalog.record(
                    cursor, schema.sets_table(PHYSICAL_TABLE), name, claim_set, "automatic"
                )
                barrier.wait(timeout=60)
                time.sleep(BUILD_SECONDS)
                claim_sets.run_ddl(cursor, create)
        return name


def test_a_claim_waits_for_another_process_building_its_set_and_claims_through_it(store, store_url):
    aged_queue(store, done=500, pending=20)
    name, (waited, keys) = run_in_processes(
        _build_slowly_or_claim, [(store_url, "build"), (store_url, "claim")], timeout=120
    )
    assert keys == [f"{number:05}" for number in range(500, 505)]
    assert waited >= BUILD_SECONDS - 0.3 - 0.1  # it waited for the build, not walked around it
    assert {s["name"]: s["state"] for s in store.claim_sets()} == {name: "ready"}


def test_a_sets_lock_shows_only_that_sets_build_in_progress(store, store_url):
    """A claim waiting for its set asks about that set: another set's build is not
    waited for, and a builder that died holds nothing."""
    from airflow_atomic_store.spec.claim_sets import parse_claim_set
    from airflow_atomic_store.store.postgres.set_locks import set_build_lock

    backend = store._backend
    pending, other_set = (
        parse_claim_set([{"field": "status", "operator": "equals", "value": v}], "all", "createdAt")
        for v in ("pending", "retry")
    )
    with psycopg.connect(store_url, autocommit=True) as other:
        with set_build_lock(other.cursor(), pending, wait=False) as held:
            assert held
            assert backend.build_in_progress(pending) is True
            assert backend.build_in_progress(other_set) is False
        assert backend.build_in_progress(pending) is False
        # hashtext() of some identities is negative: its oid form must still match.
        negative = next(
            candidate
            for candidate in (
                parse_claim_set(
                    [{"field": "n", "operator": "equals", "value": n}], "all", "createdAt"
                )
                for n in range(100)
            )
            if other.execute("SELECT hashtext(%s) < 0", (candidate.identity,)).fetchone()[0]
        )
        with set_build_lock(other.cursor(), negative, wait=False):
            assert backend.build_in_progress(negative) is True
    assert backend.build_in_progress(pending) is False  # its session is gone


# -- a builder that dies mid-build ------------------------------------------------------------


def _die_mid_build(barrier: Any, url: str, role: str) -> Any:
    """``writer`` holds a transaction open, so the builder's ``CREATE INDEX CONCURRENTLY``
    waits; once the claimer waits for that build, the writer terminates the builder's
    session and commits. ``builder`` and ``claimer`` each claim the queue once."""
    from airflow_atomic_store.store.postgres import claim_sets

    claim_sets.AUTOMATIC_LOCK_WAIT = "60s"  # the builder waits for the writer, not 2 s
    if role == "writer":
        with psycopg.connect(url) as conn:
            conn.execute(f"UPDATE {PHYSICAL_TABLE} SET value = value WHERE key = 'x'".encode())
            barrier.wait(timeout=60)
            pid = None
            deadline = time.monotonic() + 60
            while pid is None and time.monotonic() < deadline:
                time.sleep(0.05)
                row = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX%%' "
                    "AND datname = current_database()"
                ).fetchone()
                pid = row[0] if row else None
            time.sleep(1.5)  # the claimer is waiting for that build now
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            conn.rollback()
            return pid
    with AtomicStore(url) as store:
        store.get("queue", "warm-up")
        barrier.wait(timeout=60)
        if role == "claimer":
            time.sleep(0.5)  # the builder's build is under way
        started = time.monotonic()
        try:
            keys = [row["key"] for row in store.atomic_claim("queue", where=PENDING)["claimed"]]
        except Exception as exc:
            return {"error": repr(exc)}
        seconds = time.monotonic() - started
        states = [s["state"] for s in store.claim_sets()]
        return {"keys": keys, "seconds": seconds, "states": states}


def test_a_claim_whose_builder_died_mid_build_builds_the_set_at_once(store, store_url):
    """Red-team finding: the claims that had waited for a builder that died went on
    unindexed for RETRY_SECONDS (60 s), each walking the whole history; a claim now
    sees the builder's set lock gone and builds the set itself."""
    aged_queue(store, done=3000, pending=20)
    store.put("other", "x", {"n": 0})
    killed, built, claimed = run_in_processes(
        _die_mid_build,
        [(store_url, "writer"), (store_url, "builder"), (store_url, "claimer")],
        timeout=120,
    )
    assert killed is not None, (built, claimed)
    assert "error" in built  # its session was terminated mid-build
    assert claimed["keys"] == [f"{number:05}" for number in range(3000, 3010)]
    assert claimed["states"] == ["ready"]  # built by the claim, not left "building"
    assert claimed["seconds"] < 15
    ((name, valid),) = [(s["name"], s["state"] == "ready") for s in store.claim_sets()]
    assert valid and name in index_names(store_url)


# -- the record_timestamp index's give-up is remembered across processes (PostgreSQL) ------


def _order_by_record_timestamp(_barrier: Any, url: str, bound: float) -> tuple[int, list[str]]:
    """One process (an Airflow task) ordering by ``recordTimestamp`` under a build bound of
    ``bound`` seconds; how many record-index builds it started, and the newest key."""
    from airflow_atomic_store.store import claim_sets as policy
    from airflow_atomic_store.store.postgres import claim_sets as postgres_sets

    policy.AUTOMATIC_BUILD_SECONDS = bound
    builds = []
    build = postgres_sets.build_concurrently

    def counted(*args: Any, **kwargs: Any) -> Any:
        builds.append(args[2])
        return build(*args, **kwargs)

    postgres_sets.build_concurrently = counted  # type: ignore[assignment]
    with AtomicStore(url) as store:
        newest = store.query("queue", order_by="recordTimestamp", direction="desc", limit=1)
    return len(builds), [row["key"] for row in newest]


def test_a_record_index_build_that_was_too_slow_is_not_tried_again_by_another_process(
    store, store_url
):
    """Each Airflow task is a new process: one remembered only in the process that gave up
    made every task wait out the bound again on a build that was then dropped."""
    record_index = f"{PHYSICAL_TABLE}_record_idx"
    aged_queue(store, done=3000, pending=10)
    (first,) = run_in_processes(_order_by_record_timestamp, [(store_url, 0.001)], timeout=120)
    assert first == (1, ["03009"])  # tried, gave up (1 ms), answered unindexed
    assert record_index not in index_names(store_url)
    (second,) = run_in_processes(_order_by_record_timestamp, [(store_url, 0.001)], timeout=120)
    assert second == (0, ["03009"])  # the give-up is in the catalog: not tried again
    assert record_index not in {s["name"] for s in store.claim_sets()}  # no claimable set
    # Clearing the give-up lets the next process build it (here without a tight bound).
    assert store.drop_claim_set(record_index) is True
    (third,) = run_in_processes(_order_by_record_timestamp, [(store_url, 30.0)], timeout=120)
    assert third == (1, ["03009"])
    assert record_index in index_names(store_url)
