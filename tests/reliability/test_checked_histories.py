"""Histories recorded under killed sessions and killed workers, checked for linearizability.

Four processes run keyed increments, keyed claims completed by keyed guarded
updates, keyed seeds and lease steps (tests/reliability/fault_workers.py) while
the test terminates their server sessions (``pg_terminate_backend``) every
0.1 to 0.25 s: a call in flight fails with ``StoreUnavailableError`` and
is retried with its idempotency key. Every call of every process is recorded and
the history checked against each model (tests/support/linearizability): the
counter, the per-row queue (no row held by two claimers; each keyed retry
replayed its batch), the upsert-once register and the lease. Calls whose reply
was lost are checked as of unknown outcome.

On both backends, the same workers are also SIGKILLed at random moments and
started again from the round they were in, repeating its calls with the same
idempotency keys, as Airflow retries a killed task.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from airflow_atomic_store import AtomicStore
from devkit.pgbouncer import PgBouncer
from devkit.postgres_server import PostgresServer
from devkit.processes import run_in_processes, worker_context
from tests.reliability import fault_workers
from tests.reliability.support import scaled
from tests.support.linearizability import Checked, read_calls

postgres_only = pytest.mark.parametrize(
    "backend", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)

WORKERS = 4


class Terminator(threading.Thread):
    """Terminate every server session of ``role`` at random intervals until stopped."""

    def __init__(self, admin_url: str, role: str, started: threading.Event) -> None:
        super().__init__(daemon=True)
        self.admin_url, self.role, self.started = admin_url, role, started
        self.stop = threading.Event()
        self.terminated = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(35)
        try:
            self.started.wait(timeout=120)
            with psycopg.connect(self.admin_url, autocommit=True) as admin:
                while not self.stop.wait(rng.uniform(0.03, 0.1)):
                    row = admin.execute(
                        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                        "FROM pg_stat_activity WHERE usename = %s",
                        (self.role,),
                    ).fetchone()
                    self.terminated += int(row[0]) if row else 0
        except BaseException as exc:  # reported by the test
            self.error = exc


@pytest.fixture
def role(store_url: str) -> str:
    name = urllib.parse.urlsplit(store_url).username
    assert name
    return name


@pytest.fixture
def pooled_url(role: str, postgres_server: PostgresServer) -> Iterator[str]:
    with PgBouncer(postgres_server, pool_size=2, user=role) as bouncer:
        yield bouncer.url_for(postgres_server.dbname)


def wait_until_running(store: AtomicStore, started: threading.Event) -> None:
    """Set ``started`` once a worker has incremented: every worker is past its warm-up."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        total = store.get("counters", "total")
        if total and total["n"] > 0:
            break
        time.sleep(0.01)
    started.set()


def run_scenario(
    store_url: str, url: str, pooled: bool, admin_url: str, role: str, history: Path
) -> dict[str, Checked]:
    """Set up, run the workers (on ``url``) under the terminator, read the end state, check.

    Set-up and end state go to the server directly (``store_url``), each on a fresh store.
    """
    with AtomicStore(store_url) as store:
        return _run(store, store_url, url, pooled, admin_url, role, history)


def _run(
    store: AtomicStore,
    store_url: str,
    url: str,
    pooled: bool,
    admin_url: str,
    role: str,
    history: Path,
) -> dict[str, Checked]:
    fault_workers.set_up(store, history)
    started = threading.Event()
    terminator = Terminator(admin_url, role, started)
    terminator.start()
    watcher = threading.Thread(target=wait_until_running, args=(store, started), daemon=True)
    watcher.start()
    try:
        results = run_in_processes(
            fault_workers.keyed_stream,
            # Rounds enough for the terminator's first pass to find calls in flight: a
            # round takes a few ms once the store is open.
            [(url, pooled, str(history), f"w{n}", scaled(80, 400)) for n in range(WORKERS)],
            timeout=300,
        )
    finally:
        started.set()
        terminator.stop.set()
        terminator.join(timeout=30)
        watcher.join(timeout=30)
    assert terminator.error is None, terminator.error
    fault_workers.read_the_end_state(store_url, history)
    unavailable = sum(result["unavailable"] for result in results)
    replayed = sum(result["replayed"] for result in results)
    print(
        f"{terminator.terminated} sessions terminated, {unavailable} calls failed, "
        f"{replayed} keyed retries replayed a first attempt that had applied"
    )
    assert terminator.terminated > 0 and unavailable > 0, "no fault reached a call"
    return fault_workers.check_each_model(history)


