"""A claimer killed with SIGKILL loses nothing: a stale-claim pass takes over exactly its rows.

The pattern under test is the one DAG authors use for at-least-once queues with
exactly-once completion: claim (``status → in_flight``, ``claimedAt``,
``claimedBy``), complete with an update guarded on ``claimedBy``, and
periodically re-claim rows whose claim is older than a threshold.

Every call of every process (the victim's too, up to its last, unfinished one)
is recorded, and the whole history is checked for linearizability against the
per-row queue model (tests/support/linearizability): no row held by two
claimers without a stale-claim recovery in between.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore, timestamps
from devkit.processes import run_in_processes, worker_context
from tests.reliability import workers
from tests.reliability.support import scaled
from tests.support.linearizability import (
    QUEUE_ROW,
    Recorder,
    RecordingStore,
    check_recorded,
    translate,
)

TABLE = "jobs"
RESCUERS = 3


class _NoBarrier:
    def wait(self, timeout: float | None = None) -> None:
        return None


NO_BARRIER = _NoBarrier()


@pytest.fixture
def history(tmp_path: Path) -> str:
    """Where every process records its calls."""
    return str(tmp_path / "history")


def assert_history_linearizable(history: str) -> None:
    checked = check_recorded(history, QUEUE_ROW, partial(translate.queue, table=TABLE))
    print(checked.describe())
    assert checked.ok, checked.describe()


@pytest.fixture
def parent(store: AtomicStore, history: str) -> Iterator[Any]:
    """The test's own store, its calls recorded as the process ``parent``."""
    with Recorder(history, "parent") as recorder:
        yield RecordingStore(store, recorder)


def seed(store: Any, rows: int) -> list[str]:
    keys = [f"job-{i:04d}" for i in range(rows)]
    for key in keys:
        store.put(TABLE, key, {"status": "pending", "payload": key})
    return keys


def kill(process: Any) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.join(timeout=30)
    assert process.exitcode == -signal.SIGKILL


def threshold_after_the_kill() -> str:
    """A threshold later than every claim the dead process made."""
    time.sleep(0.002)
    threshold = timestamps.now()
    time.sleep(0.002)
    return threshold


def rescue(url: str, threshold: str, history: str) -> tuple[list[str], list[str]]:
    results = run_in_processes(
        workers.rescue_stale_claims,
        [(url, TABLE, threshold, f"rescuer-{i}", 2, history) for i in range(RESCUERS)],
        timeout=120,
    )
    reclaimed = [key for result in results for key in result["reclaimed"]]
    completed = [key for result in results for key in result["completed"]]
    return reclaimed, completed


def assert_every_row_completed_exactly_once(store: Any, keys: list[str]) -> None:
    rows = {row["key"]: row["value"] for row in store.query(TABLE, limit=10_000)}
    assert set(rows) == set(keys)
    not_done = sorted(key for key, value in rows.items() if value["status"] != "done")
    assert not not_done, f"rows never completed: {not_done}"
    twice = sorted(key for key, value in rows.items() if value.get("completions") != 1)
    assert not twice, f"rows completed other than once: {twice}"


def test_stale_claim_pass_takes_over_exactly_the_rows_of_a_killed_claimer(
    parent: Any, store_url: str, history: str
) -> None:
    store = parent
    keys = seed(store, 40)
    context = worker_context()
    report = context.Queue()
    victim = context.Process(
        target=workers.claim_complete_some_then_hang,
        args=(store_url, TABLE, "victim", 12, 4, report, history),
        daemon=True,
    )
    victim.start()
    try:
        progress = report.get(timeout=60)
    finally:
        kill(victim)
    assert len(progress["claimed"]) == 12 and len(progress["completed"]) == 4
    orphaned = set(progress["claimed"]) - set(progress["completed"])

    threshold = threshold_after_the_kill()
    # A live worker's claim made after the threshold is not stale and must be left alone.
    live = store.atomic_claim(TABLE, where=workers.PENDING, limit=5, execution_id="live")
    live_keys = [row["key"] for row in live["claimed"]]
    assert len(live_keys) == 5

    reclaimed, completed = rescue(store_url, threshold, history)
    assert Counter(reclaimed) == Counter(orphaned), "exactly the orphaned rows, each once"
    assert sorted(completed) == sorted(orphaned)

    # The victim, were it only slow rather than dead, can no longer complete its rows.
    for key in sorted(orphaned):
        assert workers.complete(store, TABLE, key, "victim") is False
    for key in live_keys:
        assert store.get(TABLE, key)["claimedBy"] == "live"
        assert workers.complete(store, TABLE, key, "live") is True
    drained = store.atomic_claim(TABLE, where=workers.PENDING, limit=1000, execution_id="rest")
    assert drained["count"] == 40 - 12 - 5
    for row in drained["claimed"]:
        assert workers.complete(store, TABLE, row["key"], "rest") is True
    assert_every_row_completed_exactly_once(store, keys)
    assert_history_linearizable(history)


@pytest.mark.parametrize("round_", range(scaled(1, 10)))
def test_claimer_killed_at_a_random_moment_loses_no_row_and_completes_none_twice(
    parent: Any, store_url: str, history: str, round_: int
) -> None:
    store = parent
    keys = seed(store, 400)
    context = worker_context()
    started = context.Event()
    victim = context.Process(
        target=workers.claim_and_complete_until_killed,
        args=(store_url, TABLE, "victim", 5, started, history),
        daemon=True,
    )
    victim.start()
    try:
        assert started.wait(timeout=60), "the victim never started"
        # A random moment mid-stream: between, or inside, its statements.
        time.sleep(random.Random(round_).uniform(0.03, 0.2))
    finally:
        kill(victim)

    orphaned = {
        row["key"] for row in store.query(TABLE, where=workers.owned_by("victim"), limit=10_000)
    }
    threshold = threshold_after_the_kill()
    # One rescuer here: concurrent rescuers are the previous test's business.
    rescued = workers.rescue_stale_claims(
        NO_BARRIER, store_url, TABLE, threshold, "rescuer-0", 2, history
    )
    reclaimed, completed = rescued["reclaimed"], rescued["completed"]
    assert Counter(reclaimed) == Counter(orphaned)
    assert sorted(completed) == sorted(orphaned)
    victim_done = len(store.query(TABLE, where=[workers.done_by("victim")], limit=10_000))
    print(f"victim completed {victim_done} rows and orphaned {len(orphaned)} before SIGKILL")

    rest = store.atomic_claim(TABLE, where=workers.PENDING, limit=1000, execution_id="rest")
    for row in rest["claimed"]:
        assert workers.complete(store, TABLE, row["key"], "rest") is True
    assert_every_row_completed_exactly_once(store, keys)
    done_by = Counter(row["value"]["completedBy"] for row in store.query(TABLE, limit=10_000))
    assert done_by["victim"] + sum(done_by[f"rescuer-{i}"] for i in range(RESCUERS)) + done_by[
        "rest"
    ] == len(keys)
    assert_history_linearizable(history)
