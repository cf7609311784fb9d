"""PostgreSQL restarts under a stream of operations: clear errors, reconnection, no lost or phantom write.

The test owns a throwaway server (other tests share the session's), restarts it
twice (``fast``: sessions are terminated; ``immediate``: the server crashes and
recovers from its WAL) while several processes run updates, claims and upserts,
then accounts for every operation. Each operation writes a marker unique to it
in the same statement as its effect, so the final state tells exactly which
operations committed, including those whose caller saw an error.

Every call is also recorded (tests/support/linearizability) and the history
checked for linearizability: the counter, the queue (per row) and the
upserted events, with each call that saw an error taken as of unknown outcome.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore, StoreUnavailableError
from devkit.postgres_server import PostgresServer
from devkit.processes import run_in_processes
from tests.reliability import workers
from tests.reliability.support import scaled
from tests.support.linearizability import (
    COUNTER,
    QUEUE_ROW,
    UPSERT_ONCE,
    Recorder,
    RecordingStore,
    check_recorded,
    translate,
)

#: What the history of each logical table is checked against.
MODELS = {
    "counters": (COUNTER, partial(translate.counter, table="counters")),
    "queue": (QUEUE_ROW, partial(translate.queue, table="queue")),
    "events": (UPSERT_ONCE, partial(translate.upsert_once, table="events")),
}

pytestmark = pytest.mark.postgres

WORKERS = 4
QUEUE_ROWS = 600
#: Longest any single operation may take: an in-flight statement fails at once when
#: its session is terminated, and connecting to a stopped server is refused at once.
NO_HANG = 15.0


def wait_for_progress(url: str, beyond: int, timeout: float = 60) -> int:
    """Wait until the shared counter exceeds ``beyond``; return it."""
    deadline = time.monotonic() + timeout
    with AtomicStore(url) as store:
        while time.monotonic() < deadline:
            try:
                total = store.get("counters", "total")
            except StoreUnavailableError:
                total = None
            if total is not None and total["n"] > beyond:
                return int(total["n"])
            time.sleep(0.05)
    raise AssertionError(f"the workers made no progress beyond {beyond} in {timeout}s")


def restart_repeatedly(
    server: PostgresServer, url: str, modes: list[str], stop_file: Path, log: list[Any]
) -> None:
    try:
        seen = wait_for_progress(url, 20)
        for mode in modes:
            began = time.time()
            server.restart(mode)
            log.append((mode, began, time.time()))
            seen = wait_for_progress(url, seen + 30)
        time.sleep(0.5)
    except BaseException as exc:  # reported by the test, after the workers stop
        log.append(("error", repr(exc), 0.0))
    finally:
        stop_file.touch()


def by_status(ops: list[dict[str, Any]], kind: str, status: str) -> dict[str, Any]:
    return {
        op["marker"]: op.get("result")
        for op in ops
        if op["kind"] == kind and op["status"] == status
    }


def test_restart_mid_stream_fails_in_flight_operations_cleanly_and_loses_nothing(
    tmp_path: Path,
) -> None:
    modes = ["fast", "immediate"] * scaled(1, 5)
    # Durable commits: "immediate" is a crash, and a commit reported as successful
    # must survive it (the suite's servers trade that away for speed).
    history = tmp_path / "history"
    with PostgresServer(settings={"synchronous_commit": "on"}) as server:
        url = server.url + "?connect_timeout=5"
        with AtomicStore(url) as plain, Recorder(history, "setup") as recorder:
            store: Any = RecordingStore(plain, recorder)
            store.put("counters", "total", {"n": 0, "seen": {}})
            for i in range(QUEUE_ROWS):
                store.put("queue", f"q-{i:05d}", {"status": "pending"})

        stop_file = tmp_path / "stop"
        restarts: list[Any] = []
        restarter = threading.Thread(
            target=restart_repeatedly, args=(server, url, modes, stop_file, restarts), daemon=True
        )
        restarter.start()
        deadline = time.time() + 150
        try:
            logs = run_in_processes(
                workers.stream_through_restarts,
                [(url, w, str(stop_file), deadline, str(history)) for w in range(WORKERS)],
                timeout=200,
            )
        finally:
            stop_file.touch()
            restarter.join(timeout=120)
        assert [entry[0] for entry in restarts] == modes, restarts

        ops = [op for log in logs for op in log]
        # Every outcome is a success or a clear, retryable error; nothing hangs.
        assert not [op for op in ops if op["status"] == "other"]
        failed = [op for op in ops if op["status"] == "unavailable"]
        assert failed, "the restarts interrupted nothing: the test proves nothing"
        assert all(op["error"].startswith("PostgreSQL store unavailable") for op in failed)
        slowest = max(op["ended"] - op["started"] for op in ops)
        assert slowest < NO_HANG, f"an operation took {slowest:.1f}s"
        # Later operations succeed after reconnecting, in every worker.
        last_restart_done = restarts[-1][2]
        for worker, log in enumerate(logs):
            assert any(op["status"] == "ok" and op["started"] > last_restart_done for op in log), (
                f"worker {worker} never succeeded after the last restart"
            )

        with AtomicStore(url) as plain, Recorder(history, "final") as recorder:
            store = RecordingStore(plain, recorder)
            check_updates(store, ops, len(modes))
            check_claims(store, ops)
            check_upserts(store, ops)
    unknown = 0
    for table, (model, translation) in MODELS.items():
        checked = check_recorded(history, model, translation)
        print(f"{table}: {checked.describe()}")
        assert checked.ok, checked.describe()
        unknown += checked.result.unknown
    assert unknown, "no call of unknown outcome was checked"


def check_updates(store: Any, ops: list[dict[str, Any]], restarts: int) -> None:
    total = store.get("counters", "total")
    seen = set(total["seen"])
    succeeded = set(by_status(ops, "update", "ok"))
    failed = set(by_status(ops, "update", "unavailable"))
    assert total["n"] == len(seen), "an increment committed without its marker, or the reverse"
    assert succeeded <= seen, f"successful updates lost: {sorted(succeeded - seen)[:5]}"
    assert seen <= succeeded | failed, f"phantom updates: {sorted(seen - succeeded - failed)[:5]}"
    # Only an operation in flight at a restart can have committed and still failed.
    committed_but_failed = seen & failed
    assert len(committed_but_failed) <= WORKERS * restarts, sorted(committed_but_failed)
    print(
        f"updates: {len(succeeded)} succeeded, {len(failed)} failed "
        f"({len(committed_but_failed)} of those had committed)"
    )


def check_claims(store: Any, ops: list[dict[str, Any]]) -> None:
    rows = {row["key"]: row["value"] for row in store.query("queue", limit=10_000)}
    assert len(rows) == QUEUE_ROWS
    claimed_by: dict[str, set[str]] = defaultdict(set)
    for key, value in rows.items():
        if value["status"] == "claimed":
            claimed_by[value["claimedBy"]].add(key)
        else:
            assert value == {"status": "pending"}, (key, value)
    succeeded = by_status(ops, "claim", "ok")
    failed = set(by_status(ops, "claim", "unavailable"))
    for marker, keys in succeeded.items():
        assert claimed_by.get(marker, set()) == set(keys), marker
    returned = [key for keys in succeeded.values() for key in keys]
    assert len(returned) == len(set(returned)), "a row was returned to two claims"
    assert set(claimed_by) <= set(succeeded) | failed, "a claim nobody made marked rows"
    assert all(len(keys) <= 2 for keys in claimed_by.values()), "a claim exceeded its limit"
    assert sum(1 for keys in succeeded.values() if keys), "no claim ever won a row"


def check_upserts(store: Any, ops: list[dict[str, Any]]) -> None:
    rows = {row["key"]: row["value"] for row in store.query("events", limit=10_000)}
    succeeded = by_status(ops, "upsert", "ok")
    failed = set(by_status(ops, "upsert", "unavailable"))
    assert set(succeeded) <= set(rows), "a successful upsert is missing"
    assert set(rows) <= set(succeeded) | failed, "a row nobody upserted exists"
    assert all(inserted is True for inserted in succeeded.values())
    for key, value in rows.items():  # inserted once, never also mutated
        assert value == {"marker": key, "n": 0}, (key, value)
