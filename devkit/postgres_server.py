"""A throwaway PostgreSQL server for tests, benchmarks and end-to-end runs.

``PostgresServer`` runs ``initdb`` and ``pg_ctl`` in a temporary directory on
a free loopback port, tuned for speed rather than durability (``fsync=off``).
PostgreSQL refuses to run as root, so when this process is root the server
runs as the ``postgres`` OS user (through ``runuser``) in a directory that
user owns.

    with PostgresServer() as server:
        url = server.create_database("case_1")   # postgresql://postgres@127.0.0.1:PORT/case_1
        ...

The binaries are PostgreSQL's on PATH (Debian's 15 here) unless a ``bin_dir`` is
given or the environment names one in ``ATOMIC_STORE_PG_BIN``: that is how
``make pg-matrix`` runs the whole harness on another server line (13, 14, 16, 18
from ``.pg/<major>/bin``, see scripts/pg_matrix.py).

Nothing here imports pytest: the tests, the benchmarks, the e2e deployment
and the demo share it. Every failure raises ``PostgresServerError`` carrying the tail of the server log.
"""

from __future__ import annotations

import atexit
import glob
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

__all__ = ["PG_BIN_ENV", "PostgresServer", "PostgresServerError", "find_server_binaries"]

#: Names the ``bin/`` directory of the PostgreSQL line every server of this process runs.
PG_BIN_ENV = "ATOMIC_STORE_PG_BIN"
_SERVER_USER = "postgres"
_SUPERUSER = "postgres"
_INITDB_OPTIONS = ("-A", "trust", "-U", _SUPERUSER, "-E", "UTF8", "--locale=C", "--no-sync")
_START_ATTEMPTS = 3
_LOG_TAIL_LINES = 40
_DATABASE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_ICU_LOCALE = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


class PostgresServerError(RuntimeError):
    """The throwaway PostgreSQL server could not be set up or driven."""


