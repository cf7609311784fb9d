"""Eight processes on one store: no lock error surfaces, counts stay exact, first use is safe.

SQLite serialises writers on one file lock; with the default busy timeout (60 s)
a writer waits its turn instead of failing with "database is locked", so heavy
contention costs throughput, never correctness. (PostgreSQL's row-level
concurrency is exercised by tests/integration/test_concurrency.py.)

Concurrent first use extends tests/integration/test_concurrency.py (upsert as the
first call) to every primitive, ``ensure_claim_index`` included, as some
process's very first call on a fresh database: a SQLite file in a directory that
does not exist yet, or a fresh PostgreSQL role and schema.
"""

from __future__ import annotations

import queue
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.store.contract import DEFAULT_STORAGE_TABLE
from airflow_atomic_store.store.migrations import latest
from airflow_atomic_store.store.postgres.schema import (
    FUNCTION_NAMES,
    FUNCTIONS_DDL,
    MIGRATIONS,
    SCHEMA_LOCK_ID,
    create_default_set,
    schema_tables,
)
from devkit.processes import run_in_processes, worker_context
from tests.reliability import workers
from tests.reliability.support import scaled

PROCESSES = 8


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_eight_processes_hammering_one_sqlite_file_see_no_lock_error_and_exact_counts(
    store: AtomicStore, store_url: str
) -> None:
    iterations = scaled(40, 400)
    queue = [f"q-{i:04d}" for i in range(PROCESSES * iterations // 2)]
    for key in queue:
        store.put("queue", key, {"status": "pending"})

    results = run_in_processes(
        workers.hammer,
        [(store_url, worker, iterations, 15) for worker in range(PROCESSES)],
        timeout=300,
    )

    total = PROCESSES * iterations
    assert store.get("counters", "hits") == {"n": total}
    own = store.query("own", limit=10_000)
    assert len(own) == total
    assert Counter(row["value"]["worker"] for row in own) == dict.fromkeys(
        range(PROCESSES), iterations
    )
    claimed = Counter(key for result in results for key in result["claimed"])
    assert not [key for key, n in claimed.items() if n > 1], "a row was claimed twice"
    assert set(claimed) == set(queue), "every queued row was claimed"
    rows = store.query("queue", limit=10_000)
    assert all(row["value"]["status"] == "done" for row in rows)
    assert all(row["value"]["completions"] == 1 for row in rows)


@pytest.fixture
def fresh_database_url(backend: str, store_url: str, tmp_path: Path) -> str:
    """A database nobody has opened; for SQLite, in a directory yet to be created."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'not' / 'yet' / 'there' / 'store.db'}"
    return store_url


@pytest.mark.parametrize("round_", range(scaled(1, 10)))
def test_every_primitive_can_be_the_first_call_on_a_fresh_database_in_eight_processes(
    fresh_database_url: str, round_: int
) -> None:
    assert len(workers.FIRST_CALLS) == PROCESSES
    counts = run_in_processes(
        workers.first_call,
        [(fresh_database_url, which) for which in workers.FIRST_CALLS],
        timeout=180,
    )
    assert sorted(counts) == list(range(1, PROCESSES + 1))
    with AtomicStore(fresh_database_url) as store:
        assert store.get("first", "count") == {"n": PROCESSES}
        assert store.get("first", "put") == {"by": "put"}
        assert store.get("first", "seed") == {"by": "seed"}


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_schema_setup_queued_behind_the_schema_lock_does_not_deadlock_an_index_build(
    store_url: str,
) -> None:
    """The interleaving CI once hit with eight first calls, made to happen every time.

    A process queued on the schema lock holds a snapshot, which a concurrent
    ``ensure_claim_index`` build waits for. When the queued process gets the lock
    it must not touch the existing table (``CREATE INDEX IF NOT EXISTS`` would
    wait for the build: a deadlock); it installs only what is missing.
    """
    with AtomicStore(store_url) as store:
        store.put("jobs", "j1", {"status": "pending"})
    context = worker_context()
    results = context.Queue()
    opened, go = context.Event(), context.Event()
    builder = context.Process(
        target=workers.build_claim_index_when_told, args=(store_url, opened, go, results)
    )
    newcomer = context.Process(target=workers.first_get, args=(store_url, results))
    with psycopg.connect(store_url, autocommit=True) as observer:
        try:
            builder.start()
            assert opened.wait(timeout=120), "the index builder never opened its store"
            # The schema is now incomplete (the functions are gone) and the lock is held.
            observer.execute("DROP FUNCTION atomic_store_apply_v1(jsonb, jsonb)")
            with psycopg.connect(store_url) as holder:
                holder.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_ID,))
                newcomer.start()
                wait_for_ungranted_lock(observer, "advisory")  # the newcomer queues
                go.set()
                wait_for_ungranted_lock(observer, "virtualxid")  # the build waits for it
            # The holder's transaction ends here; the newcomer takes its turn.
            outcomes = {results.get(timeout=120)[:2] for _ in range(2)}
        finally:
            for process in (builder, newcomer):
                process.join(timeout=30)
                if process.is_alive():
                    process.terminate()
    assert outcomes == {("index", "ok"), ("first", "ok")}
    with AtomicStore(store_url) as store:  # the functions are back, the index is usable
        claimed = store.atomic_claim("jobs", where=workers.PENDING)["claimed"]
        assert [row["key"] for row in claimed] == ["j1"]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_process_that_waited_while_another_created_the_schema_leaves_the_new_table_alone(
    store_url: str,
) -> None:
    """The interleaving behind CI's second deadlock, made to happen every time.

    The newcomer finds no schema and queues on the schema lock; meanwhile the
    schema appears and a concurrent index build holds its lock on the new table.
    When the newcomer's turn comes it must see the table (not a cached "missing")
    and leave it alone: creating the indexes again would wait for that build,
    which waits for the sessions queued on the schema lock.
    """
    context = worker_context()
    results = context.Queue()
    newcomer = context.Process(target=workers.first_get, args=(store_url, results))
    with (
        psycopg.connect(store_url, autocommit=True) as observer,
        psycopg.connect(store_url) as index_build,
    ):
        try:
            with psycopg.connect(store_url) as holder:
                holder.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_ID,))
                newcomer.start()
                wait_for_ungranted_lock(observer, "advisory")  # it found nothing and queued
                # The whole schema, as a concurrent creator makes it (at this version).
                for ddl in schema_tables(DEFAULT_STORAGE_TABLE).values():
                    observer.execute(ddl)
                observer.execute(FUNCTIONS_DDL.encode())
                create_default_set(observer, DEFAULT_STORAGE_TABLE)
                observer.execute(
                    sql.SQL("INSERT INTO {} (version, name) VALUES (%s, 'created')").format(
                        sql.Identifier(f"{DEFAULT_STORAGE_TABLE}_migrations")
                    ),
                    (latest(MIGRATIONS),),
                )
                index_build.execute(
                    sql.SQL("LOCK TABLE {} IN SHARE UPDATE EXCLUSIVE MODE").format(
                        sql.Identifier(DEFAULT_STORAGE_TABLE)
                    )
                )
            # The holder's transaction ends here; the newcomer takes its turn.
            outcome = result_unless_blocked(results, observer, "relation")
        finally:
            index_build.rollback()
            newcomer.join(timeout=30)
            if newcomer.is_alive():
                newcomer.terminate()
    assert outcome == ("first", "ok", None)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("storage_table", [DEFAULT_STORAGE_TABLE, "Mixed_Case_Rows"])
def test_a_store_whose_schema_exists_opens_without_waiting_for_the_schema_lock(
    store_url: str, storage_table: str
) -> None:
    """Only a missing schema is worth the lock; the names are matched as created (quoted)."""
    with AtomicStore(store_url, storage_table=storage_table) as store:
        store.put("t", "k", {"n": 1})
    with psycopg.connect(store_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_ID,))
        # Waiting for the held schema lock would fail after lock_timeout.
        with AtomicStore(store_url, storage_table=storage_table, lock_timeout=5) as store:
            assert store.get("t", "k") == {"n": 1}


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("function", FUNCTION_NAMES)
def test_a_schema_missing_any_one_function_is_completed_on_the_next_open(
    store_url: str, function: str
) -> None:
    with AtomicStore(store_url) as store:
        store.put("t", "k", {"n": 1})
    with psycopg.connect(store_url, autocommit=True) as observer:
        observer.execute(sql.SQL("DROP FUNCTION {}").format(sql.Identifier(function)))
        with AtomicStore(store_url) as store:
            assert store.get("t", "k") == {"n": 1}
        row = observer.execute("SELECT count(*) FROM pg_proc WHERE proname = %s", (function,))
        assert row.fetchone() == (1,)


def result_unless_blocked(results: Any, observer: psycopg.Connection[Any], locktype: str) -> Any:
    """The worker's result, or a failure as soon as some session waits for a ``locktype`` lock."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            return results.get(timeout=0.1)
        except queue.Empty:
            pass
        row = observer.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = %s AND NOT granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            (locktype,),
        ).fetchone()
        assert not (row and row[0]), f"a session waits for a {locktype} lock"
    raise AssertionError("the worker never reported")


def wait_for_ungranted_lock(connection: psycopg.Connection[Any], locktype: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = connection.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = %s AND NOT granted", (locktype,)
        ).fetchone()
        if row and row[0]:
            return
        time.sleep(0.05)
    raise AssertionError(f"no session came to wait for a {locktype} lock")
