"""The PostgreSQL driver's one connection: opened lazily, set up, errors translated.

Opened read-only (for inspection), every call is one ``READ ONLY`` transaction with
its timeouts ``SET LOCAL``, and the schema is only probed: no DDL. Nothing is set on
the session: behind PgBouncer's transaction pooling a session setting stays on a
server connection that other clients get next (a read-only session made their
writes fail).

A session's timeouts need not be the store's: with none given, they are whatever
``ALTER DATABASE/ROLE … SET`` or the connection's ``options=-c …`` made them, and
nothing the store does may lose them (:func:`bounded`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import quote, unquote

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from airflow_atomic_store.exceptions import (
    AccessDeniedError,
    AtomicStoreError,
    ConnectionConfigError,
    MutationError,
    ResultTooLargeError,
    SpecError,
    StoreUnavailableError,
)
from airflow_atomic_store.spec.claim_sets import DEFAULT_SET
from airflow_atomic_store.store import migrations
from airflow_atomic_store.store.migrations import Migrated
from airflow_atomic_store.store.postgres import schema
from airflow_atomic_store.store.postgres.statements import (
    MUTATION_ERROR_SQLSTATE,
    RESULT_TOO_LARGE_SQLSTATE,
)

Connect = Callable[[], psycopg.Connection[Any]]
#: The schema version that lists the queue's pending set (``migrations/0002_pending_set.sql``).
PENDING_SET_VERSION = 2
#: Longest a cancel of an interrupted statement may take before its connection is closed anyway.
CANCEL_WAIT = 5.0

log = logging.getLogger("airflow_atomic_store.store")


class PostgresConnection:
    """A single connection, opened on first use, with the store's schema ensured on it.

    :param connect: makes a new psycopg connection.
    :param table_name: the storage table (validated).
    :param secrets: strings (the password) scrubbed from every message.
    :param timeouts: ``lock_timeout`` and ``statement_timeout`` in seconds, or None;
        checked here, before any I/O, whichever way the store was made.
    :param read_only: only read an existing store (:meth:`_require_store`); the
        server refuses every write of the session.
    :param on_schema_created: called after this connection created part of the schema
        (the backend forgets what it remembered of tables that were not there).
    """

    def __init__(
        self,
        connect: Connect,
        *,
        table_name: str,
        secrets: tuple[str, ...],
        timeouts: dict[str, float | None],
        read_only: bool = False,
        on_schema_created: Callable[[], None] = lambda: None,
    ) -> None:
        self._connect = connect
        self._read_only = read_only
        self._on_schema_created = on_schema_created
        self._secrets = secrets
        self._table_name = table_name
        self._timeouts = parse_timeouts(timeouts)
        self._connection: psycopg.Connection[Any] | None = None
        # One cursor for the connection's life, cheaper than one per call; calls are
        # serialised by the lock.
        self._reused_cursor: psycopg.Cursor[Any]
        self._lock = threading.RLock()
        self._depth = 0  # nested ``cursor`` calls: only the outermost ends a read-only transaction
        #: What opening the connection found and did to the schema (``store/migrations.py``).
        self.migrated: Migrated | None = None

    @property
    def read_only(self) -> bool:
        return self._read_only

    def _open(self) -> psycopg.Connection[Any]:
        """Connect and set up; a connection whose set-up fails is closed at once.

        Left to the garbage collector, it stays open as long as anything holds
        the error's traceback (a retry loop logging it, a test's ``raises``).
        """
        connection = self._connect()
        if not isinstance(connection, psycopg.Connection):
            connection.close()
            raise ConnectionConfigError(
                f"the connection factory returned a {type(connection).__module__} connection; "
                "the atomic store needs psycopg 3 (the PostgreSQL provider's hook returns one "
                "when SQLAlchemy 2 and psycopg are installed)"
            )
        try:
            # A factory may hand out connections configured for dict rows (e.g. the
            # Postgres provider's "cursor" extra); the statements here read tuples.
            connection.row_factory = tuple_row
            if self._read_only:
                connection.autocommit = False
                connection.read_only = True  # psycopg begins each transaction READ ONLY
                # Repeatable read, as a snapshot's own transaction asks (it may then run
                # nested, after the timeouts' SET LOCAL); one statement reads the same.
                connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                self._begin_read(connection)
                self._require_store(connection)
                connection.commit()
                return connection
            connection.autocommit = True
            for name, milliseconds in self._timeouts.items():
                if milliseconds is not None:
                    connection.execute(
                        sql.SQL("SELECT set_config({}, {}, false)").format(
                            sql.Literal(name), sql.Literal(f"{milliseconds}ms")
                        )
                    )
            self.migrated = self._ensure_schema(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _begin_read(self, connection: psycopg.Connection[Any]) -> None:
        """Begin a read-only store's transaction (``BEGIN READ ONLY``) under its timeouts.

        ``SET LOCAL`` takes no snapshot, so a snapshot's ``SET TRANSACTION ISOLATION
        LEVEL`` may still follow it.
        """
        for name, milliseconds in self._timeouts.items():
            if milliseconds is not None:
                connection.execute(
                    sql.SQL("SET LOCAL {} = {}").format(
                        sql.Identifier(name), sql.Literal(f"{milliseconds}ms")
                    )
                )

    def _end_read(self, *, commit: bool) -> None:
        """End the read-only call's transaction; one interrupted mid-statement is discarded."""
        connection = self._connection
        if not self._read_only or connection is None or connection.closed or connection.broken:
            return
        if connection.info.transaction_status in (
            TransactionStatus.INTRANS,
            TransactionStatus.INERROR,
        ):
            if commit:
                connection.commit()
            else:
                with contextlib.suppress(psycopg.Error):
                    connection.rollback()

    def _ensure_schema(self, connection: psycopg.Connection[Any]) -> Migrated:
        """Bring the store to this release's version and create what is missing; a new rows
        table gets the queue's pending set with it (``spec/claim_sets.py``'s ``DEFAULT_SET``).

        Checked first without the schema lock (a store at this version that lacks
        nothing opens at once: two statements, no lock), then afresh under it. A
        process that queued behind the creator must not then run ``CREATE INDEX
        IF NOT EXISTS`` on the existing table: its share lock waits for a ``CREATE
        INDEX CONCURRENTLY`` in progress, which waits for the sessions queued on the
        schema lock, a deadlock. ``store/migrations.py`` says what each version does.
        """
        tables = schema.schema_tables(self._table_name)
        latest = migrations.latest(schema.MIGRATIONS)
        missing_tables, functions_missing = self._schema_missing(connection, list(tables))
        version = self._recorded_version(connection, missing_tables)
        if version == latest and not missing_tables and not functions_missing:
            return Migrated(self._table_name, latest, latest)
        migrations.refuse_newer(version, schema.MIGRATIONS, self._table_name)
        with connection.transaction():
            connection.execute(
                "SELECT pg_advisory_xact_lock(%(lock)s)", {"lock": schema.SCHEMA_LOCK_ID}
            )
            missing_tables, functions_missing = self._schema_missing(connection, list(tables))
            version = self._recorded_version(connection, missing_tables)
            found = self._found_version(connection, missing_tables, version)
            if (
                schema.tables_catalog_name(self._table_name) in missing_tables
                and self._table_name not in missing_tables
            ):
                self._refuse_rows_without_catalog(connection)
            holes = schema.migration_holes(self._table_name)
            for step in migrations.pending(found, schema.MIGRATIONS):
                connection.execute(step.text.format_map(holes).encode())
            for name in tables:  # in order: the tables catalog, then the rows table
                if name in missing_tables:
                    connection.execute(tables[name])
            if functions_missing:
                connection.execute(schema.FUNCTIONS_DDL.encode())
            if self._table_name in missing_tables:
                schema.create_default_set(connection, self._table_name)
            recorded = version is not None
            if version != latest:
                record = self._version_query("record")
                for row in migrations.records(found, recorded, schema.MIGRATIONS):
                    connection.execute(record, row)
            if schema.migrations_table_name(self._table_name) in missing_tables:
                self._share_versions_with_readers(connection)
        if missing_tables:
            self._on_schema_created()
        if found is not None and found < PENDING_SET_VERSION <= latest:
            # Migration 2 listed the queue's pending set: build its index now, outside the
            # schema lock, as a declared set is built (the migration's file says why).
            schema.build_set(connection.cursor(), self._table_name, DEFAULT_SET)
        return Migrated(
            self._table_name,
            found,
            latest,
            migrations.applied(found, recorded, schema.MIGRATIONS) if version != latest else (),
        )

    def _recorded_version(
        self, connection: psycopg.Connection[Any], missing: list[str]
    ) -> int | None:
        """The store's recorded version; None when it has no record (new, or older than records)."""
        if schema.migrations_table_name(self._table_name) in missing:
            return None
        row = connection.execute(self._version_query("version")).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def _found_version(
        self, connection: psycopg.Connection[Any], missing: list[str], version: int | None
    ) -> int | None:
        """The version the store is at (None: there is no store yet), under the schema lock.

        A store with a rows table and no record is version 1 if the table has version
        1's key column. One that needs migrating (or its record) is refused, naming
        the command, when this role may not alter it: asked first, so that no
        half-run migration leaves an error in the server's log.
        """
        migrations.refuse_newer(version, schema.MIGRATIONS, self._table_name)
        if version is None and self._table_name in missing:
            return None
        latest = migrations.latest(schema.MIGRATIONS)
        if version == latest:
            return version
        row = connection.execute(
            self._version_query("rows_table"),
            {"table": self._table_name, "key_column": schema.KEY_COLUMN},
        ).fetchone()
        if version is None and row is not None and not row[2]:
            raise migrations.unknown_layout(self._table_name, schema.KEY_COLUMN, schema.MIGRATIONS)
        if row is not None and not row[1]:
            why = f"this role ({row[0]}) may not alter its tables"
            raise migrations.behind(version, schema.MIGRATIONS, self._table_name, why)
        return version if version is not None else migrations.BASELINE

    def _share_versions_with_readers(self, connection: psycopg.Connection[Any]) -> None:
        """``SELECT`` on a new ``_migrations`` for every role that may read the rows table.

        Workers whose grants name the store's tables (docs/deploying.md) read the
        version on every open: without this, the owner's migration of an existing
        store would lock them out.
        """
        readers = connection.execute(
            self._version_query("readers"), {"table": self._table_name}
        ).fetchall()
        for (role,) in readers:
            grantee = sql.SQL("PUBLIC") if role is None else sql.Identifier(role)
            connection.execute(
                sql.SQL("GRANT SELECT ON {} TO {}").format(
                    sql.Identifier(schema.migrations_table_name(self._table_name)), grantee
                )
            )

    def _version_query(self, name: str) -> bytes:
        return (
            schema.VERSION_QUERIES[name]
            .format(migrations=schema.migrations_table(self._table_name))
            .encode()
        )

    def migrate(self) -> Migrated:
        """Open now (migrating as an open does) and say what was found and done.

        On a connection already open, the check runs again (nothing to do, unless
        someone changed the store meanwhile).
        """
        if self._read_only:
            raise AtomicStoreError(
                "PostgreSQL store error: opened read-only (for inspection), which never "
                "migrates; open it for writing to migrate"
            )
        with self._lock:
            opening = self._connection is None or self._connection.closed
            with self.cursor():
                assert self._connection is not None
                opened = self.migrated if opening else None
                return opened if opened is not None else self._ensure_schema(self._connection)

    def _require_store(self, connection: psycopg.Connection[Any]) -> None:
        """Refuse a database without this release's store: inspection reads, never creates.

        A missing rows table (no store here, or a mistyped storage table) would
        otherwise read as an empty store, or be created.
        """
        name = self._table_name
        needed = [schema.tables_catalog_name(name), name, f"{name}_claim_sets"]
        versions = schema.migrations_table_name(name)
        absent, _ = self._schema_missing(connection, [*needed, versions])
        missing = [table for table in absent if table != versions]
        if name in missing:
            raise ConnectionConfigError(
                f"no atomic store in this database: no table {name!r} where the search path "
                "resolves (not a store, or another storage table); inspection creates nothing"
            )
        if missing:
            raise AtomicStoreError(
                f"PostgreSQL store error: {name} has no {', '.join(missing)}; a store opened "
                "for writing (any task) completes it; inspection changed nothing"
            )
        version = self._recorded_version(connection, absent)
        migrations.refuse_newer(version, schema.MIGRATIONS, name)
        if (version or migrations.BASELINE) != migrations.latest(schema.MIGRATIONS):
            raise migrations.behind(version, schema.MIGRATIONS, name, "it was opened read-only")

    def _refuse_rows_without_catalog(self, connection: psycopg.Connection[Any]) -> None:
        """Rows keyed by table ids whose catalog is gone (dropped, or left out of a restore).

        A new, empty catalog would hand the ids out again from 1, so one logical
        table's rows would be read under another's name. Only an empty rows table
        gets a new catalog.
        """
        table = sql.Identifier(self._table_name).as_string(None)
        holds_rows = connection.execute(f"SELECT EXISTS (SELECT FROM {table})".encode()).fetchone()
        if holds_rows is None or holds_rows[0]:
            raise AtomicStoreError(
                f"PostgreSQL store error: {self._table_name} holds rows keyed by table ids, "
                f"but its catalog {schema.tables_catalog_name(self._table_name)} (which "
                "logical table each id is) is missing: restore it with the rows from the "
                "same backup; the store will not guess the names and has changed nothing"
            )

    def _schema_missing(
        self, connection: psycopg.Connection[Any], tables: list[str]
    ) -> tuple[list[str], bool]:
        """(the tables missing, whether a mutation function is), as of this statement."""
        row = connection.execute(
            schema.SCHEMA_PROBE, {"tables": tables, "functions": list(schema.FUNCTION_NAMES)}
        ).fetchone()
        assert row is not None
        return list(row[0]), bool(row[1])

    @contextmanager
    def cursor(self, *, many_rows: bool = False) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor on the live connection, with driver errors translated once, here.

        A cursor keeps its last result until the next statement, so a statement
        that may return many rows gets a cursor of its own, closed afterwards:
        on the reused one a large claimed batch stayed resident (about the
        batch's size again) until the store's next call.
        """
        with self._lock:
            outermost = self._depth == 0
            self._depth += 1
            try:
                if self._connection is None or self._connection.closed:
                    self._connection = self._open()
                    self._reused_cursor = self._connection.cursor()
                if self._read_only and outermost:
                    self._begin_read(self._connection)
                if many_rows:
                    with self._connection.cursor() as own:
                        yield own
                else:
                    yield self._reused_cursor
                if outermost:
                    self._end_read(commit=True)
            except psycopg.Error as exc:
                if outermost:
                    self._end_read(commit=False)
                self._discard_unusable_connection()
                if schema_gone(exc):  # dropped under us: a new connection ensures it
                    self.close()
                error = translate(exc, self._secrets)
                if scrub(str(exc), self._secrets) != str(exc):
                    raise error from None  # the driver's own text, in a traceback, would show it
                raise error from exc
            except BaseException:
                # A Python exception mid-statement (Airflow's execution_timeout raises
                # from a signal handler) left the connection busy: every later call
                # would fail with "another command is already in progress".
                if outermost:
                    self._end_read(commit=False)
                self._discard_unusable_connection()
                raise
            finally:
                self._depth -= 1

    def _discard_unusable_connection(self) -> None:
        """Forget a connection that is broken or still in a statement; the next call opens one.

        A statement still running is cancelled first: closing alone leaves it on
        the server, where a write waiting for a lock would still apply.
        """
        connection = self._connection
        if connection is None or connection.closed or is_idle(connection):
            return
        self._connection = None
        if not connection.broken:
            with contextlib.suppress(Exception):
                _cancel(connection)
        connection.close()

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


def _cancel(connection: psycopg.Connection[Any]) -> None:
    """Ask the server to cancel the connection's statement (``cancel_safe``: psycopg 3.2+)."""
    if hasattr(connection, "cancel_safe"):
        connection.cancel_safe(timeout=CANCEL_WAIT)
    else:
        connection.cancel()


# -- session timeouts ------------------------------------------------------------

#: The store's PostgreSQL timeout options (seconds, each optional).
TIMEOUT_OPTIONS: Final = ("lock_timeout", "statement_timeout")
#: The longest timeout PostgreSQL takes (it counts in 32-bit milliseconds: about 24.8 days).
MAX_TIMEOUT_SECONDS: Final = 2_147_483

_CURRENT = "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
_SET = sql.SQL(
    "SELECT set_config('statement_timeout', {}, false), set_config('lock_timeout', {}, false)"
)


def parse_timeout(name: str, seconds: object) -> int | None:
    """A timeout option as whole milliseconds (None: not given), or a ``SpecError``.

    Checked when the store is made: a bad value used to surface at the first call,
    as a bare ``ValueError`` or a server error. A positive value under a millisecond
    rounds up to 1 ms, since to PostgreSQL 0 ms means no timeout at all.
    """
    if seconds is None:
        return None
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_SECONDS)
    ):
        raise SpecError(
            name,
            f"must be a positive number of seconds, at most {MAX_TIMEOUT_SECONDS} "
            f"(PostgreSQL's longest timeout, about 24 days), got {seconds!r}",
        )
    return max(1, round(seconds * 1000))


