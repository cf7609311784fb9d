"""Destructive paths check everything before their first write (issue 39), on both backends.

A delete-claim, ``retire`` (with or without an archive) and ``delete`` cannot be
undone, so a bad argument must be refused before anything is written: the store is
dumped (every object, every row of every table, receipts, catalog, sequences,
indexes) before and after each refused call and the dumps must be equal. A key used
for one claim mode is refused to the other; an open store whose tables were dropped
fails retryably and recreates them; ``retire`` tells "done" from "stopped at rows
others hold".
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from typing import Any

import pytest

from airflow_atomic_store import (
    AtomicStore,
    IdempotencyKeyError,
    SpecError,
    StoreUnavailableError,
)
from devkit.processes import run_in_processes
from tests.support.physical import PG_ROWS_OF, PHYSICAL_TABLE
from tests.support.specs import PENDING, SET_DONE
from tests.support.store_dump import dump_store

LONG_AGO = "2020-01-01T00:00:00.000000Z"
DONE = [{"field": "status", "operator": "in", "value": ["done"]}]


def _fill(store: AtomicStore) -> None:
    """A store with something in every table: rows, a receipt, an archive, a claim set."""
    for number in range(6):
        store.put("jobs", f"j-{number}", {"status": "pending", "n": number})
    for number in range(4):
        store.put("jobs", f"d-{number}", {"status": "done", "finishedAt": LONG_AGO})
    store.put("jobs_archive", "old", {"status": "done"})
    store.atomic_claim("jobs", where=PENDING, limit=2, idempotency_key="first-claim")
    store.atomic_claim("jobs", where=PENDING, limit=1, mode="delete", idempotency_key="deleted")


BAD_CALL = Callable[[AtomicStore], Any]
#: Every destructive verb with one bad argument, and the field its SpecError names.
REFUSED: dict[str, tuple[BAD_CALL, str]] = {
    "delete-claim-unknown-operator": (
        lambda s: s.atomic_claim(
            "jobs", where=[{"field": "status", "operator": "nope", "value": 1}], mode="delete"
        ),
        "where[0].operator",
    ),
    "delete-claim-with-mutations": (
        lambda s: s.atomic_claim("jobs", where=PENDING, mutations=SET_DONE, mode="delete"),
        "mutations",
    ),
    "delete-claim-limit-0": (
        lambda s: s.atomic_claim("jobs", where=PENDING, limit=0, mode="delete"),
        "limit",
    ),
    "delete-claim-return-fields": (
        lambda s: s.atomic_claim("jobs", where=PENDING, return_fields=[""], mode="delete"),
        "return_fields",
    ),
    "delete-claim-empty-key": (
        lambda s: s.atomic_claim("jobs", where=PENDING, mode="delete", idempotency_key=""),
        "idempotency_key",
    ),
    "delete-claim-integer-table": (
        lambda s: s.atomic_claim(5, where=PENDING, mode="delete"),
        "table",
    ),
    "delete-claim-mode-spelling": (
        lambda s: s.atomic_claim("jobs", where=PENDING, mode="Delete"),
        "mode",
    ),
    "delete-claim-order": (
        lambda s: s.atomic_claim("jobs", where=PENDING, order_by="value.n", mode="delete"),
        "order_by",
    ),
    "retire-integer-archive": (
        lambda s: s.retire("jobs", older_than=60, archive_table=5),
        "archive_table",
    ),
    "retire-empty-archive": (
        lambda s: s.retire("jobs", older_than=60, archive_table=""),
        "archive_table",
    ),
    "retire-into-itself": (
        lambda s: s.retire("jobs", older_than=60, archive_table="jobs"),
        "archive_table",
    ),
    "retire-integer-table": (lambda s: s.retire(7, older_than=60), "table"),
    "retire-pending": (
        lambda s: s.retire("jobs", older_than=60, statuses=["done", "pending"]),
        "statuses",
    ),
    "retire-negative-age": (lambda s: s.retire("jobs", older_than=-1), "older_than"),
    "retire-limit-0": (lambda s: s.retire("jobs", older_than=60, limit=0), "limit"),
    "retire-finished-field": (
        lambda s: s.retire("jobs", older_than=60, finished_field="a..b"),
        "finished_field",
    ),
    "retire-endless-budget": (
        lambda s: s.retire("jobs", older_than=60, time_budget=float("inf")),
        "time_budget",
    ),
    "delete-empty-key": (lambda s: s.delete("jobs", ""), "key"),
    "delete-integer-table": (lambda s: s.delete(3, "j-0"), "table"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refused_destructive_call_leaves_the_store_byte_for_byte_as_it_was(
    store: AtomicStore, store_url: str, case: str
) -> None:
    call, field = REFUSED[case]
    _fill(store)
    before = dump_store(store_url)
    with pytest.raises(SpecError) as raised:
        call(store)
    assert raised.value.field == field
    assert dump_store(store_url) == before


def test_retire_refuses_an_archive_table_that_is_not_a_string(store: AtomicStore) -> None:
    store.put("jobs", "d-0", {"status": "done", "finishedAt": LONG_AGO})
    with pytest.raises(SpecError, match="archive_table: must be a string, got int"):
        store.retire("jobs", older_than=60, archive_table=5)
    assert store.query("5") == []
    assert store.get("jobs", "d-0") is not None


@pytest.mark.parametrize(("first", "second"), [("mark", "delete"), ("delete", "mark")])
def test_a_key_used_by_one_claim_mode_is_refused_to_the_other_and_writes_nothing(
    store: AtomicStore, store_url: str, first: str, second: str
) -> None:
    for number in range(6):
        store.put("jobs", f"j-{number}", {"status": "pending"})
    taken = store.atomic_claim("jobs", where=PENDING, limit=2, mode=first, idempotency_key="k")
    before = dump_store(store_url)
    with pytest.raises(IdempotencyKeyError, match="'k'") as raised:
        store.atomic_claim("jobs", where=PENDING, limit=2, mode=second, idempotency_key="k")
    assert raised.value.key == "k"
    assert dump_store(store_url) == before
    # The key still replays to its own mode.
    again = store.atomic_claim("jobs", where=PENDING, limit=2, mode=first, idempotency_key="k")
    assert again == {**taken, "replayed": True}


# -- a dropped schema -----------------------------------------------------------------------

_DROPPED = (PHYSICAL_TABLE, f"{PHYSICAL_TABLE}_claim_sets", f"{PHYSICAL_TABLE}_receipts")


def _drop_the_stores_tables(store_url: str) -> None:
    """Drop every table of the store from another connection, as an admin's script would."""
    if store_url.startswith("sqlite:///"):
        with closing(sqlite3.connect(store_url.removeprefix("sqlite:///"))) as admin, admin:
            for name in _DROPPED:
                admin.execute(f"DROP TABLE {name}")
        return
    import psycopg

    with psycopg.connect(store_url, autocommit=True) as admin:
        admin.execute(f"DROP TABLE {', '.join((*_DROPPED, f'{PHYSICAL_TABLE}_tables'))}")


