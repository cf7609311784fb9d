"""A long-lived process keeps working on the right tables after the store is reset.

PostgreSQL rows carry their logical table's id, and a process looks each name's id
up once and keeps it. The ids used to come from an identity column: after
``TRUNCATE … RESTART IDENTITY`` (or a drop) of the store's tables, another process's
first new table was given id 1 again, and a process still holding ``orders`` = 1
put its rows into ``payroll`` and read ``payroll``'s row as its own. Ids now come
from a sequence that neither statement resets (tables_catalog.sql), and a process
notices that an id it holds is no longer its table's: a write that can insert takes
the id from the catalog in its own statement (a stale id inserts nothing), and a
call that found nothing looks the name up once; either way the process reloads its
ids and makes the call again. SQLite keys rows by table name, so it has nothing to
detect; the same scenario runs on it to show both backends behave alike.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import psycopg
import pytest

from airflow_atomic_store import AtomicStore
from tests.support.long_lived_store import LongLivedStore, long_lived_store

STORAGE = "atomic_store_rows"
_TABLES = (STORAGE, f"{STORAGE}_tables", f"{STORAGE}_claim_sets", f"{STORAGE}_receipts")
_SQLITE_TABLES = (STORAGE, f"{STORAGE}_claim_sets", f"{STORAGE}_receipts")
RESETS = {
    "truncate_restart_identity": f"TRUNCATE {', '.join(_TABLES)} RESTART IDENTITY",
    "drop": f"DROP TABLE {', '.join(_TABLES)}",
}
#: SQLite's equivalents: its rows carry the name, so there is no id to restart.
SQLITE_RESETS = {
    "truncate_restart_identity": [f"DELETE FROM {name}" for name in _SQLITE_TABLES],
    "drop": [f"DROP TABLE {name}" for name in _SQLITE_TABLES],
}
READY = [{"field": "status", "operator": "equals", "value": "ready"}]
LONG_AGO = "2020-01-01T00:00:00.000000Z"
ADD_ONE = [{"field": "n", "operation": "increment", "value": 1}]


def _reset(store_url: str, reset: str) -> None:
    """Reset the store from another connection, as an operator's script would."""
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as admin:
            for statement in SQLITE_RESETS[reset]:
                admin.execute(statement)
        return
    with psycopg.connect(store_url, autocommit=True) as admin:
        admin.execute(RESETS[reset])


