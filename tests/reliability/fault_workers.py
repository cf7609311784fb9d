"""A recorded stream of keyed primitives for the fault scenarios (importable by ``spawn`` children).

Each worker runs the patterns DAG authors use, every call recorded
(tests/support/linearizability) so that the parent can check the whole history:

* a keyed increment of a shared counter,
* a keyed claim of up to two queue rows, each completed by a keyed update
  guarded on ``claimedBy``,
* a keyed seed-if-missing of a row every worker seeds,
* a keyed lease step: acquire (seed, or take over when expired), renew or release.

A call that fails with ``StoreUnavailableError`` is retried with the same
idempotency key and arguments, as Airflow retries a task: the key makes the
retry apply at most once and replay the first attempt's result.

The scenario's set-up, end-state reads and checks are here too (``set_up``,
``read_the_end_state``, ``check_each_model``), for any fault test to reuse:
tests/reliability/test_checked_histories.py shows the order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from airflow_atomic_store import AtomicStore, StoreUnavailableError, timestamps
from tests.reliability.workers import PENDING, owned_by
from tests.support.linearizability import (
    COUNTER,
    LEASE,
    QUEUE_ROW,
    UPSERT_ONCE,
    Checked,
    Recorder,
    RecordingStore,
    check_recorded,
    translate,
)

T = TypeVar("T")
INCREMENT = [{"field": "n", "operation": "increment", "value": 1}]
ATTEMPTS = 50
LEASE_SECONDS = 0.03
QUEUE_ROWS = 100

#: What the history of each logical table is checked against.
MODELS = {
    "counters": (COUNTER, partial(translate.counter, table="counters")),
    "queue": (QUEUE_ROW, partial(translate.queue, table="queue")),
    "seeds": (UPSERT_ONCE, partial(translate.upsert_once, table="seeds")),
    "leases": (LEASE, partial(translate.lease, table="leases")),
}


def set_up(store: AtomicStore, history: Path) -> None:
    """The counter and the pending queue rows, written (and recorded) before the workers start."""
    with Recorder(history, "parent") as recorder:
        parent = RecordingStore(store, recorder)
        parent.put("counters", "total", {"n": 0})
        for i in range(QUEUE_ROWS):
            parent.put("queue", f"q-{i:04d}", {"status": "pending"})


def read_the_end_state(store_url: str, history: Path) -> None:
    """Read the counter and every queue row on a fresh store, recorded: the history's last word."""
    with AtomicStore(store_url) as fresh, Recorder(history, "final") as recorder:
        final = RecordingStore(fresh, recorder)
        final.get("counters", "total")
        final.query("queue", limit=10_000)


def check_each_model(history: Path) -> dict[str, Checked]:
    """Check the recorded history of each table against its model; print each verdict."""
    verdicts = {}
    for table, (model, translation) in MODELS.items():
        verdicts[table] = checked = check_recorded(history, model, translation)
        print(f"{table}: {checked.describe()}")
    return verdicts


def assert_all_linearizable(verdicts: dict[str, Checked]) -> None:
    failed = {table: checked.describe() for table, checked in verdicts.items() if not checked.ok}
    assert not failed, "\n".join(failed.values())


@contextmanager
def recorded_store(url: str, pooled: bool, history: str, me: str) -> Iterator[Any]:
    """A store on ``url`` (through PgBouncer when ``pooled``: no prepared statements)."""
    if pooled:
        import psycopg

        store = AtomicStore.from_connection_factory(
            "postgresql", lambda: psycopg.connect(url, prepare_threshold=None, connect_timeout=5)
        )
    else:
        store = AtomicStore(url)
    with store, Recorder(history, me) as recorder:
        store.get("counters", "__warm-up__")
        yield RecordingStore(store, recorder)


class _Retrying:
    """Retry a call on ``StoreUnavailableError`` (the same idempotency key each time)."""

    def __init__(self) -> None:
        self.unavailable = 0
        self.replayed = 0  # retries that found the first attempt applied

    def __call__(self, call: Callable[[], T]) -> T:
        for _ in range(ATTEMPTS - 1):
            try:
                result = call()
            except StoreUnavailableError:
                self.unavailable += 1
                time.sleep(0.02)
                continue
            self.replayed += bool(isinstance(result, dict) and result.get("replayed"))
            return result
        return call()