def test_an_open_store_whose_tables_were_dropped_fails_retryably_and_then_recreates_them(
    store: AtomicStore, store_url: str
) -> None:
    store.put("jobs", "a", {"status": "pending"})
    _drop_the_stores_tables(store_url)
    with pytest.raises(StoreUnavailableError, match="schema is gone"):
        store.get("jobs", "a")
    # No other process had to open a store: the next call made the schema again.
    store.put("jobs", "b", {"status": "pending"})
    assert store.query("jobs") == [{"key": "b", "value": {"status": "pending"}}]
    claimed = store.atomic_claim("jobs", where=PENDING, mode="delete", idempotency_key="after")
    assert [row["key"] for row in claimed["claimed"]] == ["b"]


# -- retention stopped at rows others hold --------------------------------------------------

HELD = ("d-0003", "d-0005", "d-0008")


def _hold_rows(barrier: Any, store_url: str) -> str:
    """Hold three finished rows in an open transaction while the other process retires.

    PostgreSQL: row locks until the retirer is done (its ``SKIP LOCKED`` steps past
    them). SQLite has one writer at a time: the write lock, for a second, which the
    retirer waits out.
    """
    if store_url.startswith("sqlite:///"):
        with closing(sqlite3.connect(store_url.removeprefix("sqlite:///"))) as conn:
            conn.isolation_level = None
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                f"UPDATE {PHYSICAL_TABLE} SET record_timestamp = record_timestamp "
                f"WHERE key IN ({', '.join('?' * len(HELD))})",
                HELD,
            )
            barrier.wait(timeout=60)  # the retirer starts now, and waits for this lock
            time.sleep(1.0)
            conn.execute("COMMIT")
        barrier.wait(timeout=60)
        return "released"
    import psycopg

    with psycopg.connect(store_url) as conn:
        conn.execute(
            f"SELECT key FROM {PHYSICAL_TABLE} WHERE {PG_ROWS_OF} AND key = ANY(%s) FOR UPDATE",
            ("jobs", list(HELD)),
        )
        barrier.wait(timeout=60)  # the retirer starts now
        barrier.wait(timeout=60)  # ...and has returned
        conn.rollback()
    return "released"


