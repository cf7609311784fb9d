"""Claimable sets: claims on a queue with a long history walk only the claimable rows.

A set is a partial index holding the rows that match its ``where``, keyed by
logical table first, so one set serves every table whose claims use its filter;
the claim writes the covered conditions as literals so the planner can prove the
index predicate (``spec/claim_sets.py``) and binds its table. Declared sets come
from ``ensure_claim_index``; the store's own are in test_automatic_claim_sets.py.
"""

from __future__ import annotations

import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from airflow_atomic_store import AtomicStore, SpecError
from airflow_atomic_store.exceptions import AtomicStoreError
from airflow_atomic_store.spec import evaluate, parse_where
from tests.integration.set_helpers import PENDING, aged_queue, analyze, manual
from tests.support.physical import PHYSICAL_TABLE, index_names


@pytest.mark.parametrize("limit", [1, 10, 100, 1000])
def test_a_claim_covered_by_a_declared_set_uses_its_index_in_every_plan(store_url, limit):
    with manual(store_url) as store:
        aged_queue(store)
        name = store.ensure_claim_index(table="queue", where=PENDING)
        analyze(store, store_url)
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
    with manual(store_url) as store:
        aged_queue(store, done=40, pending=10)
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
    aged_queue(store, done=1500, pending=0)
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
    with manual(store_url) as store:
        _either_queue(store)
        name = store.ensure_claim_index(table="queue", where=[RETRY, PENDING[0]], match="any")
        analyze(store, store_url)
        for limit in (1, 10):
            assert name in store.explain_claim("queue", where=where, match="any", limit=limit)
        assert name in store.explain_claim("queue", where=where, match="any", generic=True)
        assert store.count("queue", where=where, match="any") == len(_EITHER) == 8
        first = store.atomic_claim("queue", where=where, match="any", limit=3)["claimed"]
        rest = store.atomic_claim("queue", where=where, match="any", limit=100)["claimed"]
        assert [row["key"] for row in first + rest] == _EITHER


def test_a_declared_any_set_serves_its_claims_in_any_order_of_their_conditions(store):
    _either_queue(store)
    reversed_where = _EITHER_ORDERS["reversed"]
    name = store.ensure_claim_index(table="queue", where=_EITHER_ORDERS["repeated"], match="any")
    claimed = [
        store.atomic_claim("queue", where=where, match="any", limit=2)["claimed"]
        for where in (reversed_where, _EITHER_ORDERS["repeated"], reversed_where)
    ]
    (declared,) = [s for s in store.claim_sets("queue") if s["name"] == name]
    assert declared["origin"] == "declared" and declared["state"] == "ready"
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
    with manual(store_url) as store:
        for key, status in _STATUSES.items():
            store.put("typed", key, {"status": status})
        store.put("typed", "missing", {})
        name = store.ensure_claim_index(table="typed", where=where)
        assert name in [entry["name"] for entry in store.claim_sets()]
        rows = {row["key"]: row["value"] for row in store.query("typed", limit=100)}
        expected = sorted(k for k, v in rows.items() if evaluate(parse_where(where), "all", v))
        claimed = store.atomic_claim("typed", where=where, limit=100)["claimed"]
        assert sorted(row["key"] for row in claimed) == expected
        assert expected == [k for k, v in _STATUSES.items() if v == value]


def test_one_set_serves_every_table_and_a_claim_through_it_takes_only_its_own_rows(store_url):
    """A set is the filter's, not a table's: declared for ``a``, it serves ``b`` too,
    and its index leads with the table, so each claim reads its own table's rows."""
    with manual(store_url) as store:
        aged_queue(store, "a", done=600, pending=5)
        aged_queue(store, "b", done=600, pending=5)
        store.put("b", "late", {"status": "pending", "n": 99})
        name = store.ensure_claim_index(table="a", where=PENDING)
        analyze(store, store_url)
        for table in ("a", "b"):
            assert name in store.explain_claim(table, where=PENDING)
            assert name in store.explain_claim(table, where=PENDING, generic=True)
        claimed_b = store.atomic_claim("b", where=PENDING, limit=100)["claimed"]
        assert [row["key"] for row in claimed_b] == [f"{n:05}" for n in range(600, 605)] + ["late"]
        claimed_a = store.atomic_claim("a", where=PENDING, limit=100)["claimed"]
        assert [row["key"] for row in claimed_a] == [f"{n:05}" for n in range(600, 605)]
        assert store.ensure_claim_index(table="b", where=PENDING) == name
        assert [entry["name"] for entry in store.claim_sets()] == [name]


