"""A PostgreSQL rows table of the first layout (rows keyed by the logical table's name) is
converted to table ids on first use: by one process, under the schema lock, while others
wait; rows, claimable sets and claims come through it exactly; a conversion that cannot
finish changes nothing.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.exceptions import AtomicStoreError
from airflow_atomic_store.inspection import StoreInspector
from airflow_atomic_store.spec.claim_sets import parse_claim_set
from airflow_atomic_store.store.compiler import WhereCompiler
from airflow_atomic_store.store.postgres import schema
from airflow_atomic_store.store.postgres.where import PostgresWhere, literal
from devkit.processes import run_in_processes
from tests.reliability import workers
from tests.support.physical import PHYSICAL_TABLE

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.parametrize("backend", ["postgres"], indirect=True),
]

#: The rows table as the first layout made it (before table ids), with its indexes.
FIRST_LAYOUT = f"""
CREATE TABLE {PHYSICAL_TABLE} (
    table_name text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    value jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    record_timestamp timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (table_name, key)
);
CREATE INDEX {PHYSICAL_TABLE}_created_idx ON {PHYSICAL_TABLE} (table_name, created_at, key);
CREATE INDEX {PHYSICAL_TABLE}_record_idx ON {PHYSICAL_TABLE} (table_name, record_timestamp, key);
"""
PENDING = workers.PENDING
#: A logical table name that needs quoting wherever it is a literal.
ODD_TABLE = "it's 100% a table"
PROCESSES = 4


def make_first_layout(url: str) -> str:
    """A first-layout store: a queue of 40 pending over 3,000 done rows, two other tables,
    and the queue's declared claimable set with its index on the name. Returns the
    set's index name."""
    claim_set = parse_claim_set(PENDING, "all", "createdAt")
    index = claim_set.index_name(PHYSICAL_TABLE)
    predicate = WhereCompiler(PostgresWhere()).literal_predicate(
        claim_set.conditions, claim_set.match, "value"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FIRST_LAYOUT.encode())
        conn.execute(schema.FUNCTIONS_DDL.encode())
        conn.execute(schema.SETS_DDL.format(sets=schema.sets_table(PHYSICAL_TABLE)).encode())
        conn.execute(
            f"INSERT INTO {PHYSICAL_TABLE} (table_name, key, value, created_at) "
            "SELECT 'queue', lpad(i::text, 4, '0'), jsonb_build_object('status', "
            "CASE WHEN i <= 3000 THEN 'done' ELSE 'pending' END), "
            "timestamptz '2025-01-01' + i * interval '1 second' "
            "FROM generate_series(1, 3040) AS i".encode()
        )
        conn.execute(
            f"INSERT INTO {PHYSICAL_TABLE} (table_name, key, value) VALUES "
            "('counters', 'runs', '{\"n\": 5}'), (%s, 'k', '{\"odd\": true}')".encode(),
            (ODD_TABLE,),
        )
        conn.execute(
            f"INSERT INTO {schema.sets_table(PHYSICAL_TABLE)} (name, spec, origin) "
            "VALUES (%s, %s, 'declared')".encode(),
            (index, Jsonb(claim_set.to_json())),
        )
        conn.execute(
            f"CREATE INDEX {index} ON {PHYSICAL_TABLE} (created_at, key) "
            f"WHERE table_name = {literal('queue')} AND {predicate}".encode()
        )
    return index


def columns(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum",
            (PHYSICAL_TABLE,),
        ).fetchall()
    return [name for (name,) in rows]


def index_definitions(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        return dict(
            conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND schemaname = current_schema()",
                (PHYSICAL_TABLE,),
            ).fetchall()
        )


def test_concurrent_first_use_converts_a_first_layout_table_once_and_claims_stay_exactly_once(
    store_url: str,
) -> None:
    index = make_first_layout(store_url)
    claimed = run_in_processes(
        workers.claim_all_after_barrier,
        [(store_url, "queue", 3)] * PROCESSES,
        timeout=180,
    )
    every_key = Counter(key for keys in claimed for key in keys)
    assert every_key == Counter(f"{i:04d}" for i in range(3001, 3041))  # each pending row once
    assert columns(store_url) == ["key", "value", "created_at", "record_timestamp", "table_id"]
    definitions = index_definitions(store_url)
    assert "(table_id, key)" in definitions[f"{PHYSICAL_TABLE}_pkey"]
    assert "(table_id, created_at, key)" in definitions[f"{PHYSICAL_TABLE}_created_idx"]
    assert (
        "(table_id, created_at, key)" in definitions[index]
        and "table_name" not in definitions[index]
    )
    with AtomicStore(store_url) as store:
        assert store.get("counters", "runs") == {"n": 5}
        assert store.get(ODD_TABLE, "k") == {"odd": True}
        assert [s["state"] for s in store.claim_sets("queue")] == ["ready"]
        store.put("queue", "new", {"status": "pending"})
        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute(f"ANALYZE {PHYSICAL_TABLE}")
        assert index in store.explain_claim("queue", where=PENDING, limit=10)
        assert index in store.explain_claim("queue", where=PENDING, limit=10, generic=True)
        assert [row["key"] for row in store.atomic_claim("queue", where=PENDING)["claimed"]] == [
            "new"
        ]
        tables = {t.to_dict()["table"]: t.to_dict()["rows"] for t in StoreInspector(store).tables()}
        assert tables == {"counters": 1, "queue": 3041, ODD_TABLE: 1}


