"""The CeleryExecutor for ``python -m e2e --executor celery``: a Redis broker and two workers.

:class:`CelerySetup` is the deployment's :class:`~e2e.deployment.Executor` for it:

- before ``airflow db migrate``, Debian's ``redis-server`` on a free loopback port,
  in its own session, with its own directory and configuration under ``.e2e/redis``
  (no persistence: the broker's queues live only for the run);
- the Celery settings (:func:`celery_settings`): the broker, the result backend in
  the metadata database (``db+postgresql://`` on the deployment's PostgreSQL server)
  and the workers' concurrency;
- after the four components, ``WORKERS`` ``airflow celery worker`` processes, each a
  component of its own (own session, log, pid file, log-server port) with its own
  ``--celery-hostname``. Their task processes are forked below them, so their
  sessions are where the harness looks for a task process to kill.

Both workers run on this one machine and would report the same host name on their
task instances; each gets a ``[core] hostname_callable`` (:func:`worker_hostname`)
that names the worker instead, as separate machines would, so the REST API says
which worker ran which task instance.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

import psutil

from e2e.deployment import METADATA_DATABASE, free_port, kill_session, processes_in_sessions, tail

if TYPE_CHECKING:
    from e2e.deployment import Deployment

__all__ = [
    "WORKERS",
    "CelerySetup",
    "celery_settings",
    "redis_config",
    "worker_environment",
    "worker_hostname",
]

#: The workers' names: their ``--celery-hostname`` (``<name>@<machine>``) and the
#: ``hostname`` their task instances report.
WORKERS = ("worker-a", "worker-b")
#: Task slots per worker. Two workers of 4 make the LocalExecutor run's ``parallelism`` 8.
CONCURRENCY = 4
HOSTNAME_VARIABLE = "E2E_CELERY_WORKER"
REDIS_PROGRAM = "redis-server"


def redis_config(port: int, directory: Path) -> str:
    """A ``redis.conf`` for a throwaway broker: loopback only, nothing written to disk."""
    return "\n".join(
        [
            "bind 127.0.0.1",
            f"port {port}",
            "protected-mode yes",
            "daemonize no",
            f'dir "{directory}"',
            'logfile ""',  # stdout: the harness's log file
            'save ""',  # no snapshots
            "appendonly no",
            "databases 1",
            "",
        ]
    )


def celery_settings(*, broker_port: int, database_port: int, concurrency: int) -> dict[str, str]:
    """The ``AIRFLOW__*`` settings of the CeleryExecutor, as every component sees them."""
    # [START e2e_celery_settings]
    settings = {
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        # The broker: the harness's redis-server, on a free loopback port.
        "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{broker_port}/0",
        # Task results: in the metadata database, on the same PostgreSQL server.
        "AIRFLOW__CELERY__RESULT_BACKEND": (
            f"db+postgresql://postgres@127.0.0.1:{database_port}/{METADATA_DATABASE}"
        ),
        # Task slots per worker; two workers of 4 make the LocalExecutor run's parallelism 8.
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(concurrency),
    }
    # [END e2e_celery_settings]
    return settings


def worker_environment(name: str) -> dict[str, str]:
    """What one worker adds to the environment: its name, and a log server of its own."""
    # [START e2e_celery_worker_settings]
    worker = {
        # Task instances report the worker's name as their hostname (both run on one machine).
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{__name__}.worker_hostname",
        HOSTNAME_VARIABLE: name,
        # Each worker serves its task logs on a port of its own.
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
    }
    # [END e2e_celery_worker_settings]
    return worker


def worker_hostname() -> str:
    """``[core] hostname_callable`` of a worker: its name (the task processes inherit it)."""
    return os.environ.get(HOSTNAME_VARIABLE) or socket.getfqdn()


class CelerySetup:
    """The CeleryExecutor's parts of a :class:`~e2e.deployment.Deployment`."""

    name = "CeleryExecutor"
    task_hosts: tuple[str, ...] = tuple(f"celery-{worker}" for worker in WORKERS)
    worker_hostnames: tuple[str, ...] = WORKERS

    def __init__(self, concurrency: int = CONCURRENCY) -> None:
        self.concurrency = concurrency
        self.broker_port = 0
        self.redis: subprocess.Popen[bytes] | None = None
        self._redis_log: IO[bytes] | None = None
        self._redis_log_path: Path | None = None

    @property
    def broker_url(self) -> str:
        return f"redis://127.0.0.1:{self.broker_port}/0"

    def settings(self, deployment: Deployment) -> dict[str, str]:
        assert self.broker_port, "start_services() first"
        assert deployment.server is not None and deployment.server.port is not None
        return celery_settings(
            broker_port=self.broker_port,
            database_port=deployment.server.port,
            concurrency=self.concurrency,
        )

    # -- the broker -----------------------------------------------------------------------------

    def start_services(self, deployment: Deployment) -> None:
        """Start ``redis-server`` under ``.e2e/redis`` and wait until it answers."""
        started = time.monotonic()
        directory = deployment.root / "redis"
        directory.mkdir(parents=True, exist_ok=True)
        self.broker_port = free_port()
        config = directory / "redis.conf"
        config.write_text(redis_config(self.broker_port, directory))
        self._redis_log_path = deployment.logs / "redis.log"
        self._redis_log = self._redis_log_path.open("wb")
        self.redis = subprocess.Popen(
            [REDIS_PROGRAM, str(config)],
            cwd=directory,  # where the reaper of an interrupted run looks
            stdin=subprocess.DEVNULL,
            stdout=self._redis_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deployment.record_session(self.redis.pid)
        deadline = time.monotonic() + 30
        while not self._redis_answers():
            if self.redis.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start\n{tail(self._redis_log_path)}")
            time.sleep(0.1)
        deployment.say(
            f"redis-server on port {self.broker_port} ({time.monotonic() - started:.1f}s)"
        )

    def _redis_answers(self) -> bool:
        """A ``PING`` in the Redis protocol, answered by ``+PONG``."""
        try:
            with socket.create_connection(("127.0.0.1", self.broker_port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop_services(self) -> None:
        if self.redis is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.redis.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.redis.wait(timeout=10)
        kill_session(self.redis.pid)
        self.redis.wait()
        self.redis = None
        if self._redis_log is not None:
            self._redis_log.close()
            self._redis_log = None

    # -- the workers --------------------------------------------------------------------------

    def start_workers(self, deployment: Deployment) -> None:
        machine = socket.gethostname()
        for worker, component in zip(WORKERS, self.task_hosts, strict=True):
            deployment.start_component(
                component,
                [
                    "celery",
                    "worker",
                    "--celery-hostname",
                    f"{worker}@{machine}",
                    "--concurrency",
                    str(self.concurrency),
                    "--pid",
                    str(deployment.home / f"{component}.pid"),
                ],
                worker_environment(worker),
            )

    def ready(self) -> bool:
        """Whether every worker answers a Celery ``ping`` through the broker."""
        from celery import Celery

        app = Celery(broker=self.broker_url)
        try:
            replies = app.control.ping(timeout=2.0)
        except Exception:  # the broker is busy or a worker is still starting: not yet
            return False
        finally:
            app.close()
        nodes = {node.split("@", 1)[0] for reply in replies for node in reply}
        return set(WORKERS) <= nodes

    def cpu_seconds(self) -> dict[str, float]:
        if self.redis is None:
            return {}
        total = 0.0
        for process in processes_in_sessions({self.redis.pid}):
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return {"redis": total}
