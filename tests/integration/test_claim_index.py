"""``ensure_claim_index``: claims over large queues use an index, not a scan of consumed rows."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from airflow_atomic_store import AtomicStore, SpecError
from tests.support.physical import PHYSICAL_TABLE
from tests.support.processes import run_in_processes

PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]


def _ensure_index(barrier: Any, url: str) -> str:
    with AtomicStore(url) as store:
        store.get("t", "warm-up")  # connect and create the schema before the race
        barrier.wait()
        return store.ensure_claim_index(["status"])


def test_claim_filter_uses_the_declared_claim_index(store):
    # Enough consumed rows that a scan is costlier than the index to the planner.
    for number in range(2000):
        store.put("queue", f"{number:04}", {"status": "pending" if number % 100 == 0 else "done"})
    name = store.ensure_claim_index(["status"])
    assert name in store.explain_claim("queue", where=PENDING, limit=10)


def test_ensure_claim_index_is_idempotent_and_claims_still_agree(store):
    for number in range(20):
        store.put("queue", f"{number:03}", {"status": "pending" if number % 2 else "done"})
    first = store.ensure_claim_index(["status"])
    assert store.ensure_claim_index("status") == first
    claimed = store.atomic_claim("queue", where=PENDING, limit=5)["claimed"]
    assert [row["key"] for row in claimed] == ["001", "003", "005", "007", "009"]


def test_nested_and_ordered_claim_indexes_get_distinct_names(store):
    by_status = store.ensure_claim_index(["status"])
    by_nested = store.ensure_claim_index(["meta.state"], order_by="recordTimestamp")
    assert by_status != by_nested
    assert by_nested in store.explain_claim(
        "q",
        where=[{"field": "meta.state", "operator": "equals", "value": "x"}],
        order_by="recordTimestamp",
    )


def test_concurrent_first_index_creation_from_many_processes_succeeds(store_url):
    names = run_in_processes(_ensure_index, [(store_url,)] * 4)
    assert len(set(names)) == 1


def test_claim_index_fields_are_validated_before_any_io():
    with AtomicStore("postgresql://nobody@127.0.0.1:1/none") as store:
        with pytest.raises(SpecError) as info:
            store.ensure_claim_index(["a..b"])
        assert info.value.field == "fields[0]"
        with pytest.raises(SpecError):
            store.ensure_claim_index([])


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_repeated_postgres_claim_reuses_one_plan_and_it_walks_the_claim_index(store):
    """The limit is part of the statement text, so PostgreSQL settles on a generic plan.

    With ``LIMIT $n`` the generic plan assumed a tenth of the table was wanted,
    so every claim was planned again; and a custom plan for ``LIMIT 1`` may walk
    the ``created_at`` index over the consumed rows (docs/benchmarks.md,
    finding 3). The generic plan of a filter on the indexed field walks the
    claim index instead.
    """
    for number in range(600):
        store.put("queue", f"{number:04}", {"status": "done" if number < 400 else "pending"})
    name = store.ensure_claim_index(["status"])
    with store._backend._cursor() as cursor:  # statistics as autovacuum would leave them
        cursor.execute(f"ANALYZE {PHYSICAL_TABLE}")
    for _ in range(15):
        assert store.atomic_claim("queue", where=PENDING, limit=1)["count"] == 1
    with store._backend._cursor() as cursor:  # the store's own session
        plans = cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%FOR UPDATE SKIP LOCKED%%'"
        ).fetchall()
        assert len(plans) == 1
        generic, custom = plans[0]
        assert generic >= 5 and custom <= 5, plans  # planned once the plan cache had judged
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        try:
            statement = cursor.execute(
                "SELECT statement FROM pg_prepared_statements "
                "WHERE statement LIKE '%%FOR UPDATE SKIP LOCKED%%'"
            ).fetchone()[0]
            cursor.execute(f"PREPARE generic_claim (text, jsonb, jsonb, text) AS {statement}")
            explain = sql.SQL("EXPLAIN EXECUTE generic_claim({}, {}, {}, {})").format(
                *map(sql.Literal, ["queue", Jsonb("pending"), Jsonb({"status": "x"}), "queue"])
            )
            plan = cursor.execute(explain).fetchall()
            assert name in "\n".join(row[0] for row in plan)
        finally:
            cursor.execute("DEALLOCATE ALL")
            cursor.execute("RESET plan_cache_mode")