def test_a_conversion_that_cannot_finish_leaves_the_first_layout_as_it_was(store_url: str) -> None:
    """A user's view on the name column stops the conversion; nothing of it is kept."""
    make_first_layout(store_url)
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(f"CREATE VIEW users_own_view AS SELECT table_name FROM {PHYSICAL_TABLE}")
    before = index_definitions(store_url)
    with AtomicStore(store_url) as store, pytest.raises(AtomicStoreError, match="users_own_view"):
        store.get("counters", "runs")
    assert columns(store_url) == ["table_name", "key", "value", "created_at", "record_timestamp"]
    assert index_definitions(store_url) == before
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute("DROP VIEW users_own_view")
    with AtomicStore(store_url) as store:
        assert store.get("counters", "runs") == {"n": 5}


def test_a_failed_set_gets_no_index_from_the_conversion(store_url: str) -> None:
    """A set the store gave up on had no index; writers would maintain a rebuilt one
    that no claim chooses (the set stays failed)."""
    make_first_layout(store_url)
    given_up = parse_claim_set(workers.stale_before("2025-01-01T00:00:00Z")[:1], "all", "createdAt")
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema.sets_table(PHYSICAL_TABLE)} (name, spec, origin, "
            "problem) VALUES (%s, %s, 'automatic', 'the automatic build took longer')".encode(),
            (given_up.index_name(PHYSICAL_TABLE), Jsonb(given_up.to_json())),
        )
    with AtomicStore(store_url) as store:
        states = {s["name"]: s["state"] for s in store.claim_sets("queue")}
    assert states[given_up.index_name(PHYSICAL_TABLE)] == "failed"
    assert given_up.index_name(PHYSICAL_TABLE) not in index_definitions(store_url)
    assert sorted(states.values()) == ["failed", "ready"]  # the declared set's index is back


def test_reads_of_a_table_nothing_wrote_to_add_nothing_to_the_tables_catalog(
    store_url: str,
) -> None:
    """A read-only role can read: only writes give a logical table its id."""
    with AtomicStore(store_url) as store:
        assert store.get("never", "k") is None
        assert store.query("never", where=PENDING) == []
        assert store.backlog("never", where=PENDING) == {"count": 0, "first": None}
        assert store.delete("never", "k") is False
        assert StoreInspector(store).tables() == []
        with psycopg.connect(store_url) as conn:
            catalog = f"SELECT name FROM {PHYSICAL_TABLE}_tables ORDER BY id"
            assert conn.execute(catalog).fetchall() == []
            store.put("written", "k", {})
            store.atomic_claim("claimed", where=PENDING)
            assert conn.execute(catalog).fetchall() == [("written",), ("claimed",)]


def test_a_conversion_longer_than_the_stores_statement_timeout_still_finishes(
    store_url: str,
) -> None:
    """The store's ``statement_timeout`` bounds its primitives; the one-time rewrite of
    a large table used to be cancelled by it on every first use, and never finish."""
    make_first_layout(store_url)
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {PHYSICAL_TABLE} (table_name, key, value) SELECT 'history', "
            """i::text, '{"status": "done"}' FROM generate_series(1, 100000) AS i""".encode()
        )
    (counted,) = run_in_processes(
        workers.open_and_count, [(store_url, {"statement_timeout": 0.05})], timeout=120
    )
    assert counted == 40
    assert "table_id" in columns(store_url)


def test_rows_whose_tables_catalog_is_gone_are_refused_not_renumbered(store_url: str) -> None:
    """A new catalog would give ids out again from 1: ``b``'s rows would read as ``a``'s."""
    with AtomicStore(store_url) as store:
        store.put("first", "k", {"of": "first"})
        store.put("second", "k", {"of": "second"})
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {PHYSICAL_TABLE}_tables")
    missing = f"{PHYSICAL_TABLE}_tables .* is missing"
    with AtomicStore(store_url) as store, pytest.raises(AtomicStoreError, match=missing):
        store.put("second", "other", {})
    with psycopg.connect(store_url) as conn:
        assert conn.execute(f"SELECT count(*) FROM {PHYSICAL_TABLE}").fetchone() == (2,)
        missing = conn.execute("SELECT to_regclass(%s)", (f"{PHYSICAL_TABLE}_tables",)).fetchone()
        assert missing == (None,)  # nothing was created


def test_an_empty_rows_table_whose_tables_catalog_is_gone_gets_a_new_one(store_url: str) -> None:
    with AtomicStore(store_url) as store:
        store.put("first", "k", {"of": "first"})
        store.delete("first", "k")
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {PHYSICAL_TABLE}_tables")
    with AtomicStore(store_url) as store:
        store.put("second", "k", {"of": "second"})
        assert store.get("second", "k") == {"of": "second"}
