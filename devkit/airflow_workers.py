"""Warm Airflow processes that run DAGs at the same moment, for DAG-level race tests.

A fresh interpreter spends seconds of CPU (tens of seconds of wall time on a busy
machine) importing Airflow and building the in-process execution API before its
first ``dag.test()`` is fast: far longer than the races these tests provoke, and
too slow to pay for every process. So a session starts one *zygote*: a spawned
interpreter that imports Airflow, runs a warm-up DAG, stops the execution API's
event-loop thread (so that it is single-threaded again) and then only forks.
Each fork is a worker: an OS process of its own, warm from its first instruction,
with its own ``AIRFLOW_HOME`` and its own copy of the metadata DB (processes that
run DAGs at once must not share one SQLite metadata DB). A worker serves jobs: it
calls ``target(*args)`` and sends back the result. Jobs handed to several workers
together run their DAG runs at the same time, as separate Airflow workers would.
A worker can be killed with SIGKILL in the middle of a job (a crashed worker); the
pool forks a replacement at once.

The fork relies on two details of Airflow 3's ``dag.test()``: the execution API it
runs in-process is cached by ``supervisor.in_process_api_server()``, and its
transport owns a daemon thread that runs an asyncio loop forever. The zygote
drops the transport and stops that loop before forking; each worker builds a
new one on first use, reusing the warm FastAPI app. If Airflow changes this, the
zygote fails loudly rather than forking a process with threads.

Workers write Airflow's output to ``worker.log`` in their home; failure reports
include its tail. No pytest import: the zygote is a ``spawn`` child.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import random
import signal
import sqlite3
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from contextlib import closing, suppress
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

__all__ = ["AirflowWorker", "AirflowWorkers", "WorkerError", "unique_run_after"]

_READY_TIMEOUT = 300.0  # the zygote's cold start on a busy 2-core machine can take minutes
_index: int | None = None  # this worker's number, in a worker process


class WorkerError(RuntimeError):
    """The zygote or a worker raised, died or did not answer in time."""


def unique_run_after() -> datetime:
    """Just now, with the worker's number in the last two digits of the microseconds.

    ``dag.test()`` names a run ``manual__<run_after>``; workers with their own metadata
    DBs could otherwise give two runs started together the same run id, and so the
    same execution id, which would make them indistinguishable.
    """
    now = datetime.now(timezone.utc) - timedelta(microseconds=100)
    return now.replace(microsecond=now.microsecond // 100 * 100 + (_index or 0) % 100)


# -- in the zygote --------------------------------------------------------------------------


def _zygote(conn: Any, home: str) -> None:
    try:
        _adopt_home(Path(home))
        _warm_up()
        _make_single_threaded()
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps killed workers
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            message = None
        if message is None:
            os._exit(0)  # nothing to clean up; Airflow's exit handlers only cost time
        index, worker_home, worker_conn = message
        pid = os.fork()
        if pid == 0:
            conn.close()
            _worker(worker_conn, Path(worker_home), index, Path(home) / "airflow.db")
        worker_conn.close()
        conn.send(("forked", pid))


def _adopt_home(home: Path) -> None:
    """Point Airflow at ``home`` (before it is imported) and send output to its log."""
    log = os.open(home / "worker.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        }
    )
    if "airflow" in sys.modules:
        raise WorkerError("airflow was imported before the zygote could set AIRFLOW_HOME")


def _warm_up() -> None:
    """Run a one-task DAG, so that every code path of a DAG run is imported and built."""
    from airflow.sdk import task

    from devkit.dagrun import new_dag, run_dag_test

    with new_dag("airflow_worker_warm_up") as dag:

        @task
        def noop() -> None:
            return None

        noop()
    run = run_dag_test(dag)
    if run.state != "success":
        raise WorkerError(f"the warm-up DAG run ended {run.state}")


def _make_single_threaded() -> None:
    """Drop the in-process execution API's transport and stop its event-loop thread."""
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    api = in_process_api_server()
    with suppress(AttributeError):
        del api.transport  # the next run in a worker builds a new one on the warm app
    for thread in threading.enumerate():
        loop = _event_loop_served_by(thread)
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
    for thread in threading.enumerate():  # the run's socket-comms thread ends within ~1 s
        if thread is not threading.main_thread():
            thread.join(timeout=30)
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        raise WorkerError(f"threads still running, refusing to fork: {others}")


def _event_loop_served_by(thread: threading.Thread) -> asyncio.AbstractEventLoop | None:
    """The event loop ``thread`` runs forever, if that is what it was started to do.

    Airflow 3.2+ names the execution API's loop thread ``InProcessExecutionAPI-loop``;
    3.0 and 3.1 start the same loop in an unnamed thread, so it is found by its target.
    """
    target = getattr(thread, "_target", None)
    loop = getattr(target, "__self__", None)
    if getattr(target, "__name__", "") == "run_forever" and isinstance(
        loop, asyncio.AbstractEventLoop
    ):
        return loop
    return None


# -- in a worker (a fork of the zygote) -----------------------------------------------------


