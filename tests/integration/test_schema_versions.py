"""Schema versions: an older store opens with this release and keeps everything (issue 41).

The old store is built from a3d0ad4's own DDL and the data its ``AtomicStore`` wrote
(``tests/fixtures/a3d0ad4``): rows, keyed calls' receipts, a declared claimable set,
rows delete-claimed into an archive table. Version 1 is that layout: opening it records
the version and runs version 2 (the queue's pending set, issue 41); a synthetic version 2
registered in place of the package's (``tests/support/schema_versions``)
exercises the runner where a real step would run: once, in order, under the lock,
recorded, refused to a role that may not alter the store, done by the CLI instead.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.cli.main import main as cli_main
from airflow_atomic_store.exceptions import SchemaVersionError
from airflow_atomic_store.store import migrations
from airflow_atomic_store.store.postgres.schema import MIGRATIONS as PACKAGE_MIGRATIONS
from devkit.postgres_server import PostgresServer
from tests.support.schema_versions import (
    STORAGE,
    backend_of,
    expected,
    old_store,
    open_old_store_with_synthetic_migration,
    query,
    registered,
    synthetic_migration,
    versions,
)

PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]
LATEST = migrations.latest(PACKAGE_MIGRATIONS)  # this release's version


def _replay(store: AtomicStore, call: dict[str, Any]) -> dict[str, Any]:
    """The keyed call made again with its key: a receipt replays its first result."""
    args = dict(call["args"])
    if call["call"] == "claim":
        table = args.pop("table")
        return store.atomic_claim(table, **args, idempotency_key=call["key"])
    table, key = args.pop("table"), args.pop("key")
    verb = store.atomic_update if call["call"] == "update" else store.atomic_upsert
    return verb(table, key, **args, idempotency_key=call["key"])


def test_a_store_made_by_a3d0ad4_opens_and_keeps_every_row_receipt_and_declared_set(
    store_url: str,
) -> None:
    old_store(store_url)
    before = expected(store_url)
    with AtomicStore(store_url) as store:
        for table, rows in before["rows"].items():
            found = {row["key"]: row["value"] for row in store.query(table, limit=1000)}
            assert found == rows, table
        assert sorted(before["rows"]["jobs_archive"]) == ["job-00", "job-01", "job-02"]
        for call in before["keyed"]:
            assert _replay(store, call) == {**call["result"], "replayed": True}, call["key"]
        idle = "idle_seconds"  # time since the set last served a claim: it grows
        assert [{**s, idle: 0} for s in store.claim_sets()] == [
            {**s, idle: 0} for s in before["sets"]
        ]
        # and it goes on working: the declared set serves the next claim
        claimed = store.atomic_claim("jobs", where=PENDING, limit=2)["claimed"]
        assert [row["key"] for row in claimed] == ["job-03", "job-04"]
        assert store.migrate() == {
            "storage_table": STORAGE,
            "version_before": LATEST,
            "version": LATEST,
            "applied": [],
        }
    assert versions(store_url) == [(1, "recorded"), (2, "pending_set")]


def test_a_new_store_records_this_releases_version(store_url: str) -> None:
    with AtomicStore(store_url) as store:
        assert store.migrate() == {
            "storage_table": STORAGE,
            "version_before": None,
            "version": LATEST,
            "applied": [],
        }
        assert store.migrate()["version_before"] == LATEST  # already open: nothing to do
    assert versions(store_url) == [(LATEST, "created")]


def test_an_old_store_is_migrated_step_by_step_once_and_each_step_is_recorded(
    store_url: str,
) -> None:
    old_store(store_url)
    backend = backend_of(store_url)
    with registered(backend, synthetic_migration(backend)), AtomicStore(store_url) as store:
        assert store.migrate() == {
            "storage_table": STORAGE,
            "version_before": 1,
            "version": 2,
            "applied": ["1_recorded", "2_synthetic"],
        }
        assert store.get("settings", "limits") == expected(store_url)["rows"]["settings"]["limits"]
    with registered(backend, synthetic_migration(backend)), AtomicStore(store_url) as store:
        assert store.migrate()["applied"] == []  # the next open finds version 2
    assert versions(store_url) == [(1, "recorded"), (2, "synthetic")]
    assert len(query(store_url, f"SELECT * FROM {STORAGE}_synthetic")) == 1
    assert query(store_url, f"SELECT count(note) FROM {STORAGE}_receipts") == [(0,)]


def test_a_new_store_is_made_at_the_latest_version_without_running_the_steps(
    store_url: str,
) -> None:
    """The schema files are the latest layout: a new store needs no step."""
    backend = backend_of(store_url)
    with registered(backend, synthetic_migration(backend)), AtomicStore(store_url) as store:
        assert store.migrate()["version_before"] is None
    assert versions(store_url) == [(2, "created")]


def test_concurrent_first_opens_of_an_old_store_migrate_it_once(store_url: str) -> None:
    old_store(store_url)
    context = multiprocessing.get_context("spawn")
    openers = 4
    barrier, results = context.Barrier(openers), context.Queue()
    processes = [
        context.Process(
            target=open_old_store_with_synthetic_migration, args=(store_url, barrier, results)
        )
        for _ in range(openers)
    ]
    for process in processes:
        process.start()
    try:
        outcomes = [results.get(timeout=120) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
    limits = expected(store_url)["rows"]["settings"]["limits"]
    assert outcomes == [("ok", limits)] * openers
    assert len(query(store_url, f"SELECT * FROM {STORAGE}_synthetic")) == 1
    assert versions(store_url) == [(1, "recorded"), (2, "synthetic")]


def test_a_store_newer_than_the_code_refuses_to_open_and_is_left_unchanged(
    store_url: str,
) -> None:
    with AtomicStore(store_url) as store:
        store.put("t", "k", {"n": 1})
    query_then_commit(
        store_url,
        f"INSERT INTO {STORAGE}_migrations (version, name, applied_at) "
        "VALUES (7, 'future', '2999-01-01T00:00:00Z')",
    )
    for read_only in (False, True):
        with (
            AtomicStore(store_url, read_only=read_only) as store,
            pytest.raises(SchemaVersionError) as refused,
        ):
            store.get("t", "k")
        assert (refused.value.found, refused.value.expected) == (7, LATEST)
        message = str(refused.value)
        assert "schema version 7" in message and f"airflow-atomic-store's {LATEST}" in message
        assert "Install that release" in message
    assert versions(store_url)[-1] == (7, "future")
    assert query(store_url, f"SELECT count(*) FROM {STORAGE}") == [(1,)]


def test_read_only_opens_read_a_store_at_this_version_and_refuse_an_older_one(
    store_url: str, second_store_url: str
) -> None:
    """Inspection never migrates: an unrecorded store is version 1, refused until the
    owner migrates it (version 2 gave it the pending set), then read as it is."""
    old_store(store_url)
    backend = backend_of(store_url)
    with (
        AtomicStore(store_url, read_only=True) as store,
        pytest.raises(SchemaVersionError, match=r"opened read-only.*atomic-store migrate"),
    ):
        store.get("settings", "limits")
    tables = {name for (name,) in query(store_url, _TABLE_NAMES[backend])}
    assert f"{STORAGE}_migrations" not in tables  # nothing was recorded or created
    with AtomicStore(store_url) as store:
        assert store.migrate()["applied"] == ["1_recorded", "2_pending_set"]
    with AtomicStore(store_url, read_only=True) as store:
        assert store.get("settings", "limits") == {
            "max": 3,
            "nested": {"deep": [1, 2.5, None, True]},
        }
    old_store(second_store_url)
    with (
        registered(backend, synthetic_migration(backend)),
        AtomicStore(second_store_url, read_only=True) as store,
        pytest.raises(SchemaVersionError, match=r"opened read-only.*atomic-store migrate"),
    ):
        store.get("settings", "limits")
    tables = {name for (name,) in query(second_store_url, _TABLE_NAMES[backend])}
    assert f"{STORAGE}_migrations" not in tables  # nothing was recorded or created


def test_an_unrecorded_rows_table_of_another_layout_is_refused(store_url: str) -> None:
    query_then_commit(store_url, f"CREATE TABLE {STORAGE} (name text, other text)")
    with AtomicStore(store_url) as store, pytest.raises(SchemaVersionError, match="no recorded"):
        store.get("t", "k")
    assert query(store_url, f"SELECT count(*) FROM {STORAGE}") == [(0,)]


def test_the_migrate_command_records_an_old_store_then_finds_nothing_to_do(
    store_url: str,
) -> None:
    old_store(store_url)
    command = [sys.executable, "-m", "airflow_atomic_store", "migrate", "--url", store_url]
    first = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {
        "storage_table": STORAGE,
        "version_before": 1,
        "version": LATEST,
        "applied": ["1_recorded", "2_pending_set"],
    }
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"'{STORAGE}' is at schema version {LATEST}: nothing to do"


# -- a layout that matches a new store's ---------------------------------------------------


def test_an_old_store_once_migrated_has_the_layout_a_new_store_is_made_with(
    store_url: str, second_store_url: str
) -> None:
    """The schema files and the migrations agree: a migrated store is a new one's twin.

    Objects are compared by name, columns, types, defaults, constraints and index
    definitions (the declared set's index, which only the old store has, aside).
    """
    old_store(store_url)
    with AtomicStore(store_url) as store:
        store.migrate()
    with AtomicStore(second_store_url) as store:
        store.migrate()
    assert layout(store_url) == layout(second_store_url)


def layout(url: str) -> list[tuple[Any, ...]]:
    if backend_of(url) == "sqlite":
        found: list[tuple[Any, ...]] = []
        for (name,) in query(url, "SELECT name FROM sqlite_master WHERE type = 'table'"):
            found += [("column", name, *row) for row in query(url, f"PRAGMA table_info({name})")]
            for index in query(url, f"PRAGMA index_list({name})"):
                if "_set_" not in index[1]:
                    columns = query(url, f"PRAGMA index_xinfo({index[1]})")
                    found.append(("index", name, *index[1:], tuple(columns)))
        return sorted(found, key=repr)
    rows = query(url, _POSTGRES_LAYOUT)
    schema = url.split("//", 1)[1].split("@", 1)[0]  # each test role's own schema
    return sorted(tuple(str(part).replace(f"{schema}.", "") for part in row) for row in rows)


_TABLE_NAMES = {
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'table'",
    "postgres": "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()",
}
_POSTGRES_LAYOUT = """
SELECT 'column', c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
    coalesce(co.collname, ''), coalesce(pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 100
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'S')
UNION ALL
SELECT 'index', i.tablename, i.indexname, i.indexdef, true, '', '' FROM pg_indexes i
WHERE i.schemaname = current_schema() AND i.indexname NOT LIKE '%\\_set\\_%'
UNION ALL
SELECT 'constraint', c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid), true,
    '', ''
