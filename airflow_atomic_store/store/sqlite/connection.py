"""The SQLite backend's one connection: opened lazily, WAL, schema, transactions.

Opened read-only (for inspection), the file is opened with ``mode=ro`` and must
already hold a store: no directory, journal mode or schema is made or changed.
"""

from __future__ import annotations

import errno
import json
import os
import random
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from airflow_atomic_store import timestamps
from airflow_atomic_store.exceptions import (
    AtomicStoreError,
    ConnectionConfigError,
    StoreLocationError,
    StoreUnavailableError,
)
from airflow_atomic_store.spec.claim_sets import DEFAULT_SET, ClaimSet
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store import migrations
from airflow_atomic_store.store.migrations import Migrated
from airflow_atomic_store.store.sql import WhereCompiler, named_queries, named_sections
from airflow_atomic_store.store.sqlite.statements import SqliteWhere, register_functions

DEFAULT_BUSY_TIMEOUT = 60.0
#: The tables and indexes (package data), one statement per name, in creation order;
#: ``{table}`` is the validated storage table.
_SCHEMA = named_queries(__package__, "schema.sql")
_WHERE = WhereCompiler(SqliteWhere())
_RECORD_SET = (
    "INSERT INTO {table}_claim_sets (name, spec, origin, created_at, used_at) "
    "VALUES (:name, :spec, 'declared', :now, :now) "
    "ON CONFLICT (name) DO UPDATE SET origin = 'declared', problem = NULL"
)
#: Reading and recording the schema version; the steps past version 1.
_VERSION_QUERIES = named_queries(__package__, "schema_versions.sql")
MIGRATIONS = migrations.load(__package__)
#: The rows table's column that marks version 1's layout (the logical table's name).
KEY_COLUMN = "table_name"

_TRANSIENT_MESSAGES = ("locked", "busy", "unable to open", "disk i/o")


def is_transient(exc: sqlite3.OperationalError) -> bool:
    """Lock waits that outlasted the busy timeout and I/O trouble: a retry may succeed."""
    return any(text in str(exc).lower() for text in _TRANSIENT_MESSAGES)


def permanent_problem(path: str) -> str | None:
    """Why the store file can never be opened where it is, or None if a retry may help.

    SQLite reports both as "unable to open database file", as it does a brief
    shortage (file descriptors, a network filesystem's hiccup): a directory at the
    store's path, and a read-only filesystem (SQLite writes a journal, or the WAL's
    ``-wal`` and ``-shm`` files, beside the store even to read it).
    """
    place = Path(path)
    if place.is_dir():
        return f"{path} is a directory; a SQLite store URL names a file"
    existing = next((p for p in (place, *place.parents) if p.exists()), None)
    if existing is not None and os.statvfs(existing).f_flag & os.ST_RDONLY:
        return (
            f"{existing} is on a read-only filesystem; a SQLite store needs a writable "
            "directory (it writes its journal and WAL files beside the store file)"
        )
    return None


