"""The command line with Airflow: ``--conn-id`` through the hook, and ``airflow atomic-store``.

``airflow atomic-store`` exists from Airflow 3.2 (provider-info ``"cli"``); on
older lines Airflow ignores the key and ``python -m airflow_atomic_store`` is
the command line. Each ``airflow`` subprocess gets a throwaway ``AIRFLOW_HOME``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.timestamps import shifted
from tests.support.physical import nowhere_url, store_objects
from tests.support.schema_versions import old_store, versions
from tests.support.tiers import postgres_case_in_test_all

STALE = {"status": "in_flight", "claimedBy": "dag/run", "claimedAt": shifted(timedelta(hours=-2))}


def airflow_line() -> tuple[int, int]:
    import airflow

    major, minor = airflow.__version__.split(".")[:2]
    return int(major), int(minor)


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        check=False,
    )


@pytest.fixture
def airflow_home(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "airflow-home"
    home.mkdir()
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
    }


def test_conn_id_reads_the_store_through_the_airflow_connection(
    store: AtomicStore, store_conn: str
) -> None:
    store.put("jobs", "a", {"status": "pending"})
    store.put("jobs", "b", STALE)
    command = ["stats", "jobs", "--conn-id", store_conn, "--stale-after", "1h", "--json"]
    done = run([sys.executable, "-m", "airflow_atomic_store", *command], {})
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["status_counts"] == {"in_flight": 1, "pending": 1}
    assert data["stale_count"] == 1


def test_a_missing_connection_exits_3_and_says_where_airflow_looked() -> None:
    done = run(
        [sys.executable, "-m", "airflow_atomic_store", "tables", "--conn-id", "no_such_store"],
        {},
    )
    assert done.returncode == 3
    assert "AIRFLOW_CONN_NO_SUCH_STORE" in done.stderr
    assert "metadata database" in done.stderr
    assert "airflow connections add" not in done.stderr  # it looked where that one writes


@postgres_case_in_test_all
def test_a_connection_added_with_airflow_connections_add_is_read_by_both_command_lines(
    store: AtomicStore, store_url: str, airflow_home: dict[str, str]
) -> None:
    """``airflow connections add`` keeps the connection in the metadata database, which
    the task SDK's lookup does not read outside a task: the command line must find it
    where Airflow's own CLI does (before, it exited 3 naming that very command)."""
    store.put("jobs", "a", {"status": "pending"})
    migrated = run([sys.executable, "-m", "airflow", "db", "migrate"], airflow_home)
    assert migrated.returncode == 0, migrated.stderr
    add = ["connections", "add", "store_in_db", "--conn-uri", store_url]
    added = run([sys.executable, "-m", "airflow", *add], airflow_home)
    assert added.returncode == 0, added.stderr
    commands = [[sys.executable, "-m", "airflow_atomic_store"]]
    if airflow_line() >= (3, 2):  # ``airflow atomic-store`` exists from 3.2
        commands.append([sys.executable, "-m", "airflow", "atomic-store"])
    for command in commands:
        done = run([*command, "tables", "--conn-id", "store_in_db", "--json"], airflow_home)
        assert done.returncode == 0, (command, done.stderr)
        assert json.loads(done.stdout) == {"tables": [{"table": "jobs", "rows": 1}]}


def test_airflow_atomic_store_migrate_records_an_old_store_through_a_connection(
    store_url: str, store_conn: str, airflow_home: dict[str, str]
) -> None:
    """The one command that writes opens its connection's store for writing."""
    old_store(store_url)
    command = [sys.executable, "-m", "airflow_atomic_store"]
    if airflow_line() >= (3, 2):  # ``airflow atomic-store`` exists from 3.2
        command = [sys.executable, "-m", "airflow", "atomic-store"]
    done = run([*command, "migrate", "--conn-id", store_conn, "--json"], airflow_home)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["applied"] == ["1_recorded", "2_pending_set"]
    assert versions(store_url) == [(1, "recorded"), (2, "pending_set")]


def test_provider_info_names_the_cli_commands() -> None:
    from airflow.cli.cli_config import ActionCommand, GroupCommand

    from airflow_atomic_store.cli.airflow_commands import get_cli_commands
    from airflow_atomic_store.get_provider_info import get_provider_info

    (path,) = get_provider_info()["cli"]
    assert path == "airflow_atomic_store.cli.airflow_commands.get_cli_commands"
    (group,) = get_cli_commands()
    assert isinstance(group, GroupCommand) and group.name == "atomic-store"
    assert all(isinstance(command, ActionCommand) for command in group.subcommands)
    assert sorted(c.name for c in group.subcommands) == [
        "explain-claim",
        "migrate",
        "rows",
        "stale",
        "stats",
        "tables",
    ]


@postgres_case_in_test_all
def test_airflow_atomic_store_runs_the_same_commands_from_3_2(
    store: AtomicStore, store_url: str, store_conn: str, airflow_home: dict[str, str]
) -> None:
    store.put("jobs", "a", {"status": "pending"})
    store.put("jobs", "b", STALE)
    airflow = [sys.executable, "-m", "airflow", "atomic-store"]
    tables = run([*airflow, "tables", "--url", store_url, "--json"], airflow_home)
    if airflow_line() < (3, 2):  # Airflow ignores provider-info "cli" before 3.2
        assert tables.returncode == 2
        assert "invalid choice" in tables.stderr and "atomic-store" in tables.stderr
        return
    assert tables.returncode == 0, tables.stderr
    assert json.loads(tables.stdout) == {"tables": [{"table": "jobs", "rows": 2}]}
    stale = run(
        [*airflow, "stale", "jobs", "--older-than", "1h", "--conn-id", store_conn, "--json"],
        airflow_home,
    )
    assert stale.returncode == 1, stale.stderr
    assert [row["key"] for row in json.loads(stale.stdout)["rows"]] == ["b"]
    bad = json.dumps({"field": "status", "operator": "resembles", "value": 1})
    rejected = run([*airflow, "rows", "jobs", "--url", store_url, "--where", bad], airflow_home)
    assert rejected.returncode == 2
    assert "airflow atomic-store rows: error: where[0].operator" in rejected.stderr


def test_conn_id_where_no_store_is_exits_3_and_nothing_is_created(
    store_url: str, tmp_path: Path
) -> None:
    """As with ``--url``: the connection's store is opened read-only, never created."""
    url = nowhere_url(store_url, tmp_path)
    done = run(
        [sys.executable, "-m", "airflow_atomic_store", "tables", "--conn-id", "typo_store"],
        {"AIRFLOW_CONN_TYPO_STORE": url},
    )
    assert done.returncode == 3, done.stderr
    assert "no SQLite store at" in done.stderr or "no atomic store" in done.stderr
    assert store_objects(url) == ([] if url == store_url else None)
    assert not (tmp_path / "nested").exists()