def parse_timeouts(options: Mapping[str, object]) -> dict[str, int | None]:
    """Each of ``TIMEOUT_OPTIONS`` in ``options`` as milliseconds (see ``parse_timeout``)."""
    return {name: parse_timeout(name, options.get(name)) for name in TIMEOUT_OPTIONS}


def is_idle(connection: psycopg.Connection[Any]) -> bool:
    """Whether the connection can take a statement: not closed, broken or mid-query.

    A statement interrupted by a Python exception (a signal handler's) leaves it
    ``ACTIVE``; a lost server leaves it ``UNKNOWN``.
    """
    return not connection.broken and connection.info.transaction_status == TransactionStatus.IDLE


@contextlib.contextmanager
def bounded(cursor: psycopg.Cursor[Any], statement: str, lock: str) -> Iterator[None]:
    """The block under these ``statement_timeout`` and ``lock_timeout`` values, then the
    session's own again, read before (not the store's options: see the module).

    A session left mid-statement is not touched: its connection is discarded
    (``PostgresConnection.cursor``), and a statement sent now would replace the
    exception on its way out.
    """
    had = cursor.execute(_CURRENT).fetchone()
    assert had is not None
    set_timeouts(cursor, statement, lock)
    try:
        yield
    finally:
        if is_idle(cursor.connection):
            set_timeouts(cursor, *had)


