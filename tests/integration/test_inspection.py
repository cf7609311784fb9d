"""The read API behind the command line and the UI page, on both backends.

Counts are checked against what the rows hold (and, in
``tests/property/test_inspection_agrees_with_the_oracle.py``, against the
reference evaluator over random rows); "read-only" is checked by dumping
every table and index the store keeps before and after
(tests/support/queue_state.py). A store opened ``read_only=True`` is in
test_read_only_store.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore, SpecError
from airflow_atomic_store.inspection import (
    InFlightRow,
    InspectedRow,
    RowPage,
    StoreInspector,
    TableStats,
    TableSummary,
)
from airflow_atomic_store.timestamps import utc_now
from tests.support.queue_state import NOW, at, dump, fixed_clock, seed_queue
from tests.support.specs import PENDING


def test_tables_lists_every_logical_table_with_its_row_count_sorted(store: AtomicStore) -> None:
    for table, count in (("zeta", 2), ("alpha", 3), ("Mid", 1)):
        for n in range(count):
            store.put(table, f"k{n}", {"n": n})
    tables = StoreInspector(store).tables()
    assert tables == [TableSummary("Mid", 1), TableSummary("alpha", 3), TableSummary("zeta", 2)]
    assert tables[0].to_dict() == {"table": "Mid", "rows": 1}


def test_tables_of_an_empty_store_is_an_empty_list(store: AtomicStore) -> None:
    assert StoreInspector(store).tables() == []


def test_stats_counts_statuses_and_lists_in_flight_claims_oldest_first(store: AtomicStore) -> None:
    seed_queue(store)
    stats = StoreInspector(store, clock=fixed_clock).stats("jobs")
    assert stats.rows == 8
    assert stats.status_counts == {"done": 2, "in_flight": 3, "pending": 3}
    assert stats.in_flight_count == 3
    assert [row.key for row in stats.in_flight] == ["f3", "f2", "f1"]
    assert stats.in_flight[0] == InFlightRow(
        "f3", "d/c", NOW - timedelta(minutes=90), timedelta(minutes=90), stale=False
    )
    assert stats.stale_after is None and stats.stale_count is None


def test_stats_flags_and_counts_claims_older_than_the_threshold(store: AtomicStore) -> None:
    seed_queue(store)
    inspector = StoreInspector(store, clock=fixed_clock)
    stats = inspector.stats("jobs", stale_after=timedelta(minutes=15))
    assert stats.stale_count == 2
    assert {row.key: row.stale for row in stats.in_flight} == {"f3": True, "f2": True, "f1": False}
    assert inspector.stats("jobs", stale_after=timedelta(hours=2)).stale_count == 0


def test_stats_gives_the_age_of_the_oldest_pending_row(store: AtomicStore) -> None:
    before = utc_now()
    seed_queue(store)
    after = utc_now()
    store.put("jobs", "p0", {"status": "pending"})  # newer: not the oldest
    later = utc_now() + timedelta(hours=1)
    age = StoreInspector(store, clock=lambda: later).stats("jobs").oldest_pending_age
    assert age is not None
    assert later - after <= age <= later - before + timedelta(milliseconds=1)


def test_stats_in_flight_limit_caps_the_list_not_the_count(store: AtomicStore) -> None:
    seed_queue(store)
    stats = StoreInspector(store, clock=fixed_clock).stats("jobs", in_flight_limit=2)
    assert stats.in_flight_count == 3
    assert [row.key for row in stats.in_flight] == ["f3", "f2"]


def test_stats_of_a_table_without_string_statuses_has_no_queue_figures(
    store: AtomicStore,
) -> None:
    store.put("counters", "a", {"n": 1})
    store.put("counters", "b", {"status": 3})  # not a string: not a status
    stats = StoreInspector(store).stats("counters", stale_after=timedelta(minutes=5))
    assert stats == TableStats(
        "counters", 2, {}, None, 0, (), stale_after=timedelta(minutes=5), stale_count=0
    )


def test_stats_of_a_missing_table_is_all_zero(store: AtomicStore) -> None:
    stats = StoreInspector(store).stats("nothing-here")
    assert (stats.rows, stats.status_counts, stats.in_flight_count) == (0, {}, 0)


def test_claims_without_usable_claim_fields_are_listed_but_never_stale(
    store: AtomicStore,
) -> None:
    store.put("jobs", "no-time", {"status": "in_flight", "claimedBy": 7})
    store.put("jobs", "odd-time", {"status": "in_flight", "claimedAt": {"t": 1}})
    store.put("jobs", "old", {"status": "in_flight", "claimedAt": at(60), "claimedBy": "x"})
    stats = StoreInspector(store, clock=fixed_clock).stats("jobs", stale_after=timedelta(1e-6))
    by_key = {row.key: row for row in stats.in_flight}
    assert stats.in_flight[0].key == "old"  # rows without a claimedAt last
    assert by_key["no-time"] == InFlightRow("no-time", None, None, None, stale=False)
    assert by_key["odd-time"].claimed_at is None and not by_key["odd-time"].stale
    assert by_key["old"].stale and stats.stale_count == 1


def test_stats_of_a_queue_claimed_by_the_store_shows_the_claiming_run(
    store: AtomicStore,
) -> None:
    for n in range(5):
        store.put("jobs", f"j{n}", {"status": "pending"})
    store.atomic_claim("jobs", where=PENDING, limit=2, execution_id="my_dag/manual__1")
    later = utc_now() + timedelta(minutes=10)
    stats = StoreInspector(store, clock=lambda: later).stats(
        "jobs", stale_after=timedelta(minutes=5)
    )
    assert stats.status_counts == {"in_flight": 2, "pending": 3}
    assert {row.claimed_by for row in stats.in_flight} == {"my_dag/manual__1"}
    assert all(row.stale for row in stats.in_flight) and stats.stale_count == 2
    claim_age = stats.in_flight[0].claim_age
    assert claim_age is not None and timedelta(minutes=10) <= claim_age < timedelta(minutes=11)


def test_stale_returns_the_claims_older_than_the_threshold_oldest_first(
    store: AtomicStore,
) -> None:
    seed_queue(store)
    inspector = StoreInspector(store, clock=fixed_clock)
    stale = inspector.stale("jobs", older_than=timedelta(minutes=15))
    assert [(row.key, row.claimed_by, row.stale) for row in stale] == [
        ("f3", "d/c", True),
        ("f2", "dag/run-b", True),
    ]
    assert [row.key for row in inspector.stale("jobs", older_than=timedelta(1e-6), limit=1)] == [
        "f3"
    ]
    assert inspector.stale("jobs", older_than=timedelta(days=1)) == ()


def test_rows_pages_in_queue_order_and_says_whether_more_follow(store: AtomicStore) -> None:
    for n in range(7):
        store.put("q", f"k{n}", {"n": n})
    inspector = StoreInspector(store)
    pages = [inspector.rows("q", limit=3, offset=offset) for offset in (0, 3, 6)]
    assert [[row.key for row in page.rows] for page in pages] == [
        ["k0", "k1", "k2"],
        ["k3", "k4", "k5"],
        ["k6"],
    ]
    assert [page.has_more for page in pages] == [True, True, False]
    assert inspector.rows("q", offset=50) == RowPage("q", (), 50, 50, has_more=False)


def test_rows_filters_with_the_operators_where_language(store: AtomicStore) -> None:
    for n in range(6):
        store.put("q", f"k{n}", {"n": n, "tag": "even" if n % 2 == 0 else "odd"})
    inspector = StoreInspector(store)
    both = [
        {"field": "tag", "operator": "equals", "value": "even"},
        {"field": "n", "operator": "gt", "value": 1},
    ]
    assert [row.key for row in inspector.rows("q", where=both).rows] == ["k2", "k4"]
    any_of = inspector.rows("q", where=both, match="any").rows
    assert [row.key for row in any_of] == ["k0", "k2", "k3", "k4", "k5"]


def test_rows_carry_the_value_and_the_stores_timestamps(store: AtomicStore) -> None:
    before = utc_now()
    store.put("q", "k", {"a": [1, {"b": None}], "s": "<script>x</script>"})
    store.put("q", "k", {"a": 2})  # replaced: same created_at, later updated_at
    (row,) = StoreInspector(store).rows("q").rows
    assert row.value == {"a": 2}
    assert before - timedelta(seconds=1) <= row.created_at <= row.updated_at
    assert row.created_at.tzinfo is not None
    data = row.to_dict()
    assert data["created_at"].endswith("Z") and len(data["created_at"]) == 27


def test_rows_tell_held_leases_from_expired_ones(store: AtomicStore) -> None:
    store.put("leases", "held", {"holder": "a/1", "expiresAt": at(-5)})
    store.put("leases", "expired", {"holder": "a/2", "expiresAt": at(5)})
    store.put("leases", "released", {"holder": None, "expiresAt": at(0)})
    store.put("leases", "half", {"holder": "a/3"})
    rows = {row.key: row for row in StoreInspector(store, clock=fixed_clock).rows("leases").rows}
    assert {key: (row.shape, row.lease_state) for key, row in rows.items()} == {
        "held": ("lease", "held"),
        "expired": ("lease", "expired"),
        "released": ("lease", "expired"),
        "half": (None, None),
    }


def test_rows_show_a_buckets_tokens(store: AtomicStore) -> None:
    store.put("buckets", "int", {"tokens": 3, "refilledAt": at(1)})
    store.put("buckets", "float", {"tokens": 2.5})
    store.put("buckets", "text", {"tokens": "3"})
    store.put("buckets", "flag", {"tokens": True})
    rows = {row.key: row for row in StoreInspector(store).rows("buckets").rows}
    assert (rows["int"].shape, rows["int"].tokens) == ("bucket", 3)
    assert (rows["float"].shape, rows["float"].tokens) == ("bucket", 2.5)
    assert (rows["text"].shape, rows["text"].tokens) == (None, None)
    assert (rows["flag"].shape, rows["flag"].tokens) == (None, None)
    assert rows["int"] == InspectedRow(
        "int",
        {"tokens": 3, "refilledAt": at(1)},
        rows["int"].created_at,
        rows["int"].updated_at,
        "bucket",
        None,
        3,
    )


BAD_CALLS: dict[str, tuple[str, Any]] = {
    "unknown-operator": (
        "where[0].operator",
        lambda i: i.rows("t", where=[{"field": "a", "operator": "resembles", "value": 1}]),
    ),
    "bad-path": (
        "where[0].field",
        lambda i: i.rows("t", where=[{"field": "a..b", "operator": "exists"}]),
    ),
    "bad-match": ("match", lambda i: i.rows("t", match="most")),
    "limit-zero": ("limit", lambda i: i.rows("t", limit=0)),
    "negative-offset": ("offset", lambda i: i.rows("t", offset=-1)),
    "bad-table": ("table", lambda i: i.stats("")),
    "zero-stale-after": ("stale_after", lambda i: i.stats("t", stale_after=timedelta(0))),
    "stale-after-seconds": ("stale_after", lambda i: i.stats("t", stale_after=60)),
    "in-flight-limit": ("in_flight_limit", lambda i: i.stats("t", in_flight_limit=0)),
    "older-than": ("older_than", lambda i: i.stale("t", older_than=timedelta(-1))),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_arguments_raise_spec_error_naming_the_field_before_any_io(
    case: str, unreachable_url: str
) -> None:
    field, call = BAD_CALLS[case]
    with AtomicStore(unreachable_url) as unreachable, pytest.raises(SpecError) as raised:
        call(StoreInspector(unreachable))
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")


# -- read-only ------------------------------------------------------------------------------


def test_no_inspection_writes_anything(store: AtomicStore, store_url: str) -> None:
    seed_queue(store)
    store.atomic_claim("jobs", where=PENDING, limit=1, idempotency_key="first")
    store.put("leases", "l", {"holder": "a", "expiresAt": at(-1)})
    before = dump(store_url)
    inspector = StoreInspector(store, clock=fixed_clock)
    inspector.tables()
    for table in ("jobs", "leases", "missing"):
        inspector.stats(table, stale_after=timedelta(minutes=1), in_flight_limit=1)
        inspector.stale(table, older_than=timedelta(minutes=1))
        inspector.rows(table, where=PENDING, limit=1, offset=1)
        inspector.rows(table, where=[{"field": "claimedAt", "operator": "exists"}], match="any")
    assert dump(store_url) == before


PENDING_SET = [{"field": "status", "operator": "equals", "value": "pending"}]


def test_stats_on_a_queue_declares_no_claimable_set(store: AtomicStore) -> None:
    seed_queue(store)
    StoreInspector(store).stats("jobs", stale_after=timedelta(minutes=1))
    StoreInspector(store).stale("jobs", older_than=timedelta(minutes=1))
    assert [s["where"] for s in store.claim_sets()] == [PENDING_SET]  # the schema's own


def test_the_store_keeps_working_after_an_inspection(store: AtomicStore) -> None:
    """The snapshot's read-only mode ends with it: the same connection writes again."""
    seed_queue(store)
    StoreInspector(store).stats("jobs")
    claimed = store.atomic_claim("jobs", where=PENDING, limit=1)
    assert claimed["count"] == 1
    assert StoreInspector(store).stats("jobs").status_counts["in_flight"] == 4


