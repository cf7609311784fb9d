"""Fixtures shared by every test tier.

``backend``       ``"sqlite"`` or ``"postgres"`` (ids exactly those; postgres cases carry
                  the ``postgres`` marker). Session-scoped, so pytest runs all SQLite cases
                  first and then all PostgreSQL cases.
``postgres_server`` the session's throwaway PostgreSQL server (devkit/postgres_server.py),
                  started on first use and removed at the end. If it cannot start, every
                  PostgreSQL test fails with the server log: PostgreSQL is never skipped.
``store_url``     a fresh, empty store for one test: ``sqlite:///<tmp_path>/store.db``, or
                  ``postgresql://test_<pid>_<n>@127.0.0.1:PORT/atomic_store``: a new non-superuser
                  role whose only search path is its own new schema, so the store's table and
                  functions are private to the test (a few ms; CREATE DATABASE costs ~0.5 s
                  on a busy 2-core machine). Schema and role are dropped at teardown.
``store``         ``AtomicStore(store_url)``, closed at teardown.
``unreachable_url`` a store URL that cannot be reached (tests/support/unreachable.py).

The terminal summary ends with one line per backend (how many tests passed,
failed, were skipped), so a run shows that both backends really ran. Under
``CI`` a skipped PostgreSQL test fails the session.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_atomic_store import AtomicStore
from devkit.postgres_server import PG_BIN_ENV, PostgresServer, PostgresServerError
from tests.support.unreachable import unreachable_store_url

# Sets AIRFLOW_HOME & co. before anything imports Airflow; fixtures for DAG runs.
pytest_plugins = ["tests.support.airflow_plugin"]

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]

_schema_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    # Its binaries: $ATOMIC_STORE_PG_BIN's (another PostgreSQL line, make pg-matrix), else the
    # machine's; devkit honours the variable for every server a test starts.
    try:
        server = PostgresServer(
            dbname="atomic_store", bin_dir=os.environ.get(PG_BIN_ENV) or None
        ).start()
    except PostgresServerError as exc:
        where = "under CI" if os.environ.get("CI") else "locally"
        pytest.fail(
            f"PostgreSQL could not be started {where}; PostgreSQL tests are never skipped.\n{exc}",
            pytrace=False,
        )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = f"test_{os.getpid()}_{next(_schema_numbers)}"
    url = server.create_user_schema(name)
    try:
        yield url
    finally:
        server.drop_user_schema(name)


@pytest.fixture
def store(store_url: str) -> Iterator[AtomicStore]:
    with AtomicStore(store_url) as opened:
        yield opened


@pytest.fixture
def unreachable_url(backend: str, tmp_path: Path) -> Iterator[str]:
    with unreachable_store_url(backend, tmp_path) as url:
        yield url


# -- per-backend summary ------------------------------------------------------------------

# The backend travels in each report's user properties, so that the count is also right
# where reports come from other processes (pytest-xdist's workers).
_backend_of: dict[str, str] = {}
_outcome_of: dict[str, str] = {}
_SEVERITY = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "backend" in callspec.params:
            item.user_properties.append(("backend", str(callspec.params["backend"])))
        elif item.get_closest_marker("postgres") is not None:
            item.user_properties.append(("backend", "postgres"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    backend = dict(report.user_properties).get("backend")
    if backend is None:
        return
    _backend_of[report.nodeid] = str(backend)
    if report.failed:
        outcome = "failed" if report.when == "call" else "error"
    elif report.skipped:
        outcome = "skipped"
    elif report.when == "call":
        outcome = "passed"
    else:
        return
    previous = _outcome_of.get(report.nodeid, "passed")
    _outcome_of[report.nodeid] = max(previous, outcome, key=_SEVERITY.__getitem__)


def _counts(backend: str) -> Counter[str]:
    return Counter(
        outcome for nodeid, outcome in _outcome_of.items() if _backend_of[nodeid] == backend
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _outcome_of:
        return
    terminalreporter.section("backends")
    for backend in ("sqlite", "postgres"):
        counts = _counts(backend)
        text = ", ".join(f"{counts[o]} {o}" for o in _SEVERITY if counts[o]) or "no tests ran"
        terminalreporter.write_line(f"{backend:>9}: {text}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    skipped = _counts("postgres")["skipped"]
    if os.environ.get("CI") and skipped and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nCI: {skipped} PostgreSQL test(s) were skipped; PostgreSQL is never skipped in CI")
