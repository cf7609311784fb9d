"""A store opened ``read_only=True``: it reads what writers wrote and changes nothing.

Where there is no store it is an error and creates nothing (no file, no directory,
no table), whatever it is pointed at: a missing database, a mistyped storage table,
another program's SQLite file. Both backends; "nothing changed" is the whole
physical state compared before and after (tests/support/queue_state.py).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_atomic_store import AtomicStore, AtomicStoreError, ConnectionConfigError, SpecError
from airflow_atomic_store.inspection import StoreInspector, TableSummary
from tests.support.physical import journal_mode, nowhere_url, store_objects
from tests.support.queue_state import dump, fixed_clock, seed_queue
from tests.support.specs import PENDING


def test_a_read_only_store_where_none_is_is_an_error_and_nothing_is_created(
    store_url: str, tmp_path: Path
) -> None:
    url = nowhere_url(store_url, tmp_path)
    with AtomicStore(url, read_only=True) as missing:
        inspector = StoreInspector(missing)
        for look in (inspector.tables, lambda: inspector.stats("jobs")):
            with pytest.raises(ConnectionConfigError, match=r"no (SQLite|atomic) store"):
                look()
    assert store_objects(url) == ([] if url == store_url else None)
    assert not (tmp_path / "nested").exists()


def test_a_read_only_store_reads_what_writers_wrote_and_changes_nothing(
    store: AtomicStore, store_url: str
) -> None:
    seed_queue(store)
    before = dump(store_url)
    with AtomicStore(store_url, read_only=True) as reader:
        inspector = StoreInspector(reader, clock=fixed_clock)
        assert inspector.tables() == [TableSummary("jobs", 8)]
        assert inspector.stats("jobs", stale_after=timedelta(minutes=30)).stale_count == 1
        assert [row.key for row in inspector.rows("jobs", where=PENDING).rows] == ["p1", "p2", "p3"]
        assert reader.explain_claim("jobs", where=PENDING).strip()
        assert inspector.stats("never_written").rows == 0
        for write in (
            lambda: reader.put("jobs", "x", {"status": "pending"}),
            lambda: reader.atomic_claim("jobs", where=PENDING, limit=1),
            lambda: reader.put("new_table", "x", {}),
        ):
            with pytest.raises(AtomicStoreError):
                write()
    assert dump(store_url) == before


def test_a_read_only_store_orders_by_record_timestamp_without_building_its_index(
    store: AtomicStore, store_url: str
) -> None:
    """It tried to build the index the first ordering by ``recordTimestamp`` wants, and
    failed (PostgreSQL: "current transaction is aborted"; SQLite: "opened read-only")."""
    seed_queue(store)
    store.put("jobs", "p2", {"status": "pending", "touched": True})  # now the newest write
    before = store_objects(store_url)
    with AtomicStore(store_url, read_only=True) as reader:
        newest = reader.query("jobs", order_by="recordTimestamp", direction="desc", limit=1)
        assert [row["key"] for row in newest] == ["p2"]
        assert reader.get("jobs", "p2") == {"status": "pending", "touched": True}
    assert store_objects(store_url) == before


def test_a_read_only_store_with_a_mistyped_storage_table_is_an_error_and_creates_nothing(
    store: AtomicStore, store_url: str
) -> None:
    store.put("jobs", "a", {"status": "pending"})
    before = store_objects(store_url)
    with (
        AtomicStore(store_url, storage_table="typo_rows", read_only=True) as reader,
        pytest.raises(ConnectionConfigError, match="no table 'typo_rows'"),
    ):
        StoreInspector(reader).tables()
    assert store_objects(store_url) == before


def test_a_read_only_store_leaves_a_sqlite_file_that_is_not_a_store_as_it_was(
    tmp_path: Path,
) -> None:
    """Another program's database (Airflow's own SQLite metadata DB, given by mistake)."""
    path = tmp_path / "airflow.db"
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE dag (dag_id TEXT)")
    with (
        AtomicStore(f"sqlite:///{path}", read_only=True) as reader,
        pytest.raises(ConnectionConfigError, match="no atomic store in"),
    ):
        StoreInspector(reader).tables()
    assert store_objects(f"sqlite:///{path}") == ["dag"]
    assert journal_mode(path) == "delete"


def test_read_only_must_be_true_or_false() -> None:
    with pytest.raises(SpecError, match="read_only"):
        AtomicStore("sqlite:////tmp/x.db", read_only="yes")  # type: ignore[arg-type]