def _retire(barrier: Any, store_url: str) -> dict[str, Any]:
    with AtomicStore(store_url) as store:
        store.get("jobs", "warm-up")
        barrier.wait(timeout=60)
        result = store.retire("jobs", older_than=60, limit=500)
        left = store.count("jobs", where=DONE)
        barrier.wait(timeout=60)
    return {**result, "left": left}


def test_retire_reports_complete_only_when_no_retirable_row_is_left(
    store: AtomicStore, store_url: str, backend: str
) -> None:
    for number in range(10):
        store.put("jobs", f"d-{number:04d}", {"status": "done", "finishedAt": LONG_AGO})
    held, result = run_in_processes(
        _dispatch, [("hold", store_url), ("retire", store_url)], timeout=120
    )
    assert held == "released"
    # Never "complete" while retirable rows remain, on either backend.
    assert result["complete"] == (result["left"] == 0)
    if backend == "postgres":  # SKIP LOCKED stepped past the held rows: said so
        assert result == {
            "retired": 7,
            "batches": 1,
            "complete": False,
            "stopped": "held",
            "left": 3,
        }
        assert store.retire("jobs", older_than=60)["stopped"] == "done"
        assert store.count("jobs", where=DONE) == 0
    else:  # one writer at a time: the retire waited for the lock and took every row
        assert result == {
            "retired": 10,
            "batches": 1,
            "complete": True,
            "stopped": "done",
            "left": 0,
        }


def _dispatch(barrier: Any, role: str, store_url: str) -> Any:
    return {"hold": _hold_rows, "retire": _retire}[role](barrier, store_url)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_dropped_store_function_is_retryable_and_the_next_call_installs_it_again(
    store: AtomicStore, store_url: str
) -> None:
    """PostgreSQL only: the store's functions live beside its tables (SQLite has none)."""
    import psycopg

    store.put("counters", "c", {"n": 0})
    with psycopg.connect(store_url, autocommit=True) as admin:
        admin.execute("DROP FUNCTION atomic_store_receipt_v1")
    with pytest.raises(StoreUnavailableError, match="schema is gone"):
        store.atomic_upsert("counters", "c", insert_value={}, idempotency_key="k")
    applied = store.atomic_upsert("counters", "c", insert_value={}, idempotency_key="k")
    assert (applied["inserted"], applied["replayed"]) == (False, False)
