"""A throwaway Airflow 3 deployment on this machine, configured like a real one.

:class:`Deployment` starts, in order:

1. a PostgreSQL server (``devkit/postgres_server.py``) with two databases,
   ``airflow`` (the metadata database) and ``atomic_store`` (the store);
2. ``airflow db migrate``;
3. the four long-running components, each in its own session so that it and
   every process it forks can be found and signalled as one:
   ``api-server`` (REST API, UI and the execution API the task processes call),
   ``scheduler`` (with the LocalExecutor, which forks the task processes),
   ``dag-processor`` and ``triggerer``.

The executor is a choice (:class:`Executor`): :class:`LocalExecutorSetup` here, or
the CeleryExecutor's (``e2e/celery_executor.py``), which adds a Redis broker before
the migration and two Celery workers after the components. Everything else -- the
settings, the sessions, the accounting, the shut-down -- is the same code for both.

Everything is configured through ``AIRFLOW__*`` environment variables (see
:meth:`Deployment.environment`; ``docs/deploying.md`` lists the same set) in an
``AIRFLOW_HOME`` under ``.e2e/`` in the project. :meth:`Deployment.stop` is
safe to call at any point and twice: it stops the components (SIGTERM, then
SIGKILL of every process left in their sessions), then the database server.
Nothing is written outside ``.e2e/`` (but the database server's directory when,
run as root, the ``postgres`` user cannot enter ``.e2e/``: a link in it then names
that directory). Every process runs with its working directory in ``.e2e/`` or
there, so the next run finds and kills whatever a killed harness left behind
before it starts afresh.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

import psutil

from devkit.postgres_server import PostgresServer

__all__ = ["Component", "Deployment", "DeploymentError", "Executor", "LocalExecutorSetup"]

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
PROJECT = Path(__file__).resolve().parent.parent
USERNAME = "e2e"
#: A second user with the simple auth manager's ``viewer`` role: it may read no
#: connection, so the UI's store page and tab must show it nothing (e2e/browser.py).
VIEWER = "e2e-viewer"
STORE_DATABASE = "atomic_store"
LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"
METADATA_DATABASE = "airflow"


class DeploymentError(RuntimeError):
    """The deployment could not be started, or a component died."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Component:
    """One long-running Airflow component: a process leading its own session."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes] = field(repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None


class Executor(Protocol):
    """What a deployment needs to know about its executor; the rest is the same for all."""

    #: ``[core] executor``.
    name: str
    #: The components whose sessions hold the task processes (and their supervisors).
    task_hosts: tuple[str, ...]
    #: The task instances' ``hostname`` each worker reports, or () for "this machine".
    worker_hostnames: tuple[str, ...]

    def settings(self, deployment: Deployment) -> dict[str, str]:
        """Its ``AIRFLOW__*`` settings, added to every component's environment."""
        ...

    def start_services(self, deployment: Deployment) -> None:
        """Start what it needs before ``airflow db migrate`` (a broker)."""
        ...

    def start_workers(self, deployment: Deployment) -> None:
        """Start its workers, after the four components."""
        ...

    def ready(self) -> bool:
        """Whether its workers take tasks."""
        ...

    def stop_services(self) -> None:
        """Stop what :meth:`start_services` started (after the components); safe twice."""
        ...

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time of its services, by name."""
        ...


class LocalExecutorSetup:
    """The LocalExecutor: the scheduler forks the task processes; nothing else to run."""

    name = "LocalExecutor"
    task_hosts: tuple[str, ...] = ("scheduler",)
    worker_hostnames: tuple[str, ...] = ()

    def settings(self, deployment: Deployment) -> dict[str, str]:
        return {}

    def start_services(self, deployment: Deployment) -> None:
        return None

    def start_workers(self, deployment: Deployment) -> None:
        return None

    def ready(self) -> bool:
        return True

    def stop_services(self) -> None:
        return None

    def cpu_seconds(self) -> dict[str, float]:
        return {}


class Deployment:
    """PostgreSQL + Airflow under ``root``, serving ``dags_folder``.

    :param root: the working directory (``.e2e/``); ``AIRFLOW_HOME`` is ``root/airflow``
        and the component logs go to ``root/logs``.
    :param dags_folder: the DAG files to load.
    :param parallelism: ``[core] parallelism``: task processes running at once.
    :param extra_bundles: more DAG folders, each a DAG bundle of its own (name: folder),
        next to ``dags_folder`` (the ``dags-folder`` bundle).
    :param say: where progress lines go.
    :param executor: the executor and what it runs (default: the LocalExecutor).
    """

    def __init__(
        self,
        root: Path,
        dags_folder: Path,
        *,
        parallelism: int = 4,
        extra_bundles: dict[str, Path] | None = None,
        say: Callable[[str], None] = print,
        executor: Executor | None = None,
    ) -> None:
        self.executor: Executor = executor or LocalExecutorSetup()
        self.root = root
        self.dags_folder = dags_folder
        self.extra_bundles = dict(extra_bundles or {})
        self.parallelism = parallelism
        self.say = say
        self.home = root / "airflow"
        self.logs = root / "logs"
        self.server: PostgresServer | None = None
        self.components: dict[str, Component] = {}
        self.api_port = 0
        self.password = secrets.token_urlsafe(16)
        self.viewer_password = secrets.token_urlsafe(16)
        self._env: dict[str, str] | None = None
        self._sessions: set[int] = set()

    # -- configuration -------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def store_url(self) -> str:
        assert self.server is not None
        return self.server.url_for(STORE_DATABASE)

    def environment(self) -> dict[str, str]:
        """The ``AIRFLOW_*`` variables every component (and every task process) runs with."""
        if self._env is not None:
            return self._env
        assert self.server is not None
        port = self.server.port
        # [START e2e_settings]
        # The DAG bundles: the default one ("dags-folder", the DAGs folder below) and the
        # harness's own DAGs (e2e/scenario_dags, as "e2e-scenario"), each a local folder.
        bundles = [{"name": "dags-folder", "classpath": LOCAL_BUNDLE, "kwargs": {}}] + [
            {"name": name, "classpath": LOCAL_BUNDLE, "kwargs": {"path": str(path)}}
            for name, path in self.extra_bundles.items()
        ]
        settings = {
            "AIRFLOW_HOME": str(self.home),
            # Metadata database and executor: PostgreSQL and LocalExecutor.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": (
                f"postgresql+psycopg2://postgres@127.0.0.1:{port}/{METADATA_DATABASE}"
            ),
            "AIRFLOW__CORE__EXECUTOR": self.executor.name,  # or its settings' (below)
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            # The DAGs: the project's example DAGs, and the harness's own bundle.
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            # The files do not change during a run: parse them once, not every 30 s.
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
            # Task processes report to the execution API of the API server.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",  # default 5s; 2 busy cores are slow
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__BASE_URL": self.api_url,
            # Shared secrets: every component must agree on them.
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(32),
            "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
            # The REST API's user (the simple auth manager: one admin, known password), and
            # a viewer for the UI's access checks.
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USERNAME}:admin,{VIEWER}:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            # Log servers on free ports: other deployments may run on this machine.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            # The atomic store, as every task process sees it.
            "AIRFLOW_CONN_ATOMIC_STORE_DEFAULT": self.store_url,
        }
        # [END e2e_settings]
        settings.update(self.executor.settings(self))
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))
        }
        env.update(settings)
        # The harness's own packages (airflow_atomic_store is installed; e2e and tests are not).
        env["PYTHONPATH"] = os.pathsep.join(
            part for part in (str(PROJECT), os.environ.get("PYTHONPATH", "")) if part
        )
        self._env = env
        return env

    def settings(self) -> dict[str, str]:
        """Just the Airflow settings of :meth:`environment` (for the summary and docs)."""
        return {
            name: value
            for name, value in self.environment().items()
            if name.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_HOME"))
        }

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start PostgreSQL, migrate the metadata database and start every component."""
        reap_previous_run(self.root, self.say)
        self.root.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        passwords = {USERNAME: self.password, VIEWER: self.viewer_password}
        (self.home / "passwords.json").write_text(json.dumps(passwords) + "\n")

        started = time.monotonic()
        self.server = PostgresServer(dbname=STORE_DATABASE, base_dir=self.root, max_connections=300)
        self.server.start()
        server_directory = self.server.directory
        assert server_directory is not None
        if self.root.resolve() not in server_directory.resolve().parents:
            (self.root / SERVER_ELSEWHERE).symlink_to(server_directory)
            self.say(f"PostgreSQL data in {server_directory} (the postgres user cannot enter here)")
        self.server.create_database(METADATA_DATABASE)
        self.api_port = free_port()
        self.say(f"PostgreSQL on port {self.server.port} ({time.monotonic() - started:.1f}s)")
        self.executor.start_services(self)

        started = time.monotonic()
        self.run_cli(["db", "migrate"], log_name="db-migrate", timeout=600)
        self.say(f"airflow db migrate ({time.monotonic() - started:.1f}s)")

        for name in COMPONENTS:
            self._start_component(name)
        self.executor.start_workers(self)
        self.say(f"started {', '.join(self.components)}; logs in {self.logs}")

    def run_cli(self, args: list[str], *, log_name: str, timeout: float) -> None:
        """Run one ``airflow`` CLI command to completion, its output in ``logs/<log_name>.log``."""
        log_path = self.logs / f"{log_name}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "airflow", *args],
                env=self.environment(),
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self._record_session(process.pid)
            try:
                status = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_session(process.pid)
                raise DeploymentError(
                    f"airflow {' '.join(args)} did not finish in {timeout:.0f}s\n{tail(log_path)}"
                ) from None
        if status != 0:
            raise DeploymentError(
                f"airflow {' '.join(args)} exited with {status}\n{tail(log_path)}"
            )

    def start_component(
        self, name: str, args: list[str] | None = None, env: dict[str, str] | None = None
    ) -> None:
        """Start one more long-running component (an executor's worker), like the four."""
        self._start_component(name, args, env)

    def _start_component(
        self, name: str, args: list[str] | None = None, env: dict[str, str] | None = None
    ) -> None:
        """Start ``airflow <args>`` (default ``airflow <name>``), ``env`` added to its environment."""
        log_path = self.logs / f"{name}.log"
        log_file = log_path.open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "airflow", *(args or [name])],
            env={**self.environment(), **(env or {})},
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session and process group: killable as one
        )
        self.components[name] = Component(name, process, log_path, log_file)
        self._record_session(process.pid)

    def check_alive(self) -> None:
        """Raise if a component has exited."""
        for component in self.components.values():
            if not component.alive():
                raise DeploymentError(
                    f"airflow {component.name} exited with {component.process.returncode}\n"
                    f"{tail(component.log_path)}"
                )

    def stop(self, grace: float = 20.0) -> list[str]:
        """Stop every component and the database; return what had to be killed."""
        killed: list[str] = []
        components = list(self.components.values())
        for component in components:
            with _suppress_lookup():
                os.killpg(component.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for component in components:
            remaining = max(0.1, deadline - time.monotonic())
            try:
                component.process.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                killed.append(component.name)
        for component in components:
            killed.extend(f"{component.name}:{p}" for p in kill_session(component.pid))
            component.process.wait()
            component.log_file.close()
        self.components.clear()
        self.executor.stop_services()
        if self.server is not None:
            self.server.stop()
            self.server = None
        return killed

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time used so far by each component (with everything it forked) and by PostgreSQL.

        On a shared machine wall time says little; CPU time says what the deployment cost.
        Descendants that already exited count through their live ancestors.
        """

        def used(processes: Iterator[psutil.Process]) -> float:
            total = 0.0
            for process in processes:
                try:
                    times = process.cpu_times()
                except psutil.Error:
                    continue
                total += times.user + times.system + times.children_user + times.children_system
            return total

        usage = {
            name: used(processes_in_sessions({component.pid}))
            for name, component in self.components.items()
        }
        tasks = 0.0  # split off the task processes (and their supervisors) from their hosts
        for name in self.executor.task_hosts:
            host = self.components.get(name)
            if host is None:
                continue
            try:
                times = psutil.Process(host.pid).cpu_times()
            except psutil.Error:
                continue
            tasks += max(0.0, usage[name] - times.user - times.system)
            usage[name] = times.user + times.system
        usage["tasks"] = tasks
        usage.update(self.executor.cpu_seconds())
        if self.server is not None and self.server.directory is not None:
            usage["postgres"] = used(processes_under(self.server.directory))
        return usage

    def task_candidates(self) -> list[psutil.Process]:
        """The task hosts' processes: the scheduler's (LocalExecutor) or the Celery workers'."""
        hosts = {self.components[n].pid for n in self.executor.task_hosts if n in self.components}
        return list(processes_in_sessions(hosts))

    def workers_ready(self) -> bool:
        """Whether the executor's workers take tasks (always, for the LocalExecutor)."""
        return self.executor.ready()

    def leftovers(self) -> list[psutil.Process]:
        """Processes this deployment started that are still alive (should be none)."""
        found = {p.pid: p for p in processes_in_sessions(self._sessions)}
        for place in run_places(self.root):
            found.update((p.pid, p) for p in processes_under(place))
        return list(found.values())

    def record_session(self, pid: int) -> None:
        """Count the session ``pid`` leads as this deployment's (an executor's service)."""
        self._record_session(pid)

    def _record_session(self, pid: int) -> None:
        self._sessions.add(pid)


# -- sessions: every process a component forks stays in the component's session --------------


def session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def processes_in_sessions(sessions: set[int]) -> Iterator[psutil.Process]:
    """Live processes whose session id is one of ``sessions`` (not zombies)."""
    if not sessions:
        return
    for process in psutil.process_iter():
        try:
            if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if session_of(process.pid) in sessions:
            yield process


def kill_session(leader: int) -> list[int]:
    """SIGKILL every live process in the session ``leader`` started; return their pids.

    Task processes put themselves in process groups of their own, so killing the
    leader's process group is not enough; the session holds them all.
    """
    killed = []
    for process in processes_in_sessions({leader}):
        with _suppress_lookup():
            process.send_signal(signal.SIGKILL)
            killed.append(process.pid)
    psutil.wait_procs([p for p in psutil.process_iter() if p.pid in killed], timeout=10)
    return killed


#: The programs a run starts (``redis-server`` is a link to ``redis-check-rdb`` on Debian).
OUR_PROGRAMS = frozenset({"postgres", "redis-server", "redis-check-rdb"})


def processes_under(root: Path) -> Iterator[psutil.Process]:
    """Live Python, PostgreSQL and Redis processes whose working directory is ``root`` or below.

    Every component starts in ``root`` and the PostgreSQL server runs in its data
    directory under it, so this finds what an interrupted run left, whatever its
    session -- and not, say, a shell someone opened in ``.e2e/logs``.
    """
    root = root.resolve()
    for process in psutil.process_iter():
        try:
            if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
                continue
            cwd = Path(process.cwd())
            program = Path(process.exe()).name
        except (psutil.Error, OSError):
            continue
        ours = program.startswith("python") or program in OUR_PROGRAMS
        if ours and (cwd == root or root in cwd.parents):
            yield process


#: The link in ``.e2e/`` to the database server's directory when that is elsewhere.
SERVER_ELSEWHERE = "postgres-elsewhere"


def run_places(root: Path) -> list[Path]:
    """``root``, and the database server's directory outside it if a link names one."""
    link = root / SERVER_ELSEWHERE
    return [root, link.resolve()] if link.is_symlink() else [root]


def reap_previous_run(root: Path, say: Callable[[str], None]) -> None:
    """Kill what a previous, interrupted run left alive, then remove its files."""
    if not root.exists():
        return
    places = run_places(root)
    leftovers = [process for place in places for process in processes_under(place)]
    for process in leftovers:
        with _suppress_lookup():
            process.send_signal(signal.SIGKILL)
    if leftovers:
        psutil.wait_procs(leftovers, timeout=10)
        say(f"killed {len(leftovers)} process(es) left by a previous run")
    for place in reversed(places):
        shutil.rmtree(place, ignore_errors=True)


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no {path.name})"
    return f"--- {path.name} (tail) ---\n" + "\n".join(text.splitlines()[-lines:])


class _suppress_lookup:
    """Ignore a process that is already gone."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> bool:
        return exc_type is not None and issubclass(
            exc_type, (ProcessLookupError, psutil.NoSuchProcess, PermissionError)
        )