def _rows_under_ids_nobody_holds(store_url: str) -> int:
    """Rows whose table id is in no catalog entry (PostgreSQL; SQLite rows carry names)."""
    if store_url.startswith("sqlite"):
        return 0
    with psycopg.connect(store_url) as admin:
        row = admin.execute(
            f"SELECT count(*) FROM {STORAGE} WHERE table_id NOT IN "
            f"(SELECT id FROM {STORAGE}_tables)"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _ok(reply: tuple[str, Any]) -> Any:
    outcome, result = reply
    assert outcome == "ok", result
    return result


def _hold_ids(process: LongLivedStore) -> None:
    """Make the process look up (and keep) an id for each table the scenario uses."""
    _ok(process.call("put", "orders", "o1", {"of": "orders"}))
    _ok(process.call("put", "queue", "q0", {"status": "done"}))
    _ok(process.call("put", "audit", "a0", {"of": "audit"}))
    _ok(process.call("put", "counters", "c", {"n": 0}))
    _ok(process.call("put", "archive", "x0", {"of": "archive"}))


@pytest.mark.parametrize("reset", sorted(RESETS))
def test_a_long_lived_process_acts_on_the_new_tables_after_a_reset(
    store_url: str, reset: str
) -> None:
    with long_lived_store(store_url) as process:
        _hold_ids(process)
        _reset(store_url, reset)
        with AtomicStore(store_url) as other:  # another process makes new tables
            other.put("payroll", "p1", {"of": "payroll", "salary": 1})
            other.put("orders", "o-new", {"of": "orders", "n": 1})
            other.put("orders", "o-gone", {"of": "orders"})
            other.put("queue", "q1", {"status": "ready"})
            other.put("counters", "c", {"n": 10})
            other.put("archive", "x1", {"of": "archive"})

        assert _ok(process.call("count", "queue", where=READY)) == 1  # what a trigger asks
        assert _ok(process.call("get", "orders", "o-new")) == {"of": "orders", "n": 1}
        assert _ok(process.call("get", "orders", "p1")) is None
        updated = _ok(process.call("atomic_update", "orders", "o-new", mutations=ADD_ONE))
        assert updated["updated"] is True
        assert updated["value"]["n"] == 2
        claimed = _ok(process.call("atomic_claim", "queue", where=READY, limit=5))
        assert [row["key"] for row in claimed["claimed"]] == ["q1"]
        counter = _ok(
            process.call("atomic_upsert", "counters", "c", insert_value={"n": 1}, mutations=ADD_ONE)
        )
        assert (counter["inserted"], counter["value"]) == (False, {"n": 11})
        seeded = _ok(process.call("atomic_upsert", "orders", "o-seed", insert_value={"n": 0}))
        assert seeded["inserted"] is True
        assert _ok(process.call("delete", "orders", "o-gone")) is True
        _ok(process.call("put", "orders", "o2", {"of": "orders"}))
        _ok(process.call("put", "audit", "a1", {"of": "audit"}))  # nobody remade "audit"
        listed = _ok(process.call("query", "orders"))
        assert sorted(row["key"] for row in listed) == ["o-new", "o-seed", "o2"]

        with AtomicStore(store_url) as other:
            assert [row["key"] for row in other.query("payroll")] == ["p1"]
            assert sorted(row["key"] for row in other.query("orders")) == ["o-new", "o-seed", "o2"]
            assert other.get("orders", "o-new") == {"of": "orders", "n": 2}
            assert [row["key"] for row in other.query("audit")] == ["a1"]
            assert other.get("queue", "q1")["status"] == "in_flight"  # type: ignore[index]
            assert other.get("counters", "c") == {"n": 11}
        assert _rows_under_ids_nobody_holds(store_url) == 0


@pytest.mark.parametrize("reset", sorted(RESETS))
def test_keyed_calls_after_a_reset_apply_once_on_the_new_tables(store_url: str, reset: str) -> None:
    """A keyed call that met a stale id records nothing for it: the retry records once."""
    with long_lived_store(store_url) as process:
        _hold_ids(process)
        _reset(store_url, reset)
        with AtomicStore(store_url) as other:
            other.put("counters", "c", {"n": 10})
            other.put("queue", "q1", {"status": "ready"})
            other.put("queue", "q2", {"status": "ready"})
            other.put("archive", "x1", {"of": "archive"})

        for attempt in range(2):  # the second is a duplicate delivery: replayed
            updated = _ok(
                process.call(
                    "atomic_update", "counters", "c", mutations=ADD_ONE, idempotency_key="u"
                )
            )
            assert (updated["updated"], updated["value"], updated["replayed"]) == (
                True,
                {"n": 11},
                attempt == 1,
            )
            counted = _ok(
                process.call(
                    "atomic_upsert",
                    "counters",
                    "d",
                    insert_value={"n": 1},
                    mutations=ADD_ONE,
                    idempotency_key="i",
                )
            )
            assert (counted["inserted"], counted["replayed"]) == (True, attempt == 1)
            claimed = _ok(
                process.call("atomic_claim", "queue", where=READY, limit=1, idempotency_key="c")
            )
            assert [row["key"] for row in claimed["claimed"]] == ["q1"]
            assert claimed["replayed"] is (attempt == 1)

        with AtomicStore(store_url) as other:
            assert other.get("counters", "c") == {"n": 11}
            assert other.get("counters", "d") == {"n": 1}
            assert other.get("queue", "q2") == {"status": "ready"}
        assert _rows_under_ids_nobody_holds(store_url) == 0


@pytest.mark.parametrize("reset", sorted(RESETS))
def test_retiring_into_an_archive_after_a_reset_loses_no_row(store_url: str, reset: str) -> None:
    """The archive's id is stale too: the delete-claim must not delete what it cannot copy."""
    with long_lived_store(store_url) as process:
        _hold_ids(process)
        _reset(store_url, reset)
        with AtomicStore(store_url) as other:
            # a table the process first meets now: its id is fresh, the archive's is not
            other.put("finished", "f1", {"status": "done", "finishedAt": LONG_AGO})
            other.put("archive", "x1", {"of": "archive"})  # "archive" gets a new id

        retired = _ok(process.call("retire", "finished", older_than=60, archive_table="archive"))
        assert retired["retired"] == 1
        with AtomicStore(store_url) as other:
            assert sorted(row["key"] for row in other.query("archive")) == ["f1", "x1"]
            assert other.query("finished") == []
        assert _rows_under_ids_nobody_holds(store_url) == 0


@pytest.mark.parametrize("reset", sorted(RESETS))
def test_a_triggers_reads_on_its_own_connection_find_the_new_tables(
    store_url: str, reset: str
) -> None:
    """A trigger's row reads and counts run on the notifications' reader, not the store's
    connection: they look the id up by name, so a trigger a reset left waiting sees the new rows."""
    with AtomicStore(store_url) as waiting:  # the trigger's store, holding the ids
        waiting.put("orders", "o1", {"of": "orders"})
        waiting.put("queue", "q0", {"status": "done"})
        notifications = waiting.notifications()
        _reset(store_url, reset)
        with AtomicStore(store_url) as other:
            other.put("payroll", "p1", {"of": "payroll"})
            other.put("orders", "o-new", {"of": "orders"})
            other.put("queue", "q1", {"status": "ready"})
        assert waiting.get_many("orders", ["o-new", "p1"]) == {"o-new": {"of": "orders"}}
        if notifications is None:  # SQLite: no notifications; its triggers poll the store
            assert waiting.get("orders", "o-new") == {"of": "orders"}
            assert waiting.count("queue", where=READY) == 1
            return
        selection = waiting.watch_selection("queue", READY, at_most=10)

        async def read() -> tuple[Any, Any]:
            reader = notifications.reader(psycopg.conninfo.conninfo_to_dict(store_url))
            try:
                rows = await reader.get_changed("orders", {"o-new": None, "p1": None})
                return rows, await reader.count(selection)
            finally:
                await reader.close()

        rows, backlog = asyncio.run(read())
        assert {key: value for key, (value, _) in rows.items()} == {"o-new": {"of": "orders"}}
        assert (backlog.count, backlog.first) == (1, "q1")