def keyed_stream(
    barrier: Any, url: str, pooled: bool, history: str, me: str, iterations: int
) -> dict[str, int]:
    """``iterations`` rounds of increment, claim and complete, seed, lease step; recorded."""
    with recorded_store(url, pooled, history, me) as store:
        barrier.wait(timeout=60)
        return _rounds(store, me, me, range(iterations), None)


def keyed_stream_from(
    url: str,
    history: str,
    me: str,
    process: str,
    first: int,
    iterations: int,
    progress: Any,
    busy: Any,
) -> None:
    """The same rounds from ``first`` on, noting each round's number in ``progress``.

    ``busy`` is set once the store is open: from then on a kill lands among calls.
    Killed mid-round and started again from the round it noted, a worker repeats
    that round's calls with the same idempotency keys, as a retried task does.
    """
    with recorded_store(url, False, history, process) as store:
        busy.value = 1
        _rounds(store, me, process, range(first, iterations), progress)


def _rounds(store: Any, me: str, process: str, rounds: range, progress: Any) -> dict[str, int]:
    """Run ``rounds``; count the calls that failed and the keyed retries that replayed.

    Lease steps are keyed per process (``process``: one incarnation of ``me``): a
    worker started again after a kill takes new timestamps, so its lease calls are
    new operations, and the killed one's last lease call stays of unknown outcome.
    """
    retried = _Retrying()
    holding = False
    for i in rounds:
        if progress is not None:
            progress.value = i
        retried(
            partial(
                store.atomic_update,
                "counters",
                "total",
                mutations=INCREMENT,
                idempotency_key=f"{me}-inc-{i}",
            )
        )
        claimed = retried(
            partial(
                store.atomic_claim,
                "queue",
                where=PENDING,
                limit=2,
                execution_id=me,
                idempotency_key=f"{me}-claim-{i}",
            )
        )
        for row in claimed["claimed"]:
            retried(partial(_complete, store, row["key"], me))
        retried(
            partial(
                store.atomic_upsert,
                "seeds",
                f"s-{i}",
                insert_value={"by": me},
                idempotency_key=f"{me}-seed-{i}",
            )
        )
        holding = lease_step(store, me, holding, i % 3 == 2, f"{process}-lease-{i}", retried)
    return {"unavailable": retried.unavailable, "replayed": retried.replayed}


def _complete(store: Any, key: str, me: str) -> Any:
    return store.atomic_update(
        "queue",
        key,
        where=owned_by(me),
        mutations=[
            {"field": "status", "operation": "set", "value": "done"},
            {"field": "completedBy", "operation": "set", "value": me},
        ],
        idempotency_key=f"{me}-done-{key}",
    )


def lease_step(store: Any, me: str, holding: bool, release: bool, key: str, retried: Any) -> bool:
    """One step of the leader-lease recipe; returns whether ``me`` holds the lease after it.

    Each call is keyed (``key`` and its role), as the recipe's operators key theirs,
    and retried with its arguments unchanged, so the attempts are one operation.
    """
    now = timestamps.now()
    until = timestamps.shifted(timedelta(seconds=LEASE_SECONDS))
    mine = [{"field": "holder", "operator": "equals", "value": me}]
    if holding:
        expiry = now if release else until
        renewed = retried(
            partial(
                store.atomic_update,
                "leases",
                "lease",
                where=mine,
                mutations=[{"field": "expiresAt", "operation": "set", "value": expiry}],
                idempotency_key=f"{key}-renew",
            )
        )
        return bool(renewed["updated"]) and not release
    seeded = retried(
        partial(
            store.atomic_upsert,
            "leases",
            "lease",
            insert_value={"holder": me, "expiresAt": until},
            idempotency_key=f"{key}-seed",
        )
    )
    if seeded["inserted"]:
        return True
    taken = retried(
        partial(
            store.atomic_update,
            "leases",
            "lease",
            where=[{"field": "expiresAt", "operator": "lte", "value": now}],
            mutations=[
                {"field": "holder", "operation": "set", "value": me},
                {"field": "expiresAt", "operation": "set", "value": until},
            ],
            idempotency_key=f"{key}-take",
        )
    )
    return bool(taken["updated"])