@postgres_only
def test_keyed_primitives_stay_linearizable_while_their_sessions_are_terminated(
    store_url: str, role: str, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    admin = postgres_server.url_for(postgres_server.dbname)
    verdicts = run_scenario(store_url, store_url, False, admin, role, tmp_path / "history")
    fault_workers.assert_all_linearizable(verdicts)


# The faults of the test above, through a PgBouncer: make test-all only (make test has
# those faults without the pooler, and the store behind it in test_pgbouncer.py).
@pytest.mark.slow
@postgres_only
def test_keyed_primitives_stay_linearizable_through_pgbouncer_while_server_sessions_die(
    store_url: str,
    pooled_url: str,
    role: str,
    postgres_server: PostgresServer,
    tmp_path: Path,
) -> None:
    admin = postgres_server.url_for(postgres_server.dbname)
    verdicts = run_scenario(store_url, pooled_url, True, admin, role, tmp_path / "history")
    fault_workers.assert_all_linearizable(verdicts)


KILLS = 3


def test_keyed_primitives_stay_linearizable_when_workers_are_killed_and_retried(
    store: AtomicStore, store_url: str, tmp_path: Path
) -> None:
    history = tmp_path / "history"
    fault_workers.set_up(store, history)
    context = worker_context()
    # Enough rounds that kills land among calls: a worker runs a round in a few ms once
    # its store is open (no set to build first), so 12 rounds ended before the first kill.
    rounds = scaled(60, 300)
    progress = {f"w{n}": context.Value("i", 0) for n in range(WORKERS)}
    busy = {me: context.Value("i", 0) for me in progress}
    incarnations: Counter[str] = Counter()

    def start(me: str) -> Any:
        incarnations[me] += 1
        busy[me].value = 0
        process = context.Process(
            target=fault_workers.keyed_stream_from,
            args=(store_url, str(history), me, f"{me}.{incarnations[me]}", progress[me].value),
            kwargs={"iterations": rounds, "progress": progress[me], "busy": busy[me]},
            daemon=True,
        )
        process.start()
        return process

    running = {me: start(me) for me in progress}
    rng, killed = random.Random(35), list[tuple[str, int]]()
    deadline = time.monotonic() + 240
    while any(process.is_alive() for process in running.values()):
        assert time.monotonic() < deadline, "the workers did not finish"
        time.sleep(rng.uniform(0.02, 0.1))
        alive = [me for me, process in running.items() if process.is_alive() and busy[me].value]
        if alive and len(killed) < KILLS:
            me = rng.choice(alive)
            os.kill(running[me].pid, signal.SIGKILL)
            running[me].join(timeout=30)
            killed.append((me, progress[me].value))
            running[me] = start(me)
    assert [process.exitcode for process in running.values()] == [0] * WORKERS
    assert len(killed) >= 2, f"the workers finished before a second kill: {killed}"
    fault_workers.read_the_end_state(store_url, history)
    calls = read_calls(sorted(history.glob("*.jsonl")))
    replays = sum(
        1 for call in calls if isinstance(call.result, dict) and call.result.get("replayed")
    )
    print(f"killed (worker, round): {killed}; {replays} repeated calls replayed their receipt")
    fault_workers.assert_all_linearizable(fault_workers.check_each_model(history))
