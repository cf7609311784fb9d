"""Idempotency keys: a primitive called with a key applies at most once per key.

The receipt is written with the effect; a repeat (a retried task, a client that
lost the reply, a concurrent duplicate) applies nothing and returns the first
call's result with ``replayed: True``.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore, IdempotencyKeyError, SpecError
from airflow_atomic_store.store.atomic_store import MAX_RETENTION_SECONDS
from devkit.processes import run_in_processes, worker_context
from tests.support.physical import give_all_rows_the_same_timestamps
from tests.support.specs import HAS_TOKENS, INCREMENT, PENDING
from tests.support.specs import TAKE_TOKEN as TAKE


def _queue(store: AtomicStore, rows: int = 6) -> None:
    for number in range(rows):
        store.put("jobs", f"j-{number}", {"status": "pending"})


def test_a_keyed_update_applies_once_and_its_repeat_replays_the_result(store):
    store.atomic_upsert("buckets", "api", insert_value={"tokens": 3})
    first = store.atomic_update(
        "buckets", "api", where=HAS_TOKENS, mutations=TAKE, idempotency_key="k"
    )
    again = store.atomic_update(
        "buckets", "api", where=HAS_TOKENS, mutations=TAKE, idempotency_key="k"
    )
    assert first == {"updated": True, "value": {"tokens": 2}, "key": "api", "replayed": False}
    assert again == {**first, "replayed": True}
    assert store.get("buckets", "api") == {"tokens": 2}
    # Without a key the result is as it always was: no "replayed".
    assert "replayed" not in store.atomic_update("buckets", "api", mutations=TAKE)


def test_a_failed_guard_is_recorded_too_and_replays_as_not_updated(store):
    store.atomic_upsert("buckets", "api", insert_value={"tokens": 0})
    assert (
        store.atomic_update(
            "buckets", "api", where=HAS_TOKENS, mutations=TAKE, idempotency_key="k"
        )["updated"]
        is False
    )
    store.put("buckets", "api", {"tokens": 5})  # refilled meanwhile
    replay = store.atomic_update(
        "buckets", "api", where=HAS_TOKENS, mutations=TAKE, idempotency_key="k"
    )
    assert replay == {"updated": False, "value": None, "key": "api", "replayed": True}
    assert store.get("buckets", "api") == {"tokens": 5}


def test_a_keyed_upsert_replays_which_branch_fired(store):
    first = store.atomic_upsert("events", "e-1", insert_value={"seen": 1}, idempotency_key="evt")
    again = store.atomic_upsert("events", "e-1", insert_value={"seen": 2}, idempotency_key="evt")
    assert first == {"inserted": True, "value": {"seen": 1}, "key": "e-1", "replayed": False}
    assert again == {**first, "replayed": True}
    other = store.atomic_upsert(
        "events", "e-1", insert_value={}, mutations=INCREMENT, idempotency_key="evt-2"
    )
    assert other["inserted"] is False and other["value"] == {"seen": 1, "n": 1}
    assert store.atomic_upsert(
        "events", "e-1", insert_value={}, mutations=INCREMENT, idempotency_key="evt-2"
    )["value"] == {"seen": 1, "n": 1}
    assert store.get("events", "e-1") == {"seen": 1, "n": 1}


def test_a_replayed_claim_returns_the_same_batch_and_claims_nothing_more(store):
    _queue(store)
    first = store.atomic_claim("jobs", where=PENDING, limit=2, idempotency_key="run-1/drain")
    again = store.atomic_claim("jobs", where=PENDING, limit=2, idempotency_key="run-1/drain")
    assert [row["key"] for row in first["claimed"]] == ["j-0", "j-1"]
    assert again == {**first, "replayed": True}
    assert len(store.query("jobs", where=PENDING)) == 4
    # The replay keeps the first call's order, also for a descending claim.
    down = store.atomic_claim("jobs", where=PENDING, limit=3, direction="desc", idempotency_key="d")
    assert [row["key"] for row in down["claimed"]] == ["j-5", "j-4", "j-3"]
    assert (
        store.atomic_claim("jobs", where=PENDING, limit=3, idempotency_key="d")["claimed"]
        == down["claimed"]
    )
    empty = store.atomic_claim("empty", where=PENDING, idempotency_key="e")
    assert empty == {"claimed": [], "count": 0, "replayed": False}
    store.put("empty", "late", {"status": "pending"})
    assert store.atomic_claim("empty", where=PENDING, idempotency_key="e")["count"] == 0


def test_a_key_reused_with_other_values_replays_the_first_effect(store):
    store.atomic_upsert("c", "k", insert_value={"n": 0})
    store.atomic_update(
        "c",
        "k",
        mutations=[{"field": "at", "operation": "set", "value": "t1"}],
        idempotency_key="x",
    )
    replay = store.atomic_update(
        "c",
        "k",
        mutations=[{"field": "at", "operation": "set", "value": "t2"}],
        idempotency_key="x",
    )
    assert replay["value"] == {"n": 0, "at": "t1"} and replay["replayed"] is True
    assert store.get("c", "k") == {"n": 0, "at": "t1"}


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.atomic_update("c", "other", mutations=INCREMENT, idempotency_key="used"),
        lambda s: s.atomic_update("d", "k", mutations=INCREMENT, idempotency_key="used"),
        lambda s: s.atomic_upsert(
            "c", "k", insert_value={}, mutations=INCREMENT, idempotency_key="used"
        ),
        lambda s: s.atomic_claim("c", idempotency_key="used"),
    ],
    ids=["another-row", "another-table", "another-primitive", "a-claim"],
)
def test_a_key_reused_for_another_call_raises_naming_the_key_and_writes_nothing(store, call):
    store.atomic_upsert("c", "k", insert_value={"n": 0})
    store.atomic_upsert("c", "other", insert_value={"n": 0})
    store.atomic_upsert("d", "k", insert_value={"n": 0})
    store.atomic_update("c", "k", mutations=INCREMENT, idempotency_key="used")
    before = {t: store.query(t) for t in ("c", "d")}
    with pytest.raises(IdempotencyKeyError, match="'used'") as raised:
        call(store)
    assert raised.value.key == "used"
    assert {t: store.query(t) for t in ("c", "d")} == before


def test_receipts_expire_after_their_retention_and_are_purged(store_url):
    with AtomicStore(store_url, receipt_retention=0.5) as store:
        store.atomic_upsert("c", "k", insert_value={"n": 0})
        assert (
            store.atomic_update("c", "k", mutations=INCREMENT, idempotency_key="short")["replayed"]
            is False
        )
        assert (
            store.atomic_update("c", "k", mutations=INCREMENT, idempotency_key="short")["replayed"]
            is True
        )
        time.sleep(1.0)
        # After its retention the key is new: the call applies again.
        assert (
            store.atomic_update("c", "k", mutations=INCREMENT, idempotency_key="short")["replayed"]
            is False
        )
        assert store.get("c", "k") == {"n": 2}
        for number in range(5):
            store.atomic_update("c", "k", mutations=INCREMENT, idempotency_key=f"old-{number}")
        time.sleep(1.0)
        # A purge removes expired receipts a bounded batch at a time.
        assert store._backend.purge_receipts(3) == 3  # type: ignore[attr-defined]
        assert store._backend.purge_receipts(100) == 3  # type: ignore[attr-defined]
        assert store._backend.purge_receipts(100) == 0  # type: ignore[attr-defined]


def test_idempotency_keys_and_retention_are_validated_before_any_io(unreachable_url):
    with AtomicStore(unreachable_url) as store:
        for key in ["", 5, "a\x00b", "k" * 1025]:
            with pytest.raises(SpecError) as raised:
                store.atomic_update("c", "k", mutations=INCREMENT, idempotency_key=key)
            assert raised.value.field == "idempotency_key"
    for retention in [0, -1, "7d", True, float("inf"), float("nan"), 1e12]:
        with pytest.raises(SpecError) as raised:
            AtomicStore(unreachable_url, receipt_retention=retention)
        assert raised.value.field == "receipt_retention"


def test_the_longest_retention_still_records_and_replays(store_url):
    """A century of retention is a timestamp both databases (and Python) can hold."""
    with AtomicStore(store_url, receipt_retention=MAX_RETENTION_SECONDS) as keeping:
        first = keeping.atomic_update("c", "k", mutations=INCREMENT, idempotency_key="long")
        again = keeping.atomic_update("c", "k", mutations=INCREMENT, idempotency_key="long")
    assert again["replayed"] is True and again["value"] == first["value"]


def _race(barrier: Any, url: str, primitive: str) -> dict[str, Any]:
    with AtomicStore(url) as store:
        store.get("c", "warm-up")
        barrier.wait()
        if primitive == "update":
            return store.atomic_update("c", "k", mutations=INCREMENT, idempotency_key="race")
        if primitive == "upsert":
            return store.atomic_upsert(
                "c", "k", insert_value={"n": 0}, mutations=INCREMENT, idempotency_key="race"
            )
        return store.atomic_claim("jobs", where=PENDING, limit=2, idempotency_key="race")


@pytest.mark.parametrize("primitive", ["update", "upsert", "claim"])
def test_sixteen_processes_with_one_key_apply_once_and_all_see_that_result(
    store, store_url, primitive
):
    store.atomic_upsert("c", "k", insert_value={"n": 0})
    _queue(store, rows=40)
    results = run_in_processes(_race, [(store_url, primitive)] * 16, timeout=300)
    replays = Counter(result.pop("replayed") for result in results)
    assert replays == {False: 1, True: 15}
    assert all(result == results[0] for result in results)
    if primitive == "claim":
        assert len(store.query("jobs", where=PENDING, limit=100)) == 38
    else:
        assert store.get("c", "k") == {"n": 1}


def _claim_then_die(url: str, key: str, ready: Any) -> None:
    with AtomicStore(url) as store:
        store.atomic_claim("jobs", where=PENDING, limit=3, idempotency_key=key)
        ready.set()
        os.kill(os.getpid(), signal.SIGKILL)  # the worker is lost right after the commit


def test_a_claimer_killed_after_its_commit_gets_its_batch_back_on_retry(store, store_url):
    _queue(store, rows=10)
    context = worker_context()
    ready = context.Event()
    worker = context.Process(target=_claim_then_die, args=(store_url, "dag/run/drain/-1", ready))
    worker.start()
    worker.join(timeout=120)
    assert ready.is_set() and worker.exitcode == -signal.SIGKILL
    retried = store.atomic_claim("jobs", where=PENDING, limit=3, idempotency_key="dag/run/drain/-1")
    assert retried["replayed"] is True
    assert [row["key"] for row in retried["claimed"]] == ["j-0", "j-1", "j-2"]
    assert len(store.query("jobs", where=PENDING)) == 7


@pytest.mark.parametrize("direction", ["asc", "desc"])
def test_a_replayed_claim_keeps_the_order_of_rows_with_the_same_timestamp(
    store, store_url, direction
):
    for key in ["b", "a", "B", "c", "ä"]:
        store.put("ties", key, {"status": "pending"})
    give_all_rows_the_same_timestamps(store_url, "ties")
    first = store.atomic_claim(
        "ties", where=PENDING, limit=4, direction=direction, idempotency_key=f"t-{direction}"
    )
    again = store.atomic_claim(
        "ties", where=PENDING, limit=4, direction=direction, idempotency_key=f"t-{direction}"
    )
    keys = [row["key"] for row in first["claimed"]]
    assert keys == sorted(["b", "a", "B", "c", "ä"], reverse=direction == "desc")[:4]
    assert [row["key"] for row in again["claimed"]] == keys
