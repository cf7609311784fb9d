"""The servers a run measures against, and a description of the machine they run on.

One throwaway PostgreSQL server (the test suite's ``PostgresServer``) holds
three databases, so the store, the hand-written baselines and procrastinate
share one server's CPU, memory and settings, and only the code differs:

- ``bench``: the store's table, which the hand-written SQL also uses;
- ``readdelete``: a pgmq-shaped read-then-delete queue;
- ``procrastinate``: procrastinate's own schema.

SQLite files live in a temporary directory removed at the end.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from devkit.postgres_server import PostgresServer

#: More memory than the throwaway default so the 1M-row table stays cached; WAL
#: durability stays off as in the tests (``fsync``, ``synchronous_commit``), for
#: the store and every baseline alike.
SERVER_SETTINGS = {"shared_buffers": "512MB", "max_wal_size": "4GB"}


@dataclass
class BenchEnvironment:
    """Started lazily: scenarios that need no PostgreSQL do not pay for it."""

    server: PostgresServer | None = None
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="atomic-bench-")))
    _databases: dict[str, str] = field(default_factory=dict)

    def postgres_url(self, dbname: str = "bench") -> str:
        if self.server is None:
            self.server = PostgresServer(dbname="bench", settings=SERVER_SETTINGS).start()
            self._databases["bench"] = self.server.url
        if dbname not in self._databases:
            self._databases[dbname] = self.server.create_database(dbname)
        return self._databases[dbname]

    def sqlite_url(self, name: str) -> str:
        return f"sqlite:///{self.directory / name}.db"

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> BenchEnvironment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def describe_machine() -> dict[str, str]:
    """What the numbers were measured on: CPU, cores, memory, versions."""
    import psycopg

    info = {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": _memory(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "sqlite": _sqlite_version(),
        "postgresql": _postgres_version(),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "store code": _store_commit(),
    }
    return info


def _store_commit() -> str:
    """The commit measured, and whether the package had uncommitted changes."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "airflow_atomic_store"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head}{' + uncommitted changes' if dirty else ''}" if head else "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _sqlite_version() -> str:
    import sqlite3

    return sqlite3.sqlite_version


def _postgres_version() -> str:
    postgres = shutil.which("postgres")
    if postgres is None:
        from devkit.postgres_server import find_server_binaries

        postgres = str(find_server_binaries()[0].parent / "postgres")
    try:
        return subprocess.run(
            [postgres, "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except OSError:
        return "unknown"
