"""Worker processes of the failover scenario (tests/reliability/test_failover.py), and their history.

Each worker runs keyed operations (an idempotency key per operation) and retries
an operation with the *same* key after a ``StoreUnavailableError`` until it
succeeds: what an Airflow task's retry does. Every attempt is recorded as one
call in a JSON-lines history, one file per process (``<process>.jsonl``):

    {"type": "invoke", "process", "seq", "method", "args", "pid", "time"}
    {"type": "ok" | "unknown" | "failed", "process", "seq", "result" | "error", "time"}

``time`` is ``time.monotonic_ns()`` (one clock for every process of the machine);
``unknown``: the call raised and may or may not have taken effect (its reply was
lost); ``failed``: the call certainly wrote nothing. A linearizability checker
reads these files as they are.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_atomic_store import AtomicStore, StoreUnavailableError
from airflow_atomic_store.exceptions import IdempotencyKeyError, SpecError

PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]
#: The set the builder declares on ``jobs``: a filter of its own, since sets are per
#: filter and the seed's ``PENDING`` set (built before the failover) serves ``jobs`` too.
JOBS_SET = [{"field": "status", "operator": "in", "value": ["pending", "retry"]}]
#: Errors raised before any write: the call certainly had no effect.
NO_EFFECT = (SpecError, IdempotencyKeyError)
#: Pause after an unavailable store before the same call is tried again.
RETRY_PAUSE = 0.05
#: Pause between two operations: a steady stream, not a flood (2 shared cores).
PACE = 0.002


class History:
    """Append one process's calls to ``<directory>/<process>.jsonl``, flushed per line."""

    def __init__(self, directory: str, process: str) -> None:
        self.process = process
        path = Path(directory) / f"{process}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", buffering=1)
        self._seq = 0

    def call(self, method: str, args: dict[str, Any], run: Callable[[], Any]) -> Any:
        """Run ``run()`` as one recorded call; its exception is recorded and raised."""
        self._seq += 1
        seq = self._seq
        self._write("invoke", seq, method=method, args=args, pid=os.getpid())
        try:
            result = run()
        except BaseException as exc:
            kind = "failed" if isinstance(exc, NO_EFFECT) else "unknown"
            self._write(kind, seq, error=f"{type(exc).__name__}: {exc}")
            raise
        self._write("ok", seq, result=result)
        return result

    def _write(self, kind: str, seq: int, **fields: Any) -> None:
        event = {"type": kind, "process": self.process, "seq": seq, **fields}
        event["time"] = time.monotonic_ns()
        self._file.write(json.dumps(event, default=repr) + "\n")

    def close(self) -> None:
        self._file.close()


def keyed(
    history: History, store: AtomicStore, method: str, args: dict[str, Any], deadline: float
) -> dict[str, Any]:
    """One operation, ``store.<method>(**args)``: attempts until one succeeds.

    The arguments (and so the idempotency key) are the same in every attempt, and
    the history records them as they were passed. Returns ``{"method", "args",
    "attempts": [error text, ...], "result"}``; an error other than
    ``StoreUnavailableError``, or the deadline, ends the retries (result None).
    """
    attempts: list[str] = []
    while True:
        try:
            result = history.call(method, args, lambda: getattr(store, method)(**args))
        except StoreUnavailableError as exc:
            attempts.append(f"StoreUnavailableError: {exc}")
            if time.monotonic() > deadline:
                return {"method": method, "args": args, "attempts": attempts, "result": None}
            time.sleep(RETRY_PAUSE)
            continue
        except Exception as exc:
            attempts.append(f"{type(exc).__name__}: {exc}")
            return {"method": method, "args": args, "attempts": attempts, "result": None}
        return {"method": method, "args": args, "attempts": attempts, "result": result}


def warm_up(store: AtomicStore, table: str, timeout: float = 60.0) -> None:
    """Connect before the barrier; a slow first connection (a loaded machine) is retried."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            store.get(table, "__warm-up__")
            return
        except StoreUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(RETRY_PAUSE)


def increment(key: str) -> dict[str, Any]:
    """Add 1 to the shared counter and mark the operation, in one statement."""
    return {
        "table": "counters",
        "key": "total",
        "mutations": [
            {"field": "n", "operation": "increment", "value": 1},
            {"field": f"seen.{key}", "operation": "set", "value": True},
        ],
        "return_fields": ["n"],
        "idempotency_key": key,
    }


def claim(table: str, key: str, limit: int) -> dict[str, Any]:
    """Claim up to ``limit`` pending rows, marked ``claimedBy: key``."""
    return {
        "table": table,
        "where": PENDING,
        "limit": limit,
        "execution_id": key,
        "return_fields": ["status"],
        "idempotency_key": key,
    }


def stream(
    barrier: Any, url: str, process: str, history_dir: str, stop_file: str, deadline: float
) -> list[dict[str, Any]]:
    """Keyed increments and keyed claims, alternately, until ``stop_file`` exists."""
    history = History(history_dir, process)
    operations: list[dict[str, Any]] = []
    with AtomicStore(url) as store:
        warm_up(store, "counters")
        barrier.wait(timeout=60)
        n = 0
        while not os.path.exists(stop_file) and time.monotonic() < deadline:
            key = f"{process}-{n}"
            if n % 2 == 0:
                operation = keyed(history, store, "atomic_update", increment(key), deadline)
            else:
                operation = keyed(history, store, "atomic_claim", claim("queue", key, 2), deadline)
            operation["key"] = key
            operations.append(operation)
            n += 1
            time.sleep(PACE)
    history.close()
    return operations


def build_index_through_failover(
    barrier: Any, url: str, process: str, history_dir: str, deadline: float
) -> dict[str, Any]:
    """Declare the ``jobs`` set (the build blocks until the failover interrupts it), then
    claim from ``jobs`` without the set, declare it again and claim through it."""
    history = History(history_dir, process)
    declare = {"table": "jobs", "where": JOBS_SET}
    with AtomicStore(url) as store:
        warm_up(store, "jobs")
        barrier.wait(timeout=60)
        # No retry: the failover ends this call (its deadline is now).
        interrupted = keyed(history, store, "ensure_claim_index", declare, time.monotonic())
        unindexed = keyed(history, store, "atomic_claim", claim("jobs", "jobs-1", 5), deadline)
        sets_before = [s for s in store.claim_sets() if s["where"] == JOBS_SET]
        declared = keyed(history, store, "ensure_claim_index", declare, deadline)
        indexed = keyed(history, store, "atomic_claim", claim("jobs", "jobs-2", 5), deadline)
        sets_after = [s for s in store.claim_sets() if s["where"] == JOBS_SET]
    history.close()
    return {
        "interrupted": interrupted,
        "unindexed": unindexed,
        "sets_before": sets_before,
        "declared": declared,
        "indexed": indexed,
        "sets_after": sets_after,
    }


def run_role(barrier: Any, role: str, *args: Any) -> Any:
    """``run_in_processes`` calls one target in every process: this one picks the role's."""
    roles: dict[str, Callable[..., Any]] = {"stream": stream, "build": build_index_through_failover}
    return roles[role](barrier, *args)