def set_timeouts(cursor: psycopg.Cursor[Any], statement: str, lock: str) -> None:
    """Set the session's timeouts to these values (``set_config``'s text: ``"2s"``, ``"0"``)."""
    cursor.execute(_SET.format(sql.Literal(statement), sql.Literal(lock)))


# -- errors -------------------------------------------------------------------------

#: SQLSTATE classes that mean "try again later": connection trouble,
#: lock/statement timeouts, serialisation failures, server shutdown.
_TRANSIENT_PREFIXES = ("08", "40", "53", "55P03", "57")
#: SQLSTATEs of a refusal for good: invalid authorization (28000, 28P01), a missing
#: privilege (42501), an unknown database (3D000).
_ACCESS_DENIED_PREFIXES = ("28", "42501", "3D000")
#: The same refusals when connecting, where libpq gives the server's text but no SQLSTATE.
#: PostgreSQL's own limit on one jsonb value, met before ``atomic_store_receipt_v1``
#: can measure a result built larger (SQLSTATE 54000, program_limit_exceeded).
_JSONB_TOO_LARGE = re.compile(r"total size of jsonb (?:array|object) elements exceeds the maximum")
JSONB_MAX_BYTES = 268_435_455
_ACCESS_DENIED_TEXT = re.compile(
    r"authentication failed"  # password (28P01), ident, peer, GSSAPI, LDAP, cert…
    r"|no password supplied"
    r"|pg_hba\.conf rejects connection|no pg_hba\.conf entry"  # 28000
    r"|is not permitted to log in"  # 28000
    r"|permission denied for database"  # 42501: no CONNECT privilege
    r'|(?:role|database) ".*" does not exist'  # 28000, 3D000
)


