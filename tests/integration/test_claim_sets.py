"""Claimable sets: claims on a queue with a long history walk only the claimable rows.

A set is a partial index holding the rows of one logical table that match its
``where``; the claim writes the covered conditions as literals so the planner
can prove the index predicate (``spec/claim_sets.py``). Declared sets come from
``ensure_claim_index``; the store declares one by itself for a queue's filter.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from airflow_atomic_store import AtomicStore, SpecError
from airflow_atomic_store.spec import evaluate, parse_where
from devkit.processes import run_in_processes
from tests.support import workers
from tests.support.physical import PHYSICAL_TABLE, index_names

PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]
STALE = [
    {"field": "status", "operator": "equals", "value": "in_flight"},
    {"field": "claimedAt", "operator": "lt", "value": "2100-01-01T00:00:00.000000Z"},
]


def _aged_queue(
    store: AtomicStore, table: str = "queue", done: int = 1500, pending: int = 30
) -> None:
    """``done`` consumed rows beneath ``pending`` claimable ones, as a queue keeps its history."""
    for number in range(done + pending):
        status = "done" if number < done else "pending"
        store.put(table, f"{number:05}", {"status": status, "n": number})


def _analyze(store: AtomicStore, url: str) -> None:
    """PostgreSQL statistics as autovacuum would leave them (SQLite's claim names its index)."""
    if url.startswith("postgresql"):
        with store._backend._cursor() as cursor:  # type: ignore[attr-defined]
            cursor.execute(f"ANALYZE {PHYSICAL_TABLE}")


def _manual(url: str) -> AtomicStore:
    return AtomicStore(url, auto_claim_sets=False)


@pytest.mark.parametrize("limit", [1, 10, 100, 1000])
def test_a_claim_covered_by_a_declared_set_uses_its_index_in_every_plan(store_url, limit):
    with _manual(store_url) as store:
        _aged_queue(store)
        name = store.ensure_claim_index(table="queue", where=PENDING)
        _analyze(store, store_url)
        assert name in store.explain_claim("queue", where=PENDING, limit=limit)
        assert name in store.explain_claim("queue", where=PENDING, limit=limit, generic=True)
        # Extra conditions stay bound and filter inside the set.
        narrower = [*PENDING, {"field": "n", "operator": "gte", "value": 1510}]
        assert name in store.explain_claim("queue", where=narrower, limit=limit, generic=True)
        claimed = store.atomic_claim("queue", where=narrower, limit=limit)["claimed"]
        assert [row["key"] for row in claimed] == [f"{n:05}" for n in range(1510, 1530)][:limit]


@pytest.mark.parametrize(
    "where, match",
    [
        ([{"field": "status", "operator": "equals", "value": "done"}], "all"),  # another value
        ([*PENDING, {"field": "n", "operator": "lt", "value": 45}], "all"),  # covered, narrower
        ([{"field": "status", "operator": "in", "value": ["pending", "done"]}], "all"),
        ([PENDING[0], {"field": "n", "operator": "equals", "value": 1}], "any"),
        ([{"field": "status", "operator": "not_equals", "value": "pending"}], "all"),
    ],
)
def test_claims_agree_with_the_oracle_whether_or_not_a_set_covers_them(store_url, where, match):
    with _manual(store_url) as store:
        _aged_queue(store, done=40, pending=10)
        store.ensure_claim_index(table="queue", where=PENDING)
        rows = {row["key"]: row["value"] for row in store.query("queue", limit=100)}
        expected = sorted(k for k, v in rows.items() if evaluate(parse_where(where), match, v))
        claimed = store.atomic_claim("queue", where=where, match=match, limit=100)
        assert [row["key"] for row in claimed["claimed"]] == expected


RETRY = {"field": "status", "operator": "equals", "value": "retry"}
#: One "any" filter written three ways: as declared, reversed, and with a repeat.
_EITHER_ORDERS = {
    "declared order": [PENDING[0], RETRY],
    "reversed": [RETRY, PENDING[0]],
    "repeated": [RETRY, PENDING[0], RETRY],
}


def _either_queue(store: AtomicStore) -> None:
    """1,500 consumed rows, then pending and retry rows among more consumed ones."""
    _aged_queue(store, done=1500, pending=0)
    for number in range(1500, 1516):
        status = ("done", "pending", "retry", "done")[number % 4]
        store.put("queue", f"{number:05}", {"status": status, "n": number})


#: The keys of :func:`_either_queue`'s pending and retry rows, in claim order.
_EITHER = [f"{n:05}" for n in range(1500, 1516) if n % 4 in (1, 2)]


@pytest.mark.parametrize("order", list(_EITHER_ORDERS))
def test_an_any_set_serves_its_filter_in_every_order_of_its_conditions(store_url, order):
    """SQLite proves an ``OR`` predicate only from the same terms in the same order;
    a claim through the set writes the set's conditions, so every order is served."""
    where = _EITHER_ORDERS[order]
    with _manual(store_url) as store:
        _either_queue(store)
        name = store.ensure_claim_index(table="queue", where=[RETRY, PENDING[0]], match="any")
        _analyze(store, store_url)
        for limit in (1, 10):
            assert name in store.explain_claim("queue", where=where, match="any", limit=limit)
        assert name in store.explain_claim("queue", where=where, match="any", generic=True)
        assert store.count("queue", where=where, match="any") == len(_EITHER) == 8
        first = store.atomic_claim("queue", where=where, match="any", limit=3)["claimed"]
        rest = store.atomic_claim("queue", where=where, match="any", limit=100)["claimed"]
        assert [row["key"] for row in first + rest] == _EITHER


def test_the_store_declares_an_any_set_and_claims_through_it_in_any_order(store):
    _either_queue(store)
    reversed_where = _EITHER_ORDERS["reversed"]
    claimed = [
        store.atomic_claim("queue", where=where, match="any", limit=2)["claimed"]
        for where in (reversed_where, _EITHER_ORDERS["repeated"], reversed_where)
    ]
    (declared,) = store.claim_sets("queue")
    assert declared["origin"] == "automatic" and declared["state"] == "ready"
    assert declared["match"] == "any"
    assert declared["name"] in store.explain_claim(
        "queue", where=reversed_where, match="any", generic=True
    )
    assert [row["key"] for batch in claimed for row in batch] == _EITHER[:6]


#: One row per JSON type, and strings shaped like the JSON text of a container.
_STATUSES = {
    "pending": "pending",
    "array-text": "[1]",
    "object-text": '{"a":1}',
    "empty": "",
    "number-text": "1",
    "array": [1],
    "object": {"a": 1},
    "number": 1,
    "true": True,
    "null": None,
}


@pytest.mark.parametrize("value", ["pending", "[1]", '{"a":1}', "", "1"])
@pytest.mark.parametrize("operator", ["equals", "in"])
def test_a_set_over_a_string_holds_that_string_and_no_value_of_another_type(
    store_url, value, operator
):
    """A set's literal equality holds exactly the rows the oracle accepts.

    The claim goes through the set's index (SQLite names it, so a predicate the
    claim's text does not prove would fail the claim).
    """
    where = [
        {"field": "status", "operator": operator, "value": [value] if operator == "in" else value}
    ]
    with _manual(store_url) as store:
        for key, status in _STATUSES.items():
            store.put("typed", key, {"status": status})
        store.put("typed", "missing", {})
        name = store.ensure_claim_index(table="typed", where=where)
        assert [entry["name"] for entry in store.claim_sets()] == [name]
        rows = {row["key"]: row["value"] for row in store.query("typed", limit=100)}
        expected = sorted(k for k, v in rows.items() if evaluate(parse_where(where), "all", v))
        claimed = store.atomic_claim("typed", where=where, limit=100)["claimed"]
        assert sorted(row["key"] for row in claimed) == expected
        assert expected == [k for k, v in _STATUSES.items() if v == value]


def test_sets_are_per_table_and_a_set_never_serves_another_table(store_url):
    with _manual(store_url) as store:
        _aged_queue(store, "a", done=20, pending=5)
        _aged_queue(store, "b", done=20, pending=5)
        name = store.ensure_claim_index(table="a", where=PENDING)
        assert name not in store.explain_claim("b", where=PENDING)
        assert store.atomic_claim("b", where=PENDING, limit=100)["count"] == 5
        claimed = store.atomic_claim("a", where=PENDING, limit=100)["claimed"]
        assert [row["key"] for row in claimed] == [f"{n:05}" for n in range(20, 25)]


def test_declaring_is_idempotent_and_sets_can_be_listed_and_dropped(store_url):
    with _manual(store_url) as store:
        first = store.ensure_claim_index(table="queue", where=PENDING)
        assert store.ensure_claim_index(table="queue", where=PENDING[0]) == first
        by_record = store.ensure_claim_index(
            table="queue",
            where=[{"field": "status", "operator": "in", "value": ["pending", "retry"]}],
            order_by="recordTimestamp",
        )
        assert by_record != first
        listed = store.claim_sets()
        assert [(s["name"], s["origin"], s["state"]) for s in listed] == sorted(
            [(first, "declared", "ready"), (by_record, "declared", "ready")]
        )
        assert store.claim_sets("other") == []
        assert store.drop_claim_set(first) is True
        assert store.drop_claim_set(first) is False
        assert [s["name"] for s in store.claim_sets("queue")] == [by_record]
        # The index is gone; the claim that used it still works, without it.
        _aged_queue(store, done=3, pending=2)
        assert store.atomic_claim("queue", where=PENDING, limit=10)["count"] == 2


def test_dropping_a_set_never_drops_an_index_of_a_storage_table_whose_name_extends_this_one(
    store_url,
):
    """``q_set_jobs`` is a valid storage table; its indexes are not ``q``'s sets."""
    with (
        AtomicStore(store_url, storage_table="q") as store,
        AtomicStore(store_url, storage_table="q_set_jobs") as other,
    ):
        store.put("t", "k", {})
        other.put("t", "k", {})
        before = index_names(store_url, "q_set_jobs")
        assert before
        for name in sorted(before):
            assert store.drop_claim_set(name) is False
        assert index_names(store_url, "q_set_jobs") == before


def test_a_set_dropped_by_another_process_does_not_break_claims(store_url):
    with _manual(store_url) as store, _manual(store_url) as other:
        _aged_queue(store, done=10, pending=4)
        name = store.ensure_claim_index(table="queue", where=PENDING)
        assert store.atomic_claim("queue", where=PENDING, limit=1)["count"] == 1  # uses it
        assert other.drop_claim_set(name) is True
        assert store.atomic_claim("queue", where=PENDING, limit=10)["count"] == 3
        assert name not in store.explain_claim("queue", where=PENDING)


def test_the_store_declares_a_set_for_a_queue_filter_the_first_time_it_claims(store):
    _aged_queue(store)
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
    _aged_queue(store, done=10, pending=3)
    store.atomic_claim("queue", where=where, match=match, mutations=mutations, limit=2)
    assert store.claim_sets() == []


def test_automatic_sets_can_be_turned_off_and_are_capped_per_table(store_url):
    with _manual(store_url) as store:
        _aged_queue(store, done=10, pending=3)
        store.atomic_claim("queue", where=PENDING, limit=1)
        assert store.claim_sets() == []
    with AtomicStore(store_url) as store:
        for state in ("s1", "s2", "s3", "s4", "s5", "s6"):
            store.atomic_claim(
                "queue", where=[{"field": "status", "operator": "equals", "value": state}]
            )
        automatic = [s for s in store.claim_sets("queue") if s["origin"] == "automatic"]
        assert len(automatic) == 4
        # Declared sets do not count against the cap.
        store.ensure_claim_index(table="queue", where=[{"field": "kind", "operator": "exists"}])
        assert len(store.claim_sets("queue")) == 5


def test_set_definitions_are_validated_before_any_io(unreachable_url):
    with AtomicStore(unreachable_url) as store:
        for where, field in [
            ([], "where"),
            ([{"field": "a..b", "operator": "equals", "value": 1}], "where[0].field"),
            ([{"field": "n", "operator": "gt", "value": 1}], "where[0]"),
            ([PENDING[0], {"field": "s", "operator": "contains", "value": "x"}], "where[1]"),
            ([{"field": "s", "operator": "in", "value": [[1]]}], "where[0]"),
        ]:
            with pytest.raises(SpecError) as info:
                store.ensure_claim_index(table="queue", where=where)
            assert info.value.field == field, where
        with pytest.raises(SpecError) as info:
            store.ensure_claim_index(table="queue", where=PENDING, order_by="status")
        assert info.value.field == "order_by"


def _declare(barrier: Any, url: str) -> str:
    with _manual(url) as store:
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
    with _manual(store_url) as manual:
        for number in range(3000):
            manual.put("queue", f"{number:05}", {"status": "pending" if number % 3 else "done"})
    roles = ["declare", "drain", "drain", "drain", "drain"]
    results = run_in_processes(
        _drain_or_declare, [(store_url, role) for role in roles], timeout=300
    )
    claims = Counter(key for result in results[1:] for key in result)
    assert max(claims.values()) == 1
    assert len(claims) == 2000
    assert results[0] in {s["name"] for s in store.claim_sets("queue")}
    assert store.query("queue", where=PENDING, limit=1) == []


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_repeated_postgres_claim_settles_on_a_generic_plan_that_walks_the_set(store, store_url):
    """The limit and the covered conditions are literals, so the plan cache keeps one plan."""
    _aged_queue(store, done=400, pending=200)
    name = store.ensure_claim_index(table="queue", where=PENDING)
    _analyze(store, store_url)
    for _ in range(15):
        assert store.atomic_claim("queue", where=PENDING, limit=1)["count"] == 1
    with store._backend._cursor() as cursor:  # the store's own session
        plans = cursor.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%FOR UPDATE SKIP LOCKED%%'"
        ).fetchall()
        assert len(plans) == 1
        statement, generic, custom = plans[0]
        assert generic >= 5 and custom <= 5, plans
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        try:
            cursor.execute(f"PREPARE generic_claim AS {statement}")
            (queue_id,) = cursor.execute(
                f"SELECT id FROM {PHYSICAL_TABLE}_tables WHERE name = 'queue'"
            ).fetchone()
            explain = sql.SQL("EXPLAIN EXECUTE generic_claim({}, {})").format(
                sql.Literal(Jsonb({"status": "x"})), sql.Literal(queue_id)
            )
            plan = "\n".join(row[0] for row in cursor.execute(explain).fetchall())
            assert name in plan
        finally:
            cursor.execute("DEALLOCATE generic_claim")
            cursor.execute("RESET plan_cache_mode")


