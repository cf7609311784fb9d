"""A lock held outside the store never makes a primitive hang.

PostgreSQL: another session holds a row lock (``SELECT … FOR UPDATE`` in an open
transaction). With ``lock_timeout`` (or ``statement_timeout``) a primitive that
must wait for that row fails with a retryable ``StoreUnavailableError`` after
about that long; a claim steps past the locked row at once (``SKIP LOCKED``).

SQLite: another connection holds the write lock (``BEGIN IMMEDIATE``). A writer
waits up to ``busy_timeout``, then fails with ``StoreUnavailableError`` ("database
is locked" surfaces as retryable, never as a raw ``sqlite3`` error); readers are
not blocked (WAL).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from airflow_atomic_store import AtomicStore, StoreUnavailableError
from airflow_atomic_store.store.postgres.schema import SCHEMA_LOCK_ID
from tests.support.physical import PG_ROWS_OF, PHYSICAL_TABLE

TIMEOUT = 0.5
#: Scheduling slack on a shared, loaded machine: the bound proves "no hang", not speed.
SLACK = 5.0

BUMP = [{"field": "n", "operation": "increment", "value": 1}]
PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]


def store_with_timeout(backend: str, url: str, seconds: float | None) -> AtomicStore:
    if backend == "sqlite":
        return AtomicStore(url, busy_timeout=seconds if seconds is not None else 60.0)
    return AtomicStore(url, lock_timeout=seconds)


@contextmanager
def lock_held(backend: str, url: str, table: str, key: str) -> Iterator[None]:
    """Hold, from another connection, the lock a write to ``table``/``key`` needs."""
    if backend == "sqlite":
        connection = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            connection.execute("BEGIN IMMEDIATE")
            yield
            connection.execute("ROLLBACK")
        finally:
            connection.close()
        return
    with psycopg.connect(url) as connection:  # not autocommit: the lock lasts until rollback
        locked = connection.execute(
            f"SELECT key FROM {PHYSICAL_TABLE} WHERE {PG_ROWS_OF} AND key = %s FOR UPDATE",
            (table, key),
        ).fetchall()
        assert locked == [(key,)]
        yield
        connection.rollback()


WRITES: dict[str, Callable[[AtomicStore], Any]] = {
    "update": lambda s: s.atomic_update("t", "locked", mutations=BUMP),
    "guarded-update": lambda s: s.atomic_update("t", "locked", where=PENDING, mutations=BUMP),
    "upsert": lambda s: s.atomic_upsert("t", "locked", insert_value={}, mutations=BUMP),
    "put": lambda s: s.put("t", "locked", {"replaced": True}),
    "delete": lambda s: s.delete("t", "locked"),
}


SEED = lambda s: s.atomic_upsert("t", "locked", insert_value={})  # noqa: E731


@pytest.fixture
def seeded(store: AtomicStore) -> AtomicStore:
    store.put("t", "locked", {"status": "pending", "n": 0})
    store.put("t", "free", {"status": "pending", "n": 0})
    return store


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_a_write_waiting_on_a_held_lock_fails_retryably_within_the_timeout(
    backend: str, store_url: str, seeded: AtomicStore, write: Callable[[AtomicStore], Any]
) -> None:
    before = seeded.query("t")
    with store_with_timeout(backend, store_url, TIMEOUT) as waiting:
        waiting.get("t", "free")  # connected: the timing below is the wait alone
        with lock_held(backend, store_url, "t", "locked"):
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError) as raised:
                write(waiting)
            elapsed = time.monotonic() - started
        assert TIMEOUT * 0.9 <= elapsed < TIMEOUT + SLACK, f"gave up after {elapsed:.2f}s"
        message = str(raised.value)
        assert ("locked" if backend == "sqlite" else "lock timeout") in message, message
        cause = raised.value.__cause__
        assert isinstance(cause, sqlite3.Error if backend == "sqlite" else psycopg.Error)
        assert seeded.query("t") == before, "a failed wait wrote nothing"
        # The same store (and connection) works as soon as the lock is gone.
        write(waiting)


def test_a_seed_of_a_held_row_only_reads_on_postgres_and_waits_for_the_writer_on_sqlite(
    backend: str, store_url: str, seeded: AtomicStore
) -> None:
    """Seed-if-missing of an existing row writes nothing, so PostgreSQL takes no row lock."""
    with store_with_timeout(backend, store_url, TIMEOUT) as waiting:
        waiting.get("t", "free")
        with lock_held(backend, store_url, "t", "locked"):
            started = time.monotonic()
            if backend == "sqlite":  # one writer at a time: the seed's transaction waits
                with pytest.raises(StoreUnavailableError, match="locked"):
                    SEED(waiting)
                return
            result = SEED(waiting)
            assert time.monotonic() - started < TIMEOUT
        assert result == {
            "inserted": False,
            "value": {"status": "pending", "n": 0},
            "key": "locked",
        }


def test_a_lock_released_within_the_timeout_only_delays_the_write(
    backend: str, store_url: str, seeded: AtomicStore
) -> None:
    with store_with_timeout(backend, store_url, 30.0) as waiting:
        waiting.get("t", "free")
        releaser_ready = threading.Event()
        releasing_at: list[float] = []

        def hold_briefly() -> None:
            with lock_held(backend, store_url, "t", "locked"):
                releaser_ready.set()
                time.sleep(0.5)
                releasing_at.append(time.monotonic())

        holder = threading.Thread(target=hold_briefly)
        holder.start()
        assert releaser_ready.wait(timeout=30)
        result = waiting.atomic_update("t", "locked", where=PENDING, mutations=BUMP)
        finished_at = time.monotonic()
        holder.join(timeout=30)
    assert result["updated"] is True and result["value"]["n"] == 1
    # Measured against the release, not a duration: a loaded machine may be slow
    # to start the write, but a write that did not wait finishes before the release.
    assert finished_at >= releasing_at[0], "the write did not wait for the lock"


def test_reads_are_not_blocked_by_a_held_write_lock(
    backend: str, store_url: str, seeded: AtomicStore
) -> None:
    with store_with_timeout(backend, store_url, TIMEOUT) as reader:
        reader.get("t", "free")
        with lock_held(backend, store_url, "t", "locked"):
            # A read that waited for the lock would fail after TIMEOUT: these succeed.
            assert reader.get("t", "locked") == {"status": "pending", "n": 0}
            assert [row["key"] for row in reader.query("t", where=PENDING)] == ["locked", "free"]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("lock_timeout", [None, TIMEOUT], ids=["no-timeout", "lock-timeout"])
def test_a_claim_steps_past_a_locked_row_without_waiting(
    backend: str, store_url: str, seeded: AtomicStore, lock_timeout: float | None
) -> None:
    seeded.put("t", "later", {"status": "pending", "n": 0})
    # A claim that waited would fail: after lock_timeout, or after the statement
    # timeout that keeps this test from hanging when no lock timeout is set.
    with AtomicStore(store_url, lock_timeout=lock_timeout, statement_timeout=SLACK) as claimer:
        claimer.get("t", "free")
        with lock_held(backend, store_url, "t", "locked"):
            claimed = claimer.atomic_claim("t", where=PENDING, limit=10, execution_id="c")
            assert [row["key"] for row in claimed["claimed"]] == ["free", "later"]
            # A second claim finds nothing it can take, still without waiting.
            assert claimer.atomic_claim("t", where=PENDING, execution_id="c")["count"] == 0
        # Once released, the skipped row is claimable.
        again = claimer.atomic_claim("t", where=PENDING, execution_id="c")
        assert [row["key"] for row in again["claimed"]] == ["locked"]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_statement_timeout_alone_also_bounds_a_lock_wait(
    backend: str, store_url: str, seeded: AtomicStore
) -> None:
    with AtomicStore(store_url, statement_timeout=TIMEOUT) as waiting:
        waiting.get("t", "free")
        with lock_held(backend, store_url, "t", "locked"):
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="statement timeout"):
                waiting.atomic_update("t", "locked", mutations=BUMP)
            assert time.monotonic() - started < TIMEOUT + SLACK
        assert waiting.atomic_update("t", "locked", mutations=BUMP)["value"]["n"] == 1


class _Interrupted(Exception):
    """What Airflow's ``execution_timeout`` raises, from its ``SIGALRM`` handler."""