def schema_gone(exc: psycopg.Error) -> bool:
    """Whether a statement met the store's own schema missing: its tables or functions were
    dropped under an open store (42P01 undefined_table; 42883 for one of its functions).

    The schema is ensured when a connection opens, so the cure is a new connection,
    which creates it again: retryable, not the final error it used to be.
    """
    state = getattr(exc, "sqlstate", None)
    if state == "42P01":  # every relation a statement names is the store's
        return True
    message = exc.diag.message_primary or ""
    # 42883 is also "operator does not exist": only the store's functions count
    return state == "42883" and any(name in message for name in schema.FUNCTION_NAMES)


def translate(exc: psycopg.Error, secrets: tuple[str, ...]) -> AtomicStoreError:
    """The store's error for a driver error; ``secrets`` never appear in its text."""
    state = getattr(exc, "sqlstate", None) or ""
    text = scrub(str(exc), secrets)
    if schema_gone(exc):
        return StoreUnavailableError(
            f"PostgreSQL store unavailable: its schema is gone ({text}); "
            "the next call creates it again"
        )
    if state == MUTATION_ERROR_SQLSTATE:
        diag = exc.diag
        return MutationError(diag.message_detail or "mutations", diag.message_primary or "")
    if state == RESULT_TOO_LARGE_SQLSTATE:
        diag = exc.diag
        return ResultTooLargeError(int(diag.message_hint or 0), int(diag.message_detail or 0))
    if state == "54000" and _JSONB_TOO_LARGE.search(text):
        return ResultTooLargeError(JSONB_MAX_BYTES)
    if state.startswith(_ACCESS_DENIED_PREFIXES) or (
        not state and _ACCESS_DENIED_TEXT.search(text)
    ):
        return AccessDeniedError(
            f"PostgreSQL store access denied: {text}".strip()
            + " (check the connection's user, password and database, the server's "
            "pg_hba.conf and the role's grants; retrying cannot fix it)"
        )
    if state:  # the server said why: only some classes are worth a retry
        transient = state.startswith(_TRANSIENT_PREFIXES)
    else:  # no SQLSTATE: connecting failed, or the connection broke
        transient = isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))
    if transient:
        return StoreUnavailableError(f"PostgreSQL store unavailable: {text}".strip())
    return AtomicStoreError(f"PostgreSQL store error: {text}".strip())