def find_server_binaries(
    bin_dir: str | os.PathLike[str] | None = None,
) -> tuple[Path, Path]:
    """Return ``(initdb, pg_ctl)``: from ``bin_dir``, else ``$ATOMIC_STORE_PG_BIN``, else PATH,
    else the newest /usr/lib/postgresql/*/bin.

    A directory that is named but lacks the binaries is an error, never a quiet fall back to
    another line: a matrix run must not pass on the wrong server.
    """
    named = bin_dir if bin_dir is not None else os.environ.get(PG_BIN_ENV) or None
    if named is not None:
        # Resolved: the wheels' binaries find their libraries and share/ relative to
        # their real location, not a symlink's.
        directory = Path(named).resolve()
        initdb_path, pg_ctl_path = directory / "initdb", directory / "pg_ctl"
        if not (os.access(initdb_path, os.X_OK) and os.access(pg_ctl_path, os.X_OK)):
            source = "bin_dir" if bin_dir is not None else PG_BIN_ENV
            raise PostgresServerError(
                f"{source}={os.fspath(named)!r} has no executable initdb and pg_ctl "
                "(make pg-binaries fetches the other lines into .pg/<major>/bin)"
            )
        return initdb_path, pg_ctl_path
    initdb = shutil.which("initdb")
    if initdb is not None:
        bindir = Path(initdb).resolve().parent
        if (bindir / "pg_ctl").exists():
            return bindir / "initdb", bindir / "pg_ctl"
        pg_ctl = shutil.which("pg_ctl")
        if pg_ctl is not None:
            return Path(initdb), Path(pg_ctl)

    def version(bindir: str) -> tuple[int, ...]:
        number = Path(bindir).parent.name
        return tuple(int(part) for part in number.split(".") if part.isdigit())

    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    for candidate in candidates:
        initdb_path, pg_ctl_path = Path(candidate) / "initdb", Path(candidate) / "pg_ctl"
        if initdb_path.exists() and pg_ctl_path.exists():
            return initdb_path, pg_ctl_path
    raise PostgresServerError(
        "PostgreSQL server binaries (initdb, pg_ctl) were not found on PATH or under "
        "/usr/lib/postgresql/*/bin; install them (Debian: apt-get install -y postgresql)"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """A PostgreSQL server in a temporary directory, removed by :meth:`stop`.

    :param dbname: database created at start; :attr:`url` points at it.
    :param max_connections: server ``max_connections`` (at least 100).
    :param base_dir: parent of the temporary directory (default, and when the
        server user cannot enter it: the system temp dir; see :attr:`directory`).
    :param settings: extra ``-c name=value`` server settings.
    :param bin_dir: the ``bin/`` of the PostgreSQL line to run (default: ``$ATOMIC_STORE_PG_BIN``,
        else the one on PATH; see :func:`find_server_binaries`).
    """

    def __init__(
        self,
        *,
        dbname: str = "atomic_store",
        max_connections: int = 200,
        base_dir: str | os.PathLike[str] | None = None,
        settings: dict[str, str] | None = None,
        bin_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if max_connections < 100:
            raise ValueError("max_connections must be at least 100")
        self.dbname = _checked_name(dbname)
        self.max_connections = max_connections
        self.settings = dict(settings or {})
        self._base_dir = base_dir
        self._initdb, self._pg_ctl = find_server_binaries(bin_dir)
        self._as_server_user = os.geteuid() == 0
        self.directory: Path | None = None
        self.port: int | None = None
        self._running = False

    # -- public interface -------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self._require_directory() / "data"

    @property
    def log_path(self) -> Path:
        return self._require_directory() / "server.log"

    @property
    def running(self) -> bool:
        return self._running

    @property
    def bin_dir(self) -> Path:
        """The ``bin/`` directory this server's binaries come from."""
        return self._initdb.parent

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/<dbname>``."""
        return self.url_for(self.dbname)

    def url_for(self, dbname: str) -> str:
        if self.port is None:
            raise PostgresServerError("the server has not been started")
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/{_checked_name(dbname)}"

    def start(self) -> PostgresServer:
        """Create the cluster if needed, start it and create :attr:`dbname`; idempotent."""
        if self._running:
            return self
        if self.directory is not None:  # after shutdown(): same data, same port
            self._start_on_port()
            return self
        atexit.register(self.stop)  # no stray server if the owner forgets (or is interrupted)
        try:
            self._init_cluster()
            self._start_with_free_port()
            self._lock_public_schema()
            self.create_database(self.dbname)
        except BaseException:
            self.stop()
            raise
        return self

    def create_database(
        self, name: str, *, template: str | None = None, icu_locale: str | None = None
    ) -> str:
        """Create database ``name`` and return its URL.

        :param template: copy this database instead of ``template1``.
        :param icu_locale: give the database a linguistic ICU default collation
            (e.g. ``"en-US"``, where ``'a' < 'B'``), as production servers often have,
            instead of the cluster's byte-order ``C`` collation. On a server without ICU
            (13 and 14 cannot make it a database's default; the PyPI builds of 16 and 18 have
            none), the C library's locale of that name (``en_US.UTF-8``) gives the database
            its linguistic collation instead, as on those production servers; the OS must
            have that locale (``make pg-locale``).
        """
        statement = f'CREATE DATABASE "{_checked_name(name)}"'
        if icu_locale is not None:
            if not _ICU_LOCALE.match(icu_locale):
                raise ValueError(f"ICU locale {icu_locale!r} must match {_ICU_LOCALE.pattern}")
            if self._has_icu_defaults():
                statement += f" LOCALE_PROVIDER icu ICU_LOCALE '{icu_locale}' LOCALE 'C.UTF-8'"
            else:
                statement += f" LOCALE '{icu_locale.replace('-', '_')}.UTF-8'"
            template = template or "template0"
        if template is not None:
            statement += f' TEMPLATE "{_checked_name(template)}"'
        self.execute(statement)
        if icu_locale is not None:
            self._check_linguistic(name)
        return self.url_for(name)

    def _check_linguistic(self, dbname: str) -> None:
        """Refuse a database whose default collation still orders ``'B'`` before ``'a'``:
        a test of the store under a linguistic collation would then prove nothing."""
        import psycopg

        with psycopg.connect(self.url_for(dbname), autocommit=True) as conn:
            row = conn.execute("SELECT 'a' < 'B'").fetchone()
        if not (row and row[0]):
            raise self._error(f"database {dbname!r} does not have a linguistic collation")

    def _lock_public_schema(self) -> None:
        """Take ``CREATE`` on schema ``public`` from every role, as PostgreSQL 15 made the default.

        Before 15 any role may create in ``public``: a role whose search path names it (a
        test's "no privilege on the schema") would create its store there, and its objects
        would outlive its own schema. Databases created later copy ``template1``'s grant.
        """
        for dbname in ("template1", "postgres"):
            self.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC", dbname=dbname)

    def _has_icu_defaults(self) -> bool:
        """Whether a database's default collation can be ICU's: 15+ built with ICU."""
        import psycopg

        with psycopg.connect(self.url_for("postgres"), autocommit=True) as conn:
            row = conn.execute(
                "SELECT current_setting('server_version_num')::int >= 150000"
                # initdb imports ICU's locales (``*-x-icu``) only where the build has ICU;
                # 16+ lists an ICU ``unicode`` collation even where it has none.
                " AND EXISTS (SELECT FROM pg_collation WHERE collname LIKE '%-x-icu')"
            ).fetchone()
        return bool(row and row[0])

    def create_user_schema(self, name: str, *, dbname: str | None = None) -> str:
        """Create login role ``name`` owning schema ``name``, its only search path, in ``dbname``.

        Returns a plain URL for that role: everything it creates unqualified lands in
        its own schema, so each role sees an empty, private namespace. This costs a few
        milliseconds where ``CREATE DATABASE`` costs tenths of a second. The role is not
        a superuser and, as on PostgreSQL 15+, cannot create objects in ``public``.
        """
        role = _checked_name(name)
        dbname = dbname or self.dbname
        self.execute(
            f'CREATE ROLE "{role}" LOGIN; '
            f'ALTER ROLE "{role}" SET search_path = "{role}"; '
            f'CREATE SCHEMA "{role}" AUTHORIZATION "{role}"',
            dbname=dbname,
        )
        return f"postgresql://{role}@127.0.0.1:{self.port}/{_checked_name(dbname)}"

    def require_password(self, role: str, password: str, *, dbname: str | None = None) -> str:
        """Give login role ``role`` a password that the server checks (``scram-sha-256``).

        The cluster trusts every local connection (``initdb -A trust``); a line for
        ``role`` alone, ahead of the others in ``pg_hba.conf``, makes the server ask it
        for its password. Returns the role's URL with the password.
        """
        name = _checked_name(role)
        self.execute(f"ALTER ROLE \"{name}\" PASSWORD '{password.replace(chr(39), chr(39) * 2)}'")
        self.add_hba_line(f"host all {name} 127.0.0.1/32 scram-sha-256")
        database = _checked_name(dbname or self.dbname)
        self._wait_until_refused(f"postgresql://{name}@127.0.0.1:{self.port}/{database}")
        secret = urllib.parse.quote(password, safe="")
        return f"postgresql://{name}:{secret}@127.0.0.1:{self.port}/{database}"

    def add_hba_line(self, line: str) -> None:
        """Put ``line`` first in ``pg_hba.conf`` (the first matching line wins) and reload."""
        hba = self.data_dir / "pg_hba.conf"
        hba.write_text(f"{line}\n{hba.read_text()}")  # keeps the file's owner (the server user)
        self.execute("SELECT pg_reload_conf()")

    def drop_user_schema(self, name: str, *, dbname: str | None = None) -> None:
        """Disconnect role ``name``, then drop its schema (with everything in it) and the role."""
        role = _checked_name(name)
        self.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE usename = '{role}' AND pid <> pg_backend_pid()",
        )
        self.execute(
            f'DROP SCHEMA IF EXISTS "{role}" CASCADE; DROP ROLE IF EXISTS "{role}"',
            dbname=dbname or self.dbname,
        )

    def drop_database(self, name: str) -> None:
        """Drop ``name``, disconnecting any sessions still attached to it."""
        self.execute(f'DROP DATABASE IF EXISTS "{_checked_name(name)}" WITH (FORCE)')

    def execute(self, statement: str, *, dbname: str = "postgres") -> None:
        """Run one statement in autocommit mode as the superuser."""
        import psycopg

        try:
            with psycopg.connect(self.url_for(dbname), autocommit=True, connect_timeout=10) as conn:
                conn.execute(statement.encode())
        except psycopg.Error as exc:
            raise self._error(f"{statement!r} failed: {exc}") from exc

    def shutdown(self, mode: str = "fast") -> None:
        """Stop the server but keep its data; :meth:`start` brings it back on the same port."""
        if not self._running:
            return
        self._pg_ctl_run(["stop", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60"])
        self._running = False

    def restart(self, mode: str = "fast") -> None:
        """Stop (``fast`` or ``immediate``) and start again on the same port; data is kept."""
        self.shutdown(mode)
        self._start_on_port()

    def stop(self) -> None:
        """Stop immediately and remove the temporary directory; safe to call twice."""
        if self.directory is None:
            return
        try:
            if self._running:
                self._pg_ctl_run(
                    ["stop", "-D", str(self.data_dir), "-m", "immediate", "-w", "-t", "60"],
                    check=False,
                )
        finally:
            self._running = False
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
            self.port = None

    def start_as_standby(
        self, primary_port: int, *, application_name: str, primary_host: str = "127.0.0.1"
    ) -> PostgresServer:
        """Start as a streaming standby of the server at ``primary_port``.

        A base backup (``pg_basebackup -R``: ``standby.signal`` and a
        ``primary_conninfo``) replaces ``initdb``; the databases are the
        primary's. The standby connects as ``application_name``, the name a
        primary's ``synchronous_standby_names`` lists. ``primary_port`` may be a
        relay's (devkit/relay.py) in front of the primary.
        """
        if self.directory is not None:
            raise PostgresServerError("start_as_standby() is for a server not yet started")
        atexit.register(self.stop)
        try:
            directory = Path(tempfile.mkdtemp(prefix="atomic-pg-", dir=self._cluster_parent()))
            self.directory = directory
            if self._as_server_user:
                shutil.chown(directory, user=_SERVER_USER, group=_SERVER_USER)
            self._run(
                [
                    str(self._pg_basebackup()),
                    *("-D", str(self.data_dir), "-h", primary_host, "-p", str(primary_port)),
                    *("-U", _SUPERUSER, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync"),
                ],
                what="pg_basebackup",
            )
            conninfo = (
                f"host={primary_host} port={primary_port} user={_SUPERUSER} "
                f"application_name={application_name}"
            )
            # The last setting in the file wins over the one pg_basebackup -R wrote; the
            # file keeps its owner (the server user) when appended to.
            with (self.data_dir / "postgresql.auto.conf").open("a") as conf:
                conf.write(f"primary_conninfo = '{conninfo}'\n")
            self._start_with_free_port()
        except BaseException:
            self.stop()
            raise
        return self

    def _pg_basebackup(self) -> Path:
        """``pg_basebackup`` of this server's version: beside ``pg_ctl``, else on PATH."""
        beside = self._pg_ctl.parent / "pg_basebackup"
        found = beside if beside.exists() else shutil.which("pg_basebackup")
        if found is None:
            raise PostgresServerError(
                f"pg_basebackup was not found beside {self._pg_ctl} or on PATH"
            )
        return Path(found)

    def promote(self) -> None:
        """Promote a standby: it leaves recovery and accepts writes when this returns."""
        self._pg_ctl_run(["promote", "-D", str(self.data_dir), "-w", "-t", "60"])

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, PostgresServerError):
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:]) or "(server log is empty)"

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"<PostgresServer {state} port={self.port} dir={self.directory}>"

    # -- internals ----------------------------------------------------------------------------

    def _require_directory(self) -> Path:
        if self.directory is None:
            raise PostgresServerError("the server has no directory (not started, or stopped)")
        return self.directory

    def _init_cluster(self) -> None:
        directory = Path(tempfile.mkdtemp(prefix="atomic-pg-", dir=self._cluster_parent()))
        self.directory = directory
        if self._as_server_user:
            shutil.chown(directory, user=_SERVER_USER, group=_SERVER_USER)
        self._run(
            [str(self._initdb), "-D", str(self.data_dir), *_INITDB_OPTIONS],
            what="initdb",
        )

    def _cluster_parent(self) -> str | os.PathLike[str] | None:
        """``base_dir``, or the system temp dir if the server user cannot enter it.

        As root the server runs as ``postgres``, which needs to pass through every
        directory above its data: a project cloned into a private directory (say
        ``$(mktemp -d)/c``, mode 0700) is out of its reach.
        """
        if self._base_dir is None or not self._as_server_user:
            return self._base_dir
        probe = subprocess.run(
            ["runuser", "-u", _SERVER_USER, "--", "test", "-x", str(self._base_dir)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )
        return self._base_dir if probe.returncode == 0 else None

    def _start_with_free_port(self) -> None:
        last_error: PostgresServerError | None = None
        for _ in range(_START_ATTEMPTS):
            self.port = _free_port()
            try:
                self._start_on_port()
                return
            except PostgresServerError as exc:  # most likely the port was taken meanwhile
                last_error = exc
        assert last_error is not None
        raise last_error

    def _start_on_port(self) -> None:
        options = {
            "port": str(self.port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self._require_directory()),
            "max_connections": str(self.max_connections),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            # 14+'s default; 13 stores md5 hashes, which require_password's scram line refuses.
            "password_encryption": "scram-sha-256",
            **self.settings,
        }
        server_options = " ".join(f"-c {name}={value}" for name, value in options.items())
        self._pg_ctl_run(
            [
                "start",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_path),
                "-w",
                "-t",
                "60",
                "-o",
                server_options,
            ]
        )
        self._running = True
        self._wait_until_accepting()

    def _wait_until_accepting(self, timeout: float = 30.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url_for("postgres"), connect_timeout=5) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise self._error(f"server did not accept connections: {exc}") from exc
                time.sleep(0.05)

    def _wait_until_refused(self, url: str, timeout: float = 10.0) -> None:
        """Wait until the server has reloaded its configuration and refuses ``url``."""
        import psycopg

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                psycopg.connect(url, connect_timeout=5).close()
            except psycopg.OperationalError:
                return
            time.sleep(0.02)
        raise self._error(f"the server still accepts {url} after reloading pg_hba.conf")

    def _pg_ctl_run(self, args: Sequence[str], *, check: bool = True) -> None:
        self._run([str(self._pg_ctl), *args], what=f"pg_ctl {args[0]}", check=check)

    def _run(self, command: list[str], *, what: str, check: bool = True) -> None:
        if self._as_server_user:
            command = ["runuser", "-u", _SERVER_USER, "--", *command]
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        try:
            completed = subprocess.run(
                command,
                cwd=self._require_directory(),
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise self._error(f"{what} could not run: {exc}") from exc
        if check and completed.returncode != 0:
            output = (completed.stdout + completed.stderr).strip()
            raise self._error(f"{what} exited with {completed.returncode}:\n{output}")

    def _error(self, message: str) -> PostgresServerError:
        return PostgresServerError(f"{message}\n--- server log (tail) ---\n{self.log_tail()}")


def _checked_name(name: str) -> str:
    if not _DATABASE_NAME.match(name):
        raise ValueError(f"database name {name!r} must match {_DATABASE_NAME.pattern}")
    return name