@contextmanager
def interrupted_after(seconds: float) -> Iterator[None]:
    """Raise ``_Interrupted`` from a signal handler after ``seconds`` (in the main thread)."""

    def on_alarm(*_: object) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_statement_interrupted_by_a_python_exception_leaves_the_store_usable(
    backend: str, store_url: str, seeded: AtomicStore
) -> None:
    """The interruption used to leave the store's one connection mid-statement: every
    later call in the process failed with "another command is already in progress".
    The interrupted write is cancelled too, not left to apply once the lock is free."""
    with (
        lock_held(backend, store_url, "t", "locked"),
        pytest.raises(_Interrupted),
        interrupted_after(TIMEOUT),
    ):
        seeded.atomic_update("t", "locked", mutations=BUMP)
    assert seeded.get("t", "locked") == {"status": "pending", "n": 0}
    assert seeded.atomic_update("t", "locked", mutations=BUMP)["value"]["n"] == 1


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_claim_under_a_held_write_lock_fails_retryably_and_a_first_read_does_not_wait(
    backend: str, store_url: str, seeded: AtomicStore
) -> None:
    with AtomicStore(store_url, busy_timeout=TIMEOUT) as claimer:
        claimer.get("t", "free")
        with lock_held(backend, store_url, "t", "locked"):
            # SQLite has one writer at a time: a claim cannot step past the lock.
            with pytest.raises(StoreUnavailableError, match="database is locked"):
                claimer.atomic_claim("t", where=PENDING)
            # A store's first call finds the schema in place by reading: it needs
            # no write lock for that, so a read goes through.
            with AtomicStore(store_url, busy_timeout=TIMEOUT) as fresh:
                assert fresh.get("t", "free") == {"status": "pending", "n": 0}
        assert claimer.atomic_claim("t", where=PENDING)["count"] == 2