def test_every_result_is_json_ready(store: AtomicStore) -> None:
    import json

    seed_queue(store)
    inspector = StoreInspector(store, clock=fixed_clock)
    results = [
        *inspector.tables(),
        inspector.stats("jobs", stale_after=timedelta(minutes=15)),
        inspector.rows("jobs"),
        *inspector.stale("jobs", older_than=timedelta(minutes=15)),
    ]
    for result in results:
        data = result.to_dict()
        assert json.loads(json.dumps(data)) == data
    stats = inspector.stats("jobs", stale_after=timedelta(minutes=15)).to_dict()
    assert stats["stale_after_seconds"] == 900.0
    assert stats["in_flight"][0]["claim_age_seconds"] == 5400.0
    assert stats["in_flight"][0]["claimed_at"] == at(90)


def test_each_stats_call_describes_one_moment_while_a_worker_drains_the_queue(
    store: AtomicStore, store_url: str
) -> None:
    """Counts, in-flight count and in-flight list agree in every call (one snapshot)."""
    from devkit.processes import run_in_processes
    from tests.support.inspection_workers import play

    total = 120
    for n in range(total):
        store.put("busy", f"j{n:03d}", {"status": "pending"})
    finished, seen = run_in_processes(
        play, [("work", store_url, "busy", 5), ("inspect", store_url, "busy", total)]
    )
    assert finished == total
    assert seen["inconsistent"] == []
    assert seen["calls"] > 1 and seen["in_flight"] > 0


@pytest.mark.parametrize("table", ["it's 50% done", "%s", "$1 \\ é"])
def test_table_names_needing_quotes_are_inspected_like_any_other(
    store: AtomicStore, table: str
) -> None:
    store.put(table, "p", {"status": "pending"})
    store.put(table, "f", {"status": "in_flight", "claimedAt": at(30), "claimedBy": "x"})
    inspector = StoreInspector(store, clock=fixed_clock)
    stats = inspector.stats(table, stale_after=timedelta(minutes=10))
    assert (stats.rows, stats.status_counts, stats.stale_count) == (
        2,
        {"in_flight": 1, "pending": 1},
        1,
    )
    assert stats.oldest_pending_age is not None
    assert [row.key for row in inspector.stale(table, older_than=timedelta(minutes=10))] == ["f"]
    assert TableSummary(table, 2) in inspector.tables()