def _worker(conn: Any, home: Path, index: int, zygote_db: Path) -> None:
    global _index
    _index = index
    status = 0
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        random.seed()  # not the zygote's sequence: Airflow draws run-id suffixes from it
        (home / "dags").mkdir(parents=True, exist_ok=True)
        _copy_sqlite(zygote_db, home / "airflow.db")
        _adopt_forked_home(home)
        conn.send(("ready", os.getpid()))
        _serve(conn)
    except BaseException:
        with suppress(Exception):
            conn.send(("error", traceback.format_exc()))
        status = 1
    finally:
        os._exit(status)  # never return into the zygote's loop


def _adopt_forked_home(home: Path) -> None:
    from airflow import settings

    log = os.open(home / "worker.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    url = f"sqlite:///{home / 'airflow.db'}"
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
        }
    )
    if settings.engine is not None:  # the zygote's pooled connections are not ours
        settings.engine.dispose(close=False)
    settings.SQL_ALCHEMY_CONN = url
    settings.configure_orm()


def _serve(conn: Any) -> None:
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


# -- in the test process --------------------------------------------------------------------


class AirflowWorker:
    """One warm worker process; give it a job with :meth:`submit`, collect with :meth:`result`."""

    def __init__(self, index: int, home: Path, conn: Any) -> None:
        self.index = index
        self.home = home
        self._conn = conn
        self.pid: int | None = None

    def wait_ready(self, timeout: float = 60.0) -> None:
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
        if self.pid is not None:
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self._conn.close()

    def stop(self) -> None:
        with suppress(OSError):
            self._conn.send(None)
        self._conn.close()

    def _receive(self, timeout: float, what: str) -> tuple[str, Any]:
        if not self._conn.poll(timeout):
            raise WorkerError(f"worker {self.index} took over {timeout:.0f}s {what}{self._log()}")
        try:
            message: tuple[str, Any] = self._conn.recv()
        except EOFError:
            raise WorkerError(f"worker {self.index} died{self._log()}") from None
        return message

    def _log(self, lines: int = 40) -> str:
        return _tail(self.home / "worker.log", lines)


class AirflowWorkers:
    """A zygote (started on creation, warming up in the background) and its forked workers."""

    def __init__(self, root: Path, template_db: Path, size: int) -> None:
        self._root = root
        self._size = size
        self._numbers = itertools.count()
        self._workers: list[AirflowWorker] = []
        zygote_home = root / "zygote"
        (zygote_home / "dags").mkdir(parents=True)
        _copy_sqlite(template_db, zygote_home / "airflow.db")
        self._zygote_home = zygote_home
        context = multiprocessing.get_context("spawn")
        self._context = context
        self._zygote, child_conn = context.Pipe()
        self._process = context.Process(
            target=_zygote, args=(child_conn, str(zygote_home)), name="airflow-zygote", daemon=True
        )
        self._process.start()
        child_conn.close()
        self._zygote_ready = False
        self._zygote_failure: str | None = None

    def take(self, count: int) -> list[AirflowWorker]:
        """``count`` ready workers (they stay in the pool)."""
        if count > self._size:
            raise ValueError(f"the pool has {self._size} workers, not {count}")
        while len(self._workers) < self._size:
            self._workers.append(self._fork())
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
        """SIGKILL ``worker`` and fork its replacement."""
        worker.kill()
        self._workers[self._workers.index(worker)] = self._fork()

    def close(self) -> None:
        for worker in self._workers:
            worker.stop()
        with suppress(OSError):
            self._zygote.send(None)
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()
        self._zygote.close()

    def _fork(self) -> AirflowWorker:
        self._wait_for_zygote()
        index = next(self._numbers)
        home = self._root / f"worker-{index}"
        ours, theirs = self._context.Pipe()
        self._zygote.send((index, str(home), theirs))
        theirs.close()
        status, payload = self._receive_from_zygote(60.0, "to fork")
        if status != "forked":
            raise WorkerError(f"the zygote could not fork:\n{payload}")
        return AirflowWorker(index, home, ours)

    def _wait_for_zygote(self) -> None:
        if self._zygote_failure is not None:  # every later test fails at once, not after minutes
            raise WorkerError(self._zygote_failure)
        if not self._zygote_ready:
            try:
                status, payload = self._receive_from_zygote(_READY_TIMEOUT, "to warm up")
            except WorkerError as exc:
                self._zygote_failure = str(exc)
                raise
            if status != "ready":
                self._zygote_failure = f"the zygote could not start:\n{payload}{self._log()}"
                raise WorkerError(self._zygote_failure)
            self._zygote_ready = True

    def _receive_from_zygote(self, timeout: float, what: str) -> tuple[str, Any]:
        if not self._zygote.poll(timeout):
            raise WorkerError(f"the zygote took over {timeout:.0f}s {what}{self._log()}")
        try:
            message: tuple[str, Any] = self._zygote.recv()
        except EOFError:
            exit_code = self._process.exitcode
            raise WorkerError(f"the zygote died (exit {exit_code}){self._log()}") from None
        return message

    def _log(self) -> str:
        return _tail(self._zygote_home / "worker.log")


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return ""
    tail = path.read_text(errors="replace").splitlines()[-lines:]
    return f"\n--- last {len(tail)} lines of {path} ---\n" + "\n".join(tail)


def _copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database, even while another process writes to it."""
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