def test_sqlite_first_use_that_must_create_the_schema_under_a_held_write_lock_fails_retryably(
    tmp_path: Any,
) -> None:
    path = tmp_path / "store.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("BEGIN IMMEDIATE")
    try:
        with (
            AtomicStore(f"sqlite:///{path}", busy_timeout=TIMEOUT) as fresh,
            pytest.raises(StoreUnavailableError, match="locked") as raised,
        ):
            fresh.get("t", "k")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # The connection that failed its set-up is closed, though the error's traceback
    # (kept in ``raised``) still refers to it. (Counted after the holder closes:
    # SQLite defers closing a file while another connection in the process locks it.)
    assert "locked" in str(raised.value.__cause__)
    assert open_files(path) == 0
    with AtomicStore(f"sqlite:///{path}", busy_timeout=TIMEOUT) as later:
        later.put("t", "k", {"v": 1})
        assert later.get("t", "k") == {"v": 1}


def open_files(path: Path) -> int:
    """This process's open descriptors on the database file and its WAL and shm files."""
    return sum(
        os.readlink(fd).startswith(str(path))
        for fd in Path("/proc/self/fd").iterdir()
        if fd.is_symlink()
    )


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_postgres_first_use_waiting_for_the_schema_lock_fails_retryably_and_closes_its_session(
    store_url: str,
) -> None:
    """Another process is creating the schema: ``lock_timeout`` bounds that wait too."""

    def sessions() -> int:
        row = observer.execute(
            # The test's own role only: a session another test of this process left
            # closing (a trigger hub's, say) is not this test's to count.
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE usename = current_user AND pid <> pg_backend_pid()"
        ).fetchone()
        assert row is not None
        return int(row[0])

    with psycopg.connect(store_url, autocommit=True) as observer:
        with psycopg.connect(store_url) as holder:
            holder.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_ID,))
            before = sessions()
            with (
                AtomicStore(store_url, lock_timeout=TIMEOUT) as fresh,
                pytest.raises(StoreUnavailableError, match="lock timeout") as raised,
            ):
                fresh.get("t", "k")
            # 55P03 is lock_not_available: the wait ran out, which a retry can outlast.
            assert getattr(raised.value.__cause__, "sqlstate", None) == "55P03"
            # The session that failed its set-up is closed, not left to the garbage
            # collector: the error's traceback (kept in ``raised``) still refers to it.
            # (A closed session leaves pg_stat_activity a moment later: poll.)
            deadline = time.monotonic() + SLACK
            while sessions() != before and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sessions() == before
        with AtomicStore(store_url, lock_timeout=TIMEOUT) as later:
            later.put("t", "k", {"v": 1})
            assert later.get("t", "k") == {"v": 1}
