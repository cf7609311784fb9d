"""The rest of the contract, on every driver: set storage, notifications, snapshots.

A driver stores, builds, lists and drops claimable sets (the store decides which
serves a claim), offers write notifications when it has them (River's
``SupportsListener``), and answers inspection's read-only queries in one snapshot.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec import parse_mutations, parse_ordering, parse_where
from airflow_atomic_store.spec.claim_sets import parse_claim_set
from airflow_atomic_store.store.contract import (
    Backend,
    Backlog,
    ChosenSet,
    ClaimRequest,
    ClaimSetGone,
    RowFilter,
    Selection,
)

FIFO = parse_ordering("createdAt", "asc")
PENDING_SPEC = [{"field": "status", "operator": "equals", "value": "pending"}]
QUEUED_SPEC = [{"field": "status", "operator": "equals", "value": "queued"}]
QUEUED = parse_where(QUEUED_SPEC)
TAKE = parse_mutations([{"field": "status", "operation": "set", "value": "taken"}])


def _rows(backend: Backend, table: str, statuses: list[str]) -> list[str]:
    keys = []
    for number, status in enumerate(statuses):
        key = f"{table}-{number:02d}"
        backend.put(table, key, {"status": status, "n": number})
        keys.append(key)
        time.sleep(0.002)  # distinct created_at
    return keys


def _through(name: str, table: str, limit: int) -> Selection:
    """A selection of the queued rows through the set ``name`` (its one condition inline)."""
    return Selection(table, QUEUED, "all", FIFO, limit, ChosenSet(name, frozenset({0})))


def test_a_new_store_lists_the_queues_pending_set_declared_and_ready(
    contract_backend: Backend,
) -> None:
    contract_backend.get("t", "k")  # the schema is made on first use
    (listed,) = contract_backend.load_claim_sets()
    assert listed.claim_set.identity == parse_claim_set(PENDING_SPEC, "all", "createdAt").identity
    assert (listed.origin, listed.state, listed.problem) == ("declared", "ready", None)
    assert listed.to_json()["where"] == PENDING_SPEC


def test_a_declared_set_is_built_listed_and_declaring_it_again_changes_nothing(
    contract_backend: Backend,
) -> None:
    claim_set = parse_claim_set(QUEUED_SPEC, "all", "createdAt")
    built = contract_backend.build_claim_set(claim_set)
    assert (built.origin, built.state) == ("declared", "ready")
    assert built.name == claim_set.index_name("atomic_store_rows")
    assert contract_backend.build_claim_set(claim_set) == built
    names = [listed.name for listed in contract_backend.load_claim_sets()]
    assert names.count(built.name) == 1 and len(names) == 2  # and the pending set


def test_a_selection_through_a_set_takes_exactly_the_rows_it_takes_without_one(
    contract_backend: Backend,
) -> None:
    keys = _rows(contract_backend, "q", ["queued", "done", "queued", "pending", "queued"])
    contract_backend.put("other", "o", {"status": "queued"})
    name = contract_backend.build_claim_set(parse_claim_set(QUEUED_SPEC, "all", "createdAt")).name
    through = _through(name, "q", 2)
    assert contract_backend.count(_through(name, "q", 10)) == Backlog(3, keys[0])
    assert contract_backend.count(through) == Backlog(2, keys[0])  # capped at its limit
    assert [key for key, _ in contract_backend.query(through)] == [keys[0], keys[2]]
    claimed = contract_backend.claim(ClaimRequest(through, TAKE))
    assert [key for key, _ in claimed.rows] == [keys[0], keys[2]]
    plain = Selection("q", QUEUED, "all", FIFO, 10)
    assert [key for key, _ in contract_backend.claim(ClaimRequest(plain, TAKE)).rows] == [keys[4]]
    assert contract_backend.explain_claim(_through(name, "q", 10)).strip()  # a plan (whether
    # it walks the set's index is the planner's: tests/integration/test_claim_sets.py)


def test_dropping_a_set_drops_its_index_and_a_selection_naming_it_still_answers_or_says_so(
    contract_backend: Backend,
) -> None:
    keys = _rows(contract_backend, "q", ["queued", "queued"])
    name = contract_backend.build_claim_set(parse_claim_set(QUEUED_SPEC, "all", "createdAt")).name
    assert contract_backend.drop_claim_set(name) is True
    assert contract_backend.drop_claim_set(name) is False
    assert name not in [listed.name for listed in contract_backend.load_claim_sets()]
    try:  # PostgreSQL plans without the index; SQLite names it (INDEXED BY) and cannot
        claimed = contract_backend.claim(ClaimRequest(_through(name, "q", 10), TAKE))
    except ClaimSetGone:
        claimed = contract_backend.claim(
            ClaimRequest(Selection("q", QUEUED, "all", FIFO, 10), TAKE)
        )
    assert [key for key, _ in claimed.rows] == keys


def test_only_a_sets_own_index_is_ever_dropped(contract_backend: Backend) -> None:
    contract_backend.get("t", "k")
    assert contract_backend.drop_claim_set("atomic_store_rows_created_idx") is False
    assert contract_backend.drop_claim_set("atomic_store_rows_pkey") is False
    assert contract_backend.explain_claim(Selection("t", QUEUED, "all", FIFO, 1))


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_listener_hears_a_committed_write_on_its_tables_channel(
    contract_backend: Backend, store_url: str
) -> None:
    """The capability's listener (River's driver listener): connect, listen on a table's
    channel, wake when a write to that table commits; a reader then counts as the
    driver does."""
    import psycopg

    notifications = contract_backend.notifications()
    assert notifications is not None
    contract_backend.get("q", "k")  # the schema exists
    connect_args = psycopg.conninfo.conninfo_to_dict(store_url)
    selection = Selection("q", parse_where(PENDING_SPEC), "all", FIFO, 1000)

    async def scenario() -> tuple[float, set[str], set[str], Backlog]:
        listener = notifications.listener(connect_args)
        reader = notifications.reader(connect_args)
        await listener.connect()
        try:
            await listener.listen(notifications.channel("q"))
            assert await listener.channels() == {notifications.channel("q")}
            started = time.monotonic()
            await asyncio.to_thread(contract_backend.put, "q", "k", {"status": "pending"})
            woken = await listener.wait(10.0)
            waited = time.monotonic() - started
            await asyncio.to_thread(contract_backend.put, "other", "k", {"status": "pending"})
            quiet = await listener.wait(0.2)  # another table's channel: not heard
            return waited, woken, quiet, await reader.count(selection)
        finally:
            await listener.close()
            await reader.close()

    waited, woken, quiet, counted = asyncio.run(scenario())
    assert woken == {notifications.channel("q")} and waited < 5.0  # the commit, not the timeout
    assert quiet == set()
    assert counted == contract_backend.count(selection) == Backlog(1, "k")


def test_a_snapshot_answers_inspections_queries_over_one_view(contract_backend: Backend) -> None:
    since = timestamps.shifted(-timedelta(minutes=5))
    keys = _rows(contract_backend, "q", ["pending", "pending", "in_flight", "done"])
    by = {"status": "in_flight", "claimedAt": "2026-01-01T00:00:00.000000Z", "claimedBy": "d/r"}
    contract_backend.put("q", keys[2], by)
    contract_backend.put("other", "x", {"status": "pending"})
    pending = RowFilter("q", parse_where(PENDING_SPEC), "all", frozenset({0}))
    with contract_backend.snapshot() as snapshot:
        assert sorted(snapshot.table_counts()) == [("other", 1), ("q", 4)]
        assert sorted(snapshot.status_counts("q"), key=str) == [
            ("done", 1),
            ("in_flight", 1),
            ("pending", 2),
        ]
        assert snapshot.count(pending) == 2
        assert snapshot.count(RowFilter("q")) == 4
        oldest = snapshot.oldest_created(pending)
        assert oldest is not None and oldest.tzinfo is not None
        in_flight = RowFilter("q", parse_where([{**PENDING_SPEC[0], "value": "in_flight"}]))
        (claim,) = snapshot.claims(in_flight, 10)
        assert (claim.key, claim.claimed_at, claim.claimed_by) == (
            keys[2],
            "2026-01-01T00:00:00.000000Z",
            "d/r",
        )
        page = snapshot.rows(RowFilter("q"), 2, 1)
        assert [row.key for row in page] == keys[1:3]
        assert page[1].value == by
        activity = snapshot.activity("q", since, ("pending", "in_flight"))
        assert sum(activity.created.values()) == 4
        assert sum(activity.finished.values()) == 1  # the done row
        assert snapshot.count(RowFilter("never-written")) == 0