class SqliteConnection:
    """A single connection to the store file, opened on first use.

    :param path: the store file (its directory is created if missing).
    :param table: the storage table (validated).
    :param busy_timeout: seconds a writer waits for the write lock.
    :param read_only: open an existing store with ``mode=ro`` and create nothing
        (:meth:`_open_read_only`); SQLite itself then refuses every write.
    """

    def __init__(
        self, path: str, *, table: str, busy_timeout: float, read_only: bool = False
    ) -> None:
        self._path = path
        self._table = table
        self._busy_timeout = busy_timeout
        self._read_only = read_only
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._versions = {
            name: statement.format(table=table) for name, statement in _VERSION_QUERIES.items()
        }
        self._holes = migrations.holes(table, lambda name: f'"{name}"')
        #: What opening the connection found and did to the schema (``store/migrations.py``).
        self.migrated: Migrated | None = None

    def _open(self) -> sqlite3.Connection:
        if self._read_only:
            return self._open_read_only()
        parent = Path(self._path).parent
        parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(
            self._path,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:  # a connection whose set-up fails is closed, not left to the collector
            register_functions(connection)
            self._use_wal(connection)
            connection.execute("PRAGMA synchronous=NORMAL")
            self.migrated = self._ensure_schema(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _open_read_only(self) -> sqlite3.Connection:
        """The existing store file, ``mode=ro``: a missing file or store is an error.

        Checked before connecting, since even ``mode=ro`` can create nothing but
        still reports a missing file as "unable to open", which reads as an outage.
        """
        path = Path(self._path)
        if not path.is_file():
            raise ConnectionConfigError(
                f"no SQLite store at {path}: the file does not exist "
                "(inspection opens a store read-only and creates nothing)"
            )
        uri = f"file:{urllib.parse.quote(str(path.absolute()))}?mode=ro"
        connection = sqlite3.connect(
            uri, uri=True, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            register_functions(connection)
            self._require_store(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _require_store(self, connection: sqlite3.Connection) -> None:
        """Refuse a file without this store's tables (another program's database, a
        mistyped storage table): reading it would show an empty store."""
        needed = (self._table, f"{self._table}_claim_sets")  # what inspection reads
        present = {
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (:rows, :sets)",
                {"rows": needed[0], "sets": needed[1]},
            )
        }
        if self._table not in present:
            raise ConnectionConfigError(
                f"no atomic store in {self._path}: it has no table {self._table!r} (not a "
                "store, or another storage table); inspection opened it read-only, unchanged"
            )
        if needed[1] not in present:
            raise AtomicStoreError(
                f"SQLite store error: {self._path} has no table {needed[1]!r}; a store "
                "opened for writing (any task) completes it, inspection changes nothing"
            )
        version = self._recorded_version(
            connection, self._present(connection, self._schema_names())
        )
        migrations.refuse_newer(version, MIGRATIONS, self._table)
        if (version or migrations.BASELINE) != migrations.latest(MIGRATIONS):
            raise migrations.behind(version, MIGRATIONS, self._table, "it was opened read-only")

    def _ensure_schema(self, connection: sqlite3.Connection) -> Migrated:
        """Bring the store to this release's version and create what is missing.

        Checked first without the write lock: every store opens a connection (every
        Airflow task does), and a read-only task should not queue behind the writers
        just to learn the schema is current. Then again inside ``BEGIN IMMEDIATE``,
        which one process at a time holds: the migrations, the tables and the record
        commit together. ``store/migrations.py`` says what each version does.
        """
        latest = migrations.latest(MIGRATIONS)
        names = self._schema_names()
        present = self._present(connection, names)
        version = self._recorded_version(connection, present)
        if present == names and version == latest:
            return Migrated(self._table, latest, latest)
        migrations.refuse_newer(version, MIGRATIONS, self._table)
        connection.execute("BEGIN IMMEDIATE")
        try:
            present = self._present(connection, names)
            version = self._recorded_version(connection, present)
            migrations.refuse_newer(version, MIGRATIONS, self._table)
            found = version
            if version is None and self._table in present:
                found = self._unrecorded_version(connection)
            for step in migrations.pending(found, MIGRATIONS):
                for statement in named_sections(step.text).values():
                    connection.execute(statement.format_map(self._holes))
            for statement in _SCHEMA.values():
                connection.execute(statement.format(table=self._table))
            if self._table not in present:  # a new rows table: the queue's pending set with it
                self.create_set(connection, DEFAULT_SET.index_name(self._table), DEFAULT_SET)
            recorded = version is not None
            if version != latest:
                for row in migrations.records(found, recorded, MIGRATIONS):
                    connection.execute(self._versions["record"], {**row, "now": timestamps.now()})
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        steps = migrations.applied(found, recorded, MIGRATIONS) if version != latest else ()
        return Migrated(self._table, found, latest, steps)

    def _schema_names(self) -> set[str]:
        """The tables and indexes ``schema.sql`` creates."""
        return {
            self._table,
            f"{self._table}_created_idx",
            f"{self._table}_claim_sets",
            f"{self._table}_receipts",
            f"{self._table}_receipts_expiry_idx",
            f"{self._table}_migrations",
        }

    def _present(self, connection: sqlite3.Connection, names: set[str]) -> set[str]:
        wanted = json.dumps(sorted(names))
        return {
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE name IN (SELECT value FROM json_each(:names))",
                {"names": wanted},
            )
        }

    def _recorded_version(self, connection: sqlite3.Connection, present: set[str]) -> int | None:
        """The store's recorded version; None when it has no record (new, or older than records)."""
        if f"{self._table}_migrations" not in present:
            return None
        (version,) = connection.execute(self._versions["version"]).fetchone()
        return None if version is None else int(version)

    def _unrecorded_version(self, connection: sqlite3.Connection) -> int:
        """A rows table made before versions were recorded: version 1 if it has 1's key column."""
        (count,) = connection.execute(
            self._versions["has_key_column"], {"table": self._table, "key_column": KEY_COLUMN}
        ).fetchone()
        if not count:
            raise migrations.unknown_layout(self._table, KEY_COLUMN, MIGRATIONS)
        return migrations.BASELINE

    def migrate(self) -> Migrated:
        """Open now (migrating as an open does) and say what was found and done.

        On a connection already open, the check runs again (nothing to do, unless
        someone changed the store meanwhile).
        """
        if self._read_only:
            raise AtomicStoreError(
                f"SQLite store error: {self._path} was opened read-only (for inspection), "
                "which never migrates; open it for writing to migrate"
            )
        with self._lock:
            opening = self._connection is None
            with self.transaction(alone=True) as connection:
                opened = self.migrated if opening else None
                return opened if opened is not None else self._ensure_schema(connection)

    def _use_wal(self, connection: sqlite3.Connection) -> None:
        """Switch a new database to WAL (persistent, so only its first user does).

        Changing the journal mode needs an exclusive lock and SQLite reports
        "database is locked" at once, without the busy handler, while another
        process is opening the same fresh file; so retry until the busy timeout.
        """
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                if connection.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    connection.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if not is_transient(exc) or time.monotonic() > deadline:
                    raise
                if permanent_problem(self._path):  # waiting would not open it (60 s by default)
                    raise
                time.sleep(random.uniform(0.005, 0.05))

    def create_set(self, connection: sqlite3.Connection, name: str, claim_set: ClaimSet) -> None:
        """List a claimable set as declared and create its partial index, in the caller's
        write transaction: ``(table_name, order column, key)`` where its literal
        predicate holds, the same literal SQL a claim the set covers contains."""
        connection.execute(
            _RECORD_SET.format(table=self._table),
            {"name": name, "spec": dumps(claim_set.to_json()), "now": timestamps.now()},
        )
        predicate = _WHERE.literal_predicate(claim_set.conditions, claim_set.match, "value")
        connection.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {self._table} "
            f"(table_name, {claim_set.column}, key) WHERE {predicate}"
        )

    @property
    def read_only(self) -> bool:
        return self._read_only

    @contextmanager
    def transaction(
        self, *, write: bool = True, alone: bool = False
    ) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` (or, to only read, ``BEGIN``) … ``COMMIT``.

        Any exception rolls back, so a primitive never half-applies. ``alone``:
        the caller runs one write statement, which SQLite runs as a transaction
        of its own that takes the write lock (waiting on the busy timeout) before
        it reads, as ``BEGIN IMMEDIATE`` does; the explicit pair would only add
        two round trips.
        """
        if self._read_only and (write or alone):
            raise AtomicStoreError(
                f"SQLite store error: {self._path} was opened read-only (for inspection)"
            )
        with self._lock:
            try:
                if self._connection is None:
                    self._connection = self._open()
                connection = self._connection
                if alone:
                    yield connection
                    return
                connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield connection
                except BaseException:
                    connection.execute("ROLLBACK")
                    raise
                connection.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                if "unable to open" in str(exc) and (problem := permanent_problem(self._path)):
                    raise StoreLocationError(f"SQLite store cannot open: {problem}") from exc
                if is_transient(exc):
                    raise StoreUnavailableError(f"SQLite store unavailable: {exc}") from exc
                if str(exc).startswith("no such table"):
                    # The store's tables were dropped under it: the schema is ensured
                    # when a connection opens, so the next call's creates them again.
                    self.close()
                    raise StoreUnavailableError(
                        f"SQLite store unavailable: its schema is gone ({exc}); "
                        "the next call creates it again"
                    ) from exc
                raise AtomicStoreError(f"SQLite store error: {exc}") from exc
            except sqlite3.Error as exc:
                raise AtomicStoreError(f"SQLite store error: {exc}") from exc
            except OSError as exc:  # the store file's directory cannot be created
                if exc.errno == errno.EROFS:
                    raise StoreLocationError(
                        f"SQLite store cannot open: {exc.filename} is on a read-only filesystem"
                    ) from exc
                raise StoreUnavailableError(f"SQLite store unavailable: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