FROM pg_constraint c WHERE c.connamespace = current_schema()::regnamespace
UNION ALL
SELECT 'function', p.proname, md5(p.prosrc), pg_get_function_arguments(p.oid), true, '', ''
FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace
"""


def query_then_commit(url: str, statement: str) -> None:
    if backend_of(url) == "sqlite":
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
            connection.execute(statement)
        connection.close()
        return
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(statement.encode())


_names = itertools.count(1)


@pytest.fixture
def second_store_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Another empty store beside ``store_url`` (another file, another role's schema)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'second.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = f"second_{os.getpid()}_{next(_names)}"
    url = server.create_user_schema(name)
    try:
        yield url
    finally:
        server.drop_user_schema(name)


# -- PostgreSQL: an owner migrates, workers that may not alter the store then open it -------


@pytest.fixture
def worker_url(postgres_server: PostgresServer, store_url: str) -> Iterator[str]:
    """A login role that may read and write the store's existing tables, not alter them."""
    owner = store_url.split("//", 1)[1].split("@", 1)[0]
    role = f"worker_{os.getpid()}_{next(_names)}"
    old_store(store_url)
    postgres_server.execute(
        f'CREATE ROLE "{role}" LOGIN; ALTER ROLE "{role}" SET search_path = "{owner}"; '
        f'GRANT USAGE ON SCHEMA "{owner}" TO "{role}"; '
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{owner}" TO "{role}"; '
        f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{owner}" TO "{role}"',
        dbname=postgres_server.dbname,
    )
    try:
        yield store_url.replace(f"//{owner}@", f"//{role}@", 1)
    finally:
        postgres_server.execute(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
        )
        postgres_server.execute(
            f'DROP OWNED BY "{role}"; DROP ROLE "{role}"', dbname=postgres_server.dbname
        )


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("steps", ["record only", "synthetic step"])
def test_workers_that_may_not_alter_an_old_store_are_told_to_migrate_then_open_it(
    store_url: str, worker_url: str, steps: str, capsys: pytest.CaptureFixture[str]
) -> None:
    known = (synthetic_migration("postgres"),) if steps == "synthetic step" else ()
    with registered("postgres", *known):
        latest = migrations.latest(known)
        with AtomicStore(worker_url) as store, pytest.raises(SchemaVersionError) as refused:
            store.get("settings", "limits")
        assert (refused.value.found, refused.value.expected) == (None, latest)
        assert "may not alter its tables" in str(refused.value)
        assert "airflow atomic-store migrate" in str(refused.value)
        tables = {name for (name,) in query(store_url, _TABLE_NAMES["postgres"])}
        assert f"{STORAGE}_migrations" not in tables

        assert cli_main(["migrate", "--url", store_url, "--json"]) == 0  # the owner
        assert json.loads(capsys.readouterr().out)["version"] == latest

        with AtomicStore(worker_url) as store:
            before = expected(store_url)
            assert store.get("settings", "limits") == before["rows"]["settings"]["limits"]
            for call in before["keyed"]:
                assert _replay(store, call) == {**call["result"], "replayed": True}
            claimed = store.atomic_claim("jobs", where=PENDING, limit=1)["claimed"]
            assert [row["key"] for row in claimed] == ["job-03"]
        with AtomicStore(worker_url, read_only=True) as store:
            assert store.get("counters", "runs") == {"count": 1}


def test_the_layout_comparison_sees_a_step_the_schema_files_lack(
    store_url: str, second_store_url: str
) -> None:
    """The twin check above has teeth: the synthetic step adds a column no schema file has."""
    old_store(store_url)
    backend = backend_of(store_url)
    with registered(backend, synthetic_migration(backend)):
        for url in (store_url, second_store_url):
            with AtomicStore(url) as store:
                store.migrate()
    difference = set(layout(store_url)) ^ set(layout(second_store_url))
    assert any("note" in map(str, row) for row in difference), difference