def test_the_record_timestamp_index_is_built_only_once_something_orders_by_it(store, store_url):
    """Every write moves ``record_timestamp``: its index is one more entry per row version."""
    record_index = f"{PHYSICAL_TABLE}_record_idx"
    _aged_queue(store, done=10, pending=5)
    store.ensure_claim_index(table="queue", where=PENDING, order_by="recordTimestamp")
    claimed = store.atomic_claim("queue", where=PENDING, order_by="recordTimestamp", limit=2)
    assert [row["key"] for row in claimed["claimed"]] == ["00010", "00011"]
    assert record_index not in index_names(store_url)  # the set served that claim
    newest = store.query("queue", order_by="recordTimestamp", direction="desc", limit=1)
    assert [row["key"] for row in newest] == ["00011"]
    assert record_index in index_names(store_url)


# -- a set built by another process (PostgreSQL: builds take time and are visible) ----------

BUILD_SECONDS = 1.5  # how long the stand-in builder below keeps its build running


def _build_slowly_or_claim(barrier: Any, url: str, role: str) -> Any:
    """``builder``: what a process building the queue's set does, slowed down; or a claim."""
    import time

    import psycopg

    from airflow_atomic_store.spec.claim_sets import automatic_claim_set
    from airflow_atomic_store.store.claim_defaults import DEFAULT_WRITTEN
    from airflow_atomic_store.store.postgres import claim_sets, schema

    with _manual(url) as store:
        store.get("queue", "warm-up")  # the schema exists before either role starts
        if role == "claim":
            barrier.wait(timeout=60)
            time.sleep(0.3)  # the builder has recorded its set by now
            with AtomicStore(url) as claimer:  # automatic sets on, as by default
                started = time.monotonic()
                claimed = claimer.atomic_claim("queue", where=PENDING, limit=5)
                return time.monotonic() - started, [row["key"] for row in claimed["claimed"]]
        backend = store._backend  # type: ignore[attr-defined]
        claim_set = automatic_claim_set(
            "queue", parse_where(PENDING), "all", "created_at", DEFAULT_WRITTEN
        )
        assert claim_set is not None
        name = claim_set.index_name(PHYSICAL_TABLE)
        create = claim_sets.create_index(
            PHYSICAL_TABLE, claim_set, backend._set_predicate(claim_set)
        )
        with psycopg.connect(url, autocommit=True) as builder:
            cursor = builder.cursor()
            with claim_sets.build_lock(cursor, wait=True), claim_sets.set_build_lock(cursor, name):
                claim_sets._record(
                    cursor, schema.sets_table(PHYSICAL_TABLE), name, claim_set, "automatic"
                )
                barrier.wait(timeout=60)
                time.sleep(BUILD_SECONDS)
                cursor.execute(create.encode())
        return name


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_claim_waits_for_another_process_building_its_set_and_claims_through_it(store, store_url):
    _aged_queue(store, done=500, pending=20)
    name, (waited, keys) = run_in_processes(
        _build_slowly_or_claim, [(store_url, "build"), (store_url, "claim")], timeout=120
    )
    assert keys == [f"{number:05}" for number in range(500, 505)]
    assert waited >= BUILD_SECONDS - 0.3 - 0.1  # it waited for the build, not walked around it
    assert {s["name"]: s["state"] for s in store.claim_sets("queue")} == {name: "ready"}


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_another_sessions_build_lock_shows_as_a_build_in_progress(store, store_url):
    import psycopg

    from airflow_atomic_store.store.postgres.claim_sets import BUILD_LOCK_ID

    backend = store._backend
    assert backend.build_in_progress() is False
    with psycopg.connect(store_url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (BUILD_LOCK_ID,))
        assert backend.build_in_progress() is True
        other.execute("SELECT pg_advisory_unlock(%s)", (BUILD_LOCK_ID,))
    assert backend.build_in_progress() is False


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_sets_build_lock_shows_only_that_sets_build_in_progress(store, store_url):
    """A claim waiting for its set asks about that set: a set left "building" by a
    build that died is not waited for while another set's build holds the build lock."""
    import psycopg

    from airflow_atomic_store.store.postgres.claim_sets import set_build_lock

    backend = store._backend
    name = "atomic_store_rows_set_0123456789"
    with psycopg.connect(store_url, autocommit=True) as other:
        with set_build_lock(other.cursor(), name):
            assert backend.build_in_progress(name) is True
            assert backend.build_in_progress("atomic_store_rows_set_9876543210") is False
        assert backend.build_in_progress(name) is False
        # hashtext() of some names is negative: its oid form must still match.
        negative = next(
            candidate
            for candidate in (f"atomic_store_rows_set_{n:010x}" for n in range(100))
            if other.execute("SELECT hashtext(%s) < 0", (candidate,)).fetchone()[0]
        )
        with set_build_lock(other.cursor(), negative):
            assert backend.build_in_progress(negative) is True


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


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_record_index_build_that_was_too_slow_is_not_tried_again_by_another_process(
    store, store_url
):
    """Each Airflow task is a new process: one remembered only in the process that gave up
    made every task wait out the bound again on a build that was then dropped."""
    record_index = f"{PHYSICAL_TABLE}_record_idx"
    _aged_queue(store, done=3000, pending=10)
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
