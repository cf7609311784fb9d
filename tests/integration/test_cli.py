"""``python -m airflow_atomic_store`` in real subprocesses, against SQLite and PostgreSQL stores.

JSON output is parsed and checked against what the test wrote; exit codes are
the documented ones (0 ok, 1 stale claims found, 2 usage or bad filter,
3 store unreachable or missing).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.timestamps import shifted
from tests.support.physical import journal_mode, nowhere_url, store_objects
from tests.support.specs import PENDING


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "airflow_atomic_store", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )


def cli_json(*args: str, code: int = 0) -> Any:
    done = cli(*args, "--json")
    assert done.returncode == code, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def queue(store: AtomicStore, store_url: str) -> str:
    """jobs: 2 pending, 2 in flight (claimed 90 and 1 minutes ago), 1 done; a lease; a bucket."""
    store.put("jobs", "p1", {"status": "pending"})
    store.put("jobs", "p2", {"status": "pending"})
    for key, minutes in (("old", 90), ("new", 1)):
        store.put(
            "jobs",
            key,
            {
                "status": "in_flight",
                "claimedAt": shifted(timedelta(minutes=-minutes)),
                "claimedBy": f"dag/{key}",
            },
        )
    store.put("jobs", "d1", {"status": "done"})
    store.put("leases", "leader", {"holder": "dag/a", "expiresAt": shifted(timedelta(hours=1))})
    store.put("buckets", "api", {"tokens": 4})
    return store_url


def test_tables_lists_every_table_with_its_row_count(queue: str) -> None:
    assert cli_json("tables", "--url", queue) == {
        "tables": [
            {"table": "buckets", "rows": 1},
            {"table": "jobs", "rows": 5},
            {"table": "leases", "rows": 1},
        ]
    }
    human = cli("tables", "--url", queue)
    assert human.returncode == 0
    assert human.stdout.splitlines() == [
        "TABLE    ROWS",
        "buckets     1",
        "jobs        5",
        "leases      1",
    ]


def test_stats_counts_and_exits_1_when_claims_are_stale(queue: str) -> None:
    data = cli_json("stats", "jobs", "--url", queue, "--stale-after", "15m", code=1)
    assert data["rows"] == 5
    assert data["status_counts"] == {"done": 1, "in_flight": 2, "pending": 2}
    assert data["in_flight_count"] == 2
    assert [(r["key"], r["claimed_by"], r["stale"]) for r in data["in_flight"]] == [
        ("old", "dag/old", True),
        ("new", "dag/new", False),
    ]
    assert 90 * 60 <= data["in_flight"][0]["claim_age_seconds"] < 92 * 60
    assert data["stale_after_seconds"] == 900.0
    assert data["stale_count"] == 1
    assert data["oldest_pending_age_seconds"] >= 0
    assert cli_json("stats", "jobs", "--url", queue, "--stale-after", "2h")["stale_count"] == 0
    assert cli_json("stats", "jobs", "--url", queue)["stale_count"] is None


def test_stats_human_output_shows_counts_and_claims(queue: str) -> None:
    done = cli("stats", "jobs", "--url", queue, "--stale-after", "PT15M")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[:5] == [
        "table           jobs",
        "rows            5",
        f"oldest pending  {lines[2][16:]}",
        "in flight       2",
        "stale (> 15m)   1",
    ]
    assert lines[2][16:].endswith("s")  # a short duration, seconds old
    header = next(line for line in lines if line.startswith("IN FLIGHT"))
    old = next(line for line in lines if line.startswith("old "))
    assert header.split() == ["IN", "FLIGHT", "CLAIMED", "BY", "CLAIMED", "AT", "AGE", "STALE"]
    assert old.index("dag/old") == header.index("CLAIMED BY")
    assert old.endswith("yes")


def test_rows_pages_and_filters_with_the_where_language(queue: str) -> None:
    first = cli_json("rows", "jobs", "--url", queue, "--limit", "2")
    assert [row["key"] for row in first["rows"]] == ["p1", "p2"]
    assert (first["limit"], first["offset"], first["has_more"]) == (2, 0, True)
    rest = cli_json("rows", "jobs", "--url", queue, "--limit", "2", "--offset", "4")
    assert ([row["key"] for row in rest["rows"]], rest["has_more"]) == (["d1"], False)
    either = [
        {"field": "status", "operator": "equals", "value": "done"},
        {"field": "claimedBy", "operator": "equals", "value": "dag/new"},
    ]
    found = cli_json(
        "rows", "jobs", "--url", queue, "--where", json.dumps(either), "--match", "any"
    )
    assert [row["key"] for row in found["rows"]] == ["new", "d1"]
    assert found["rows"][1]["value"] == {"status": "done"}
    assert found["rows"][1]["created_at"].endswith("Z")


def test_rows_show_leases_and_buckets(queue: str) -> None:
    (lease,) = cli_json("rows", "leases", "--url", queue)["rows"]
    assert (lease["shape"], lease["lease_state"]) == ("lease", "held")
    (bucket,) = cli_json("rows", "buckets", "--url", queue)["rows"]
    assert (bucket["shape"], bucket["tokens"]) == ("bucket", 4)
    human = cli("rows", "leases", "--url", queue).stdout
    assert "lease held" in human and '"holder": "dag/a"' in human


def test_a_bad_where_exits_2_naming_the_field(queue: str) -> None:
    bad = json.dumps([{"field": "status", "operator": "resembles", "value": "x"}])
    done = cli("rows", "jobs", "--url", queue, "--where", bad)
    assert done.returncode == 2
    assert "where[0].operator" in done.stderr and "resembles" in done.stderr
    assert done.stdout == ""
    path = json.dumps([{"field": "a..b", "operator": "exists"}])
    done = cli("explain-claim", "jobs", "--url", queue, "--where", path)
    assert (done.returncode, "where[0].field" in done.stderr) == (2, True)
    done = cli("rows", "jobs", "--url", queue, "--where", "{not json")
    assert (done.returncode, "--where" in done.stderr) == (2, True)
    done = cli("rows", "jobs", "--url", queue, "--limit", "0")
    assert (done.returncode, "limit" in done.stderr) == (2, True)


@pytest.mark.parametrize(
    "arguments, named",
    [
        (("stale", "jobs", "--older-than", "9999999999d"), "--older-than"),
        (("stale", "jobs", "--older-than", "36501d"), "older_than"),
        (("stats", "jobs", "--stale-after", "999999999999d"), "--stale-after"),
        (("rows", "jobs", "--offset", str(2**64)), "offset"),
    ],
)
def test_an_out_of_range_duration_or_offset_exits_2_naming_it(
    queue: str, arguments: tuple[str, ...], named: str
) -> None:
    """Exit 1 means "stale claims found": an overflow must never read as that."""
    done = cli(*arguments, "--url", queue)
    assert (done.returncode, named in done.stderr, "Traceback" in done.stderr) == (2, True, False)


def test_a_console_that_cannot_show_a_key_gets_it_escaped(
    store: AtomicStore, store_url: str
) -> None:
    store.put("jobs", "zoë-☃", {"status": "pending", "note": "naïve ☃"})
    latin = {"PYTHONIOENCODING": "latin-1"}
    human = cli("rows", "jobs", "--url", store_url, env=latin)
    assert (human.returncode, "\\u2603" in human.stdout) == (0, True), human.stderr
    done = cli("rows", "jobs", "--url", store_url, "--json", env=latin)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"][0]["key"] == "zoë-☃"


def test_stale_lists_old_claims_and_exits_1_only_when_it_finds_some(queue: str) -> None:
    data = cli_json("stale", "jobs", "--url", queue, "--older-than", "15m", code=1)
    assert (data["count"], data["older_than_seconds"]) == (1, 900.0)
    assert [(row["key"], row["claimed_by"]) for row in data["rows"]] == [("old", "dag/old")]
    assert cli_json("stale", "jobs", "--url", queue, "--older-than", "1d")["count"] == 0
    human = cli("stale", "jobs", "--url", queue, "--older-than", "1d")
    assert (human.returncode, human.stdout.strip()) == (0, "no claim older than 1d")
    done = cli("stale", "jobs", "--url", queue, "--older-than", "soon")
    assert (done.returncode, "--older-than" in done.stderr) == (2, True)


def test_explain_claim_prints_the_plan_and_claims_nothing(queue: str, store: AtomicStore) -> None:
    data = cli_json("explain-claim", "jobs", "--url", queue, "--where", json.dumps(PENDING))
    assert data["table"] == "jobs" and data["plan"].strip()
    human = cli("explain-claim", "jobs", "--url", queue, "--where", json.dumps(PENDING))
    assert human.returncode == 0 and human.stdout.strip() == data["plan"].strip()
    assert [r["key"] for r in store.query("jobs", where=PENDING)] == ["p1", "p2"]


def test_an_unreachable_store_exits_3(unreachable_url: str) -> None:
    done = cli("tables", "--url", unreachable_url)
    assert done.returncode == 3
    assert "error:" in done.stderr and done.stdout == ""


def test_a_missing_sqlite_file_exits_3_and_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "store.db"
    done = cli("stats", "jobs", "--url", f"sqlite:///{path}")
    assert done.returncode == 3
    assert f"no SQLite store at {path}" in done.stderr
    assert not path.parent.exists()


def test_the_url_may_come_from_the_environment(queue: str) -> None:
    done = cli("tables", "--json", env={"ATOMIC_STORE_URL": queue})
    assert done.returncode == 0, done.stderr
    assert [t["table"] for t in json.loads(done.stdout)["tables"]] == ["buckets", "jobs", "leases"]


def test_url_and_conn_id_together_are_a_usage_error(queue: str) -> None:
    done = cli("tables", "--url", queue, "--conn-id", "x")
    assert (done.returncode, "not both" in done.stderr) == (2, True)


def test_an_unknown_url_scheme_is_a_usage_error() -> None:
    done = cli("tables", "--url", "mysql://root:hunter2@db/x")
    assert done.returncode == 2
    assert "hunter2" not in done.stderr + done.stdout


def test_row_data_cannot_drive_the_terminal(store: AtomicStore, store_url: str) -> None:
    store.put("evil", "\x1b[2Jkey", {"note": "\x1b]0;owned\x07", "rtl": "\u202etxt"})
    done = cli("rows", "evil", "--url", store_url)
    assert done.returncode == 0
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout
    assert "\\x1b[2Jkey" in done.stdout
    data = cli_json("rows", "evil", "--url", store_url)
    assert data["rows"][0]["key"] == "\x1b[2Jkey"  # JSON keeps the data exact


def test_the_command_line_runs_without_importing_airflow(queue: str) -> None:
    script = (
        "import runpy, sys\n"
        f"sys.argv = ['x', 'stats', 'jobs', '--url', {queue!r}]\n"
        "try:\n"
        "    runpy.run_module('airflow_atomic_store', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "loaded = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.'))\n"
        "assert not loaded, loaded\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "in flight" in done.stdout


@pytest.mark.postgres
def test_a_password_is_never_printed(postgres_server: Any) -> None:
    role = f"cli_{os.getpid()}"
    postgres_server.create_user_schema(role)
    try:
        good = postgres_server.require_password(role, "Cl1-right-secret")
        with AtomicStore(good) as store:
            store.put("jobs", "a", {"status": "pending"})
        ok = cli("stats", "jobs", "--url", good)
        assert ok.returncode == 0, ok.stderr
        wrong = cli("stats", "jobs", "--url", good.replace("Cl1-right-secret", "Cl1-wrong-one"))
        assert wrong.returncode == 3
        assert "password authentication failed" in wrong.stderr
        closed = cli("tables", "--url", good.replace(f":{postgres_server.port}/", ":1/"))
        assert closed.returncode == 3
        for done in (ok, wrong, closed):
            shown = done.stdout + done.stderr
            assert "Cl1-right-secret" not in shown and "Cl1-wrong-one" not in shown
    finally:
        postgres_server.drop_user_schema(role)


# -- read-only: a missing store is exit 3, and nothing is created ---------------------------


def test_a_store_that_does_not_exist_exits_3_and_nothing_is_created(
    store_url: str, tmp_path: Path
) -> None:
    url = nowhere_url(store_url, tmp_path)
    explain = ["explain-claim", "jobs", "--where", json.dumps(PENDING)]
    for command in (["tables"], ["stats", "jobs"], explain):
        done = cli(*command, "--url", url)
        assert done.returncode == 3, (command, done.stderr)
        assert "no SQLite store at" in done.stderr or "no atomic store" in done.stderr
        assert done.stdout == ""
    assert store_objects(url) == ([] if url == store_url else None)
    assert not (tmp_path / "nested").exists()


def test_a_mistyped_storage_table_exits_3_and_creates_nothing(
    queue: str, store: AtomicStore
) -> None:
    before = store_objects(queue)
    done = cli("tables", "--url", queue, "--storage-table", "typo_rows")
    assert done.returncode == 3, done.stderr
    assert "no table 'typo_rows'" in done.stderr
    assert store_objects(queue) == before


def test_a_sqlite_file_that_is_not_a_store_exits_3_and_is_left_as_it_was(tmp_path: Path) -> None:
    """Airflow's own SQLite metadata database, given by mistake; and an empty file."""
    foreign, empty = tmp_path / "airflow.db", tmp_path / "empty.db"
    with closing(sqlite3.connect(foreign)) as conn, conn:
        conn.execute("CREATE TABLE dag (dag_id TEXT)")
    empty.touch()
    for path in (foreign, empty):
        done = cli("tables", "--url", f"sqlite:///{path}")
        assert done.returncode == 3, done.stderr
        assert f"no atomic store in {path}" in done.stderr
    assert store_objects(f"sqlite:///{foreign}") == ["dag"]
    assert journal_mode(foreign) == "delete"
    assert empty.stat().st_size == 0
