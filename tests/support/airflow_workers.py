"""Warm Airflow processes that run DAGs at the same moment, for DAG-level race tests.

A fresh interpreter spends seconds (tens, on a busy machine) importing Airflow and
building the in-process execution API before its first ``dag.test()``: far longer
than the races these tests provoke, and too slow to pay in every test. So a test
session starts a few workers once. Each is a spawned interpreter with its own
``AIRFLOW_HOME``, whose metadata DB is a copy of the session's (processes running
DAGs at once must not share one SQLite metadata DB); it imports Airflow, runs one
warm-up DAG, then serves jobs: it calls ``target(*args)`` and sends back the result.
Jobs handed to several workers together run in separate OS processes at the same
time, as separate Airflow workers would. A worker can be killed with SIGKILL in the
middle of a job (a crashed worker); the pool starts a replacement at once.

Workers write Airflow's output to ``worker.log`` in their home; a failure report
includes its tail. No pytest import: the module is loaded by ``spawn`` children.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import sqlite3
import sys
import traceback
from collections.abc import Callable, Sequence
from contextlib import closing, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["AirflowWorker", "AirflowWorkers", "WorkerError", "unique_logical_date"]

_READY_TIMEOUT = 300.0  # a cold start on a busy 2-core machine can take a minute or more
_index: int | None = None  # this worker's number, in a worker process


def unique_logical_date() -> datetime:
    """Now, with the worker's number in the last two digits of the microseconds.

    ``dag.test()`` derives the run id from the logical date; workers with their own
    metadata DBs could otherwise give two runs started together the same run id,
    and so the same execution id, which would make them indistinguishable.
    """
    now = datetime.now(timezone.utc)
    return now.replace(microsecond=now.microsecond // 100 * 100 + (_index or 0) % 100)


class WorkerError(RuntimeError):
    """A worker raised, died or did not answer in time."""


def _serve(conn: Any, home: str, index: int) -> None:
    """The worker's main loop (runs in the spawned child)."""
    global _index
    _index = index
    log = open(Path(home) / "worker.log", "ab", buffering=0)  # noqa: SIM115 - lives as long as we do
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    os.environ.update(
        {
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__DAGS_FOLDER": str(Path(home) / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{Path(home) / 'airflow.db'}",
        }
    )
    if "airflow" in sys.modules:
        conn.send(("error", "airflow was imported before the worker could set AIRFLOW_HOME"))
        return
    try:
        _warm_up()
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        target, args, env = message
        os.environ.update(env)
        try:
            conn.send(("ok", target(*args)))
        except BaseException:
            conn.send(("error", traceback.format_exc()))


def _warm_up() -> None:
    """Run a one-task DAG, so that the first real run starts as fast as later ones."""
    from airflow.sdk import task

    from tests.airflow.dagrun import new_dag, run_dag_test

    with new_dag("airflow_worker_warm_up") as dag:

        @task
        def noop() -> None:
            return None

        noop()
    run = run_dag_test(dag)
    if run.state != "success":
        raise RuntimeError(f"the warm-up DAG run ended {run.state}")


class AirflowWorker:
    """One warm worker process; give it a job with :meth:`submit`, collect with :meth:`result`."""

    def __init__(self, index: int, home: Path, template_db: Path) -> None:
        self.index = index
        self.home = home
        (home / "dags").mkdir(parents=True)
        _copy_sqlite(template_db, home / "airflow.db")
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(
            target=_serve,
            args=(child_conn, str(home), index),
            name=f"airflow-worker-{index}",
            daemon=True,
        )
        self._process.start()
        child_conn.close()
        self.pid: int | None = None

    def wait_ready(self, timeout: float = _READY_TIMEOUT) -> None:
        if self.pid is None:
            status, payload = self._receive(timeout, "to start")
            if status != "ready":
                raise WorkerError(f"worker {self.index} could not start:\n{payload}{self._log()}")
            self.pid = payload

    def submit(self, target: Callable[..., Any], *args: Any, env: dict[str, str] | None = None):
        """Start ``target(*args)`` in the worker, after setting ``env`` in its environment."""
        self.wait_ready()
        self._conn.send((target, args, dict(env or {})))

    def result(self, timeout: float) -> Any:
        """Wait for the job's return value; raise :class:`WorkerError` if it raised."""
        status, payload = self._receive(timeout, "to finish its job")
        if status != "ok":
            raise WorkerError(f"worker {self.index} failed:\n{payload}{self._log()}")
        return payload

    def kill(self) -> None:
        """SIGKILL the worker, as a crashed machine or an OOM kill would."""
        if self._process.is_alive():
            os.kill(self._process.pid or 0, signal.SIGKILL)
        self._process.join(timeout=10)
        self._conn.close()

    def stop(self) -> None:
        if self._process.is_alive():
            with suppress(OSError):
                self._conn.send(None)
            self._process.join(timeout=10)
            if self._process.is_alive():
                self.kill()
        self._conn.close()

    def _receive(self, timeout: float, what: str) -> tuple[str, Any]:
        if not self._conn.poll(timeout):
            alive = "alive" if self._process.is_alive() else f"exit {self._process.exitcode}"
            raise WorkerError(
                f"worker {self.index} ({alive}) took over {timeout:.0f}s {what}{self._log()}"
            )
        try:
            message: tuple[str, Any] = self._conn.recv()
        except EOFError:
            raise WorkerError(
                f"worker {self.index} died (exit {self._process.exitcode}){self._log()}"
            ) from None
        return message

    def _log(self, lines: int = 40) -> str:
        path = self.home / "worker.log"
        if not path.exists():
            return ""
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        return f"\n--- last {len(tail)} lines of {path} ---\n" + "\n".join(tail)


class AirflowWorkers:
    """A pool of ``size`` warm workers, all started (in the background) on creation."""

    def __init__(self, root: Path, template_db: Path, size: int) -> None:
        self._root = root
        self._template_db = template_db
        self._numbers = itertools.count()
        self._workers = [self._start() for _ in range(size)]

    def take(self, count: int) -> list[AirflowWorker]:
        """``count`` ready workers (they stay in the pool)."""
        if count > len(self._workers):
            raise ValueError(f"the pool has {len(self._workers)} workers, not {count}")
        chosen = self._workers[:count]
        for worker in chosen:
            worker.wait_ready()
        return chosen

    def run_together(
        self,
        jobs: Sequence[tuple[Callable[..., Any], Sequence[Any]]],
        *,
        env: dict[str, str] | None = None,
        timeout: float = 180.0,
    ) -> list[Any]:
        """Run each ``(target, args)`` job in its own worker at once; results in job order."""
        workers = self.take(len(jobs))
        for worker, (target, args) in zip(workers, jobs, strict=True):
            worker.submit(target, *args, env=env)
        return [worker.result(timeout) for worker in workers]

    def kill(self, worker: AirflowWorker) -> None:
        """SIGKILL ``worker`` and start its replacement (which warms up in the background)."""
        worker.kill()
        self._workers[self._workers.index(worker)] = self._start()

    def close(self) -> None:
        for worker in self._workers:
            worker.stop()

    def _start(self) -> AirflowWorker:
        number = next(self._numbers)
        return AirflowWorker(number, self._root / f"worker-{number}", self._template_db)


def _copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database, even while another process writes to it."""
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
