"""A throwaway PgBouncer in front of a ``PostgresServer``, for tests of pooled deployments.

Transaction pooling with a small pool by default, so that client connections really
share server connections: a statement outside an explicit transaction may run on a
different server session from the one before it, as in production behind PgBouncer.
PgBouncer refuses to run as root: as root it runs as the ``postgres`` OS user, as the
server does, in a directory that user owns.

    with PostgresServer() as server, PgBouncer(server) as bouncer:
        url = bouncer.url_for("atomic_store")   # postgresql://postgres@127.0.0.1:PORT/...

Nothing here imports pytest.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from devkit.postgres_server import PostgresServer

__all__ = ["PgBouncer", "PgBouncerError", "find_pgbouncer"]

_RUN_AS = "postgres"
_START_WAIT = 10.0


class PgBouncerError(RuntimeError):
    """The throwaway PgBouncer could not be started."""


def find_pgbouncer() -> Path:
    """The ``pgbouncer`` binary (PATH or /usr/sbin), or ``PgBouncerError`` saying how to get it."""
    found = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
    )
    if found is None:
        raise PgBouncerError(
            "pgbouncer was not found; install it (Debian: apt-get install -y pgbouncer)"
        )
    return Path(found)


class PgBouncer:
    """PgBouncer on a free loopback port, every database routed to ``server``.

    :param pool_mode: ``transaction`` (the default), ``session`` or ``statement``.
    :param pool_size: server connections per database (1: every client shares one).
    :param user: the role every client is logged in as, whatever its URL says (PgBouncer's
        ``auth_type = any``; the server trusts loopback connections).
    """

    def __init__(
        self,
        server: PostgresServer,
        *,
        pool_mode: str = "transaction",
        pool_size: int = 2,
        user: str = "postgres",
    ) -> None:
        self._server = server
        self._pool_mode = pool_mode
        self._pool_size = pool_size
        self._user = user
        self._binary = find_pgbouncer()
        self._as_server_user = os.geteuid() == 0
        self._process: subprocess.Popen[bytes] | None = None
        self.directory: Path | None = None
        self.port: int | None = None

    def url_for(self, dbname: str) -> str:
        """A URL through PgBouncer to ``dbname`` (as ``user``)."""
        if self.port is None:
            raise PgBouncerError("PgBouncer has not been started")
        return f"postgresql://{self._user}@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> PgBouncer:
        directory = Path(tempfile.mkdtemp(prefix="atomic-pgbouncer-"))
        self.directory = directory
        self.port = _free_port()
        (directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={self._server.port} user={self._user}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            "auth_type = any\n"
            f"pool_mode = {self._pool_mode}\ndefault_pool_size = {self._pool_size}\n"
            "max_client_conn = 200\nserver_reset_query =\n"
            f"logfile = {directory / 'pgbouncer.log'}\n"
        )
        if self._as_server_user:
            for path in (directory, *directory.iterdir()):
                shutil.chown(path, user=_RUN_AS, group=_RUN_AS)
        command = [str(self._binary), str(directory / "pgbouncer.ini")]
        if self._as_server_user:
            command = ["runuser", "-u", _RUN_AS, "--", *command]
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_listening()
        return self

    def stop(self) -> None:
        """Stop PgBouncer (its server connections close) and remove its directory; safe twice."""
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
            self._process = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def _wait_listening(self) -> None:
        assert self._process is not None and self.port is not None
        deadline = time.monotonic() + _START_WAIT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        log = self._log_tail()
        self.stop()
        raise PgBouncerError(f"PgBouncer did not start listening: {log}")

    def _log_tail(self) -> str:
        try:
            assert self.directory is not None
            return (self.directory / "pgbouncer.log").read_text(errors="replace")[-2000:]
        except (OSError, AssertionError):
            return "(no PgBouncer log)"

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