def test_declaring_is_idempotent_and_sets_can_be_listed_and_dropped(store_url):
    with manual(store_url) as store:
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
        assert store.claim_sets("other") == listed  # sets serve every table
        assert store.drop_claim_set(first) is True
        assert store.drop_claim_set(first) is False
        assert [s["name"] for s in store.claim_sets("queue")] == [by_record]
        # The index is gone; the claim that used it still works, without it.
        aged_queue(store, done=3, pending=2)
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
    with manual(store_url) as store, manual(store_url) as other:
        aged_queue(store, done=10, pending=4)
        name = store.ensure_claim_index(table="queue", where=PENDING)
        assert store.atomic_claim("queue", where=PENDING, limit=1)["count"] == 1  # uses it
        assert other.drop_claim_set(name) is True
        assert store.atomic_claim("queue", where=PENDING, limit=10)["count"] == 3
        assert name not in store.explain_claim("queue", where=PENDING)


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


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_repeated_postgres_claim_settles_on_a_generic_plan_that_walks_the_set(store, store_url):
    """The limit and the covered conditions are literals, so the plan cache keeps one plan."""
    aged_queue(store, done=400, pending=200)
    name = store.ensure_claim_index(table="queue", where=PENDING)
    analyze(store, store_url)
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
            # $1 the table's name (the statement finds its id), $2 the mutation
            explain = sql.SQL("EXPLAIN EXECUTE generic_claim({}, {})").format(
                sql.Literal("queue"), sql.Literal(Jsonb({"status": "x"}))
            )
            plan = "\n".join(row[0] for row in cursor.execute(explain).fetchall())
            assert name in plan
        finally:
            cursor.execute("DEALLOCATE generic_claim")
            cursor.execute("RESET plan_cache_mode")


def test_ordering_by_record_timestamp_builds_no_index(store, store_url):
    """Every write moves ``record_timestamp``: an index on it would be one more entry per
    row version (and no HOT update), and claims build nothing; a declared set ordered
    by it serves a queue's claims."""
    record_index = f"{PHYSICAL_TABLE}_record_idx"
    aged_queue(store, done=10, pending=5)
    store.ensure_claim_index(table="queue", where=PENDING, order_by="recordTimestamp")
    claimed = store.atomic_claim("queue", where=PENDING, order_by="recordTimestamp", limit=2)
    assert [row["key"] for row in claimed["claimed"]] == ["00010", "00011"]
    newest = store.query("queue", order_by="recordTimestamp", direction="desc", limit=1)
    assert [row["key"] for row in newest] == ["00011"]
    assert record_index not in index_names(store_url)


def test_a_set_whose_name_collides_with_another_sets_is_refused_and_nothing_is_built(
    store_url,
):
    """Names keep 40 bits of hash and a colliding pair was found in a second: declaring
    the second says so (a silent ``IF NOT EXISTS`` once left it unbuilt)."""
    first_where, second_where = (
        [{"field": "status", "operator": "equals", "value": value}]
        for value in ("s721947", "s763502")  # tests/unit/test_set_index_names.py
    )
    with manual(store_url) as store:
        store.put("queue", "second", {"status": "s763502"})
        first = store.ensure_claim_index(table="queue", where=first_where)
        with pytest.raises(AtomicStoreError, match="collided") as raised:
            store.ensure_claim_index(table="queue", where=second_where)
        assert first in str(raised.value) and "s721947" in str(raised.value)
        listed = {s["name"]: s["where"] for s in store.claim_sets()}
        assert listed[first] == first_where and second_where not in listed.values()
        claimed = store.atomic_claim("queue", where=second_where, limit=10)["claimed"]
        assert [row["key"] for row in claimed] == ["second"]