# -- the store's URL: its credentials read, its password kept out of messages ----------
#
# Store URLs: reading the credentials in one, and keeping its password out of messages.
#
# An error message never shows a password, whole or in part. libpq echoes parts of a
# URL it cannot parse: with an unencoded ``@`` in the password
# (``postgresql://u:p@ss@host/db``) it splits at the first ``@`` and reports the host
# ``'ss@host'``; a space or a bad ``%`` escape in the password comes back quoted. So
# the store reads the credentials itself, the way Python's ``urllib`` and Airflow's
# connection URIs do (they end at the last ``@`` of the authority), and hands libpq
# a URL whose user and password are percent-encoded. The password it read is then
# scrubbed from any message the driver writes.

#: Where a URL's query starts: a ``?`` followed by a parameter name and ``=``.
_QUERY = re.compile(r"\?[A-Za-z_][A-Za-z0-9_]*=")
_HIDDEN = "***"


class PostgresUrl:
    """A PostgreSQL URL made safe for libpq, and the password it holds (if any)."""

    def __init__(self, dsn: str, password: str | None) -> None:
        self.dsn = dsn
        self.password = password


def _split(url: str) -> tuple[str, str, str] | None:
    """``(scheme, userinfo, rest)`` of a URL with credentials, else None.

    The userinfo ends at the last ``@`` before the query string, so an unencoded
    ``@`` (or ``/``, ``:``) in the password stays in the password.
    """
    if "://" not in url:
        return None
    scheme, tail = url.split("://", 1)
    query = _QUERY.search(tail)
    head = tail if query is None else tail[: query.start()]
    at = head.rfind("@")
    if at < 0:
        return None
    return scheme, tail[:at], tail[at + 1 :]


def parse_postgres_url(url: str) -> PostgresUrl:
    """``postgresql://…`` with its user and password percent-encoded for libpq."""
    parts = _split(url)
    if parts is None:
        return PostgresUrl("postgresql://" + url.split("://", 1)[-1], None)
    _, userinfo, rest = parts
    user, has_password, password = userinfo.partition(":")
    # Decode first: a password already encoded (p%40ss) stays the same password.
    credentials = quote(unquote(user), safe="")
    secret = unquote(password) if has_password else None
    if secret is not None:
        credentials += ":" + quote(secret, safe="")
    return PostgresUrl(f"postgresql://{credentials}@{rest}", secret)


def scrub(message: str, secrets: tuple[str, ...]) -> str:
    """``message`` with every secret (and its percent-encoded form) replaced by ``***``."""
    for secret in secrets:
        for form in {secret, quote(secret, safe="")}:
            if form:
                message = message.replace(form, _HIDDEN)
    return message
