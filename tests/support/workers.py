"""Worker functions for the multi-process tests (importable by ``spawn`` children).

Each worker opens its own ``AtomicStore``, makes one cheap call so that its
connection is open, waits at the barrier so every process starts the
contended part together, then runs its loop and returns plain data for the
parent to check.
"""

from __future__ import annotations

import os
import time
from typing import Any

from airflow_atomic_store import AtomicStore
from tests.support.specs import PENDING


def _open(url: str, table: str) -> AtomicStore:
    store = AtomicStore(url)
    store.get(table, "__warm-up__")
    return store


def drain_queue(barrier: Any, url: str, table: str, limit: int) -> list[str]:
    """Claim pending rows until none is left; return the keys this process won, in order."""
    execution_id = f"drainer-{os.getpid()}"
    with _open(url, table) as store:
        barrier.wait(timeout=60)
        won: list[str] = []
        while True:
            result = store.atomic_claim(
                table, where=PENDING, limit=limit, execution_id=execution_id
            )
            for row in result["claimed"]:
                if row["value"].get("claimedBy") != execution_id:
                    raise AssertionError(f"row {row['key']} came back claimed by someone else")
                won.append(row["key"])
            if result["count"] == 0:
                # Empty can also mean "the rest is locked by other claimers": stop
                # only when no pending row is left at all.
                if not store.query(table, where=PENDING, limit=1):
                    return won
                time.sleep(0.001)


def increment_counter(barrier: Any, url: str, table: str, key: str, times: int) -> list[int]:
    """Increment ``n`` ``times``; return the value of ``n`` each increment produced."""
    mutations = [{"field": "n", "operation": "increment", "value": 1}]
    with _open(url, table) as store:
        barrier.wait(timeout=60)
        seen = []
        for _ in range(times):
            result = store.atomic_update(table, key, mutations=mutations)
            if not result["updated"]:
                raise AssertionError(f"an unguarded increment did not apply: {result}")
            seen.append(result["value"]["n"])
        return seen


def take_tokens(barrier: Any, url: str, table: str, key: str, attempts: int) -> list[int]:
    """Try a guarded decrement ``attempts`` times; return the token counts of the wins."""
    guard = [{"field": "tokens", "operator": "gt", "value": 0}]
    mutations = [{"field": "tokens", "operation": "increment", "value": -1}]
    with _open(url, table) as store:
        barrier.wait(timeout=60)
        left_after_win = []
        for _ in range(attempts):
            result = store.atomic_update(table, key, where=guard, mutations=mutations)
            if result["updated"]:
                left_after_win.append(result["value"]["tokens"])
            elif result["value"] is not None:
                raise AssertionError(f"a failed guard returned a value: {result}")
        return left_after_win


def seed_once(
    barrier: Any, url: str, table: str, key: str, me: int, warm_up: bool = True
) -> dict[str, Any]:
    """Seed-if-missing upsert of ``key`` with this worker's number; return the result.

    With ``warm_up=False`` the upsert is the store's very first operation, so
    a fresh store sees every process try to create its physical table at once.
    """
    with _open(url, table) if warm_up else AtomicStore(url) as store:
        barrier.wait(timeout=60)
        return store.atomic_upsert(table, key, insert_value={"owner": me})


# -- recorded histories (tests/support/linearizability) -------------------------------------------
#
# The same work done right (the store's primitives) or with an injected bug kept
# here, in the tests: a claim that reads then writes in separate statements (no
# FOR UPDATE SKIP LOCKED, no single writer), an increment or a compare-and-set
# that gets, decides in Python, and puts. The bug's calls are recorded as the
# primitive they stand in for, so the checker judges both by the same rules.

#: Long enough for another process to read the same rows before this one writes.
RACE_WINDOW = 0.002


def _done_by(execution_id: str) -> list[dict[str, Any]]:
    return [
        {"field": "status", "operation": "set", "value": "done"},
        {"field": "completedBy", "operation": "set", "value": execution_id},
    ]


def _owned_by(execution_id: str) -> list[dict[str, Any]]:
    return [
        {"field": "status", "operator": "equals", "value": "in_flight"},
        {"field": "claimedBy", "operator": "equals", "value": execution_id},
    ]


def _claim_reading_then_writing(
    raw: AtomicStore, recorder: Any, table: str, me: str, limit: int
) -> list[str]:
    with recorder.call(
        "atomic_claim", table=table, where=PENDING, limit=limit, execution_id=me
    ) as call:
        rows = raw.query(table, where=PENDING, limit=limit)
        time.sleep(RACE_WINDOW)
        claimed = []
        for row in rows:
            value = {**row["value"], "status": "in_flight", "claimedBy": me}
            raw.put(table, row["key"], value)
            claimed.append({"key": row["key"], "value": value})
        call.returned({"claimed": claimed, "count": len(claimed)})
    return [row["key"] for row in claimed]


#: The prefix of the tables the injected bugs work on (the store's own calls use none).
BUG = "bug_"


def recorded_mix(barrier: Any, url: str, history: str, me: str, times: int) -> None:
    """Increments, compare-and-sets, then claims until no pending job is left; all recorded.

    Each step is done twice, side by side: with the store's primitive on
    ``counters``, ``registers``, ``jobs``, and with the injected bug on the same
    tables prefixed ``bug_``. Between them, with the store only: a token taken from
    a bucket (a guarded decrement) and a seed-if-missing of a row every process seeds.
    """
    from tests.support.linearizability import Recorder, RecordingStore

    with _open(url, "jobs") as raw, Recorder(history, me) as recorder:
        store: Any = RecordingStore(raw, recorder)
        barrier.wait(timeout=60)
        for _ in range(times):
            for prefix in ("", BUG):
                _increment(store, raw, recorder, prefix)
        for i in range(times):
            for prefix in ("", BUG):
                _compare_and_set(store, raw, recorder, prefix)
            store.atomic_update(
                "buckets",
                "tokens",
                where=[{"field": "n", "operator": "gt", "value": 0}],
                mutations=[{"field": "n", "operation": "increment", "value": -1}],
            )
            store.atomic_upsert("seeds", f"seed-{i % 5}", insert_value={"by": me})
        left = ["", BUG]
        while left:
            left = [
                prefix for prefix in left if _claim_and_complete(store, raw, recorder, me, prefix)
            ]


def _claim_and_complete(store: Any, raw: AtomicStore, recorder: Any, me: str, prefix: str) -> bool:
    """Claim up to 3 jobs and complete each (guarded on ``claimedBy``); False once none is left."""
    table = f"{prefix}jobs"
    if prefix == BUG:
        keys = _claim_reading_then_writing(raw, recorder, table, me, 3)
    else:
        result = store.atomic_claim(table, where=PENDING, limit=3, execution_id=me)
        keys = [row["key"] for row in result["claimed"]]
    for key in keys:
        store.atomic_update(table, key, where=_owned_by(me), mutations=_done_by(me))
    if keys:
        return True
    time.sleep(0.001)
    return bool(raw.query(table, where=PENDING, limit=1))


def _increment(store: Any, raw: AtomicStore, recorder: Any, prefix: str) -> None:
    """Increment ``n`` of row ``n``; the bug gets, adds in Python and puts."""
    table, increment = f"{prefix}counters", [{"field": "n", "operation": "increment", "value": 1}]
    if prefix != BUG:
        store.atomic_update(table, "n", mutations=increment)
        return
    with recorder.call("atomic_update", table=table, key="n", mutations=increment) as call:
        value = raw.get(table, "n")
        assert value is not None
        time.sleep(RACE_WINDOW)
        raw.put(table, "n", {"n": value["n"] + 1})
        call.returned({"updated": True, "value": {"n": value["n"] + 1}, "key": "n"})


def _compare_and_set(store: Any, raw: AtomicStore, recorder: Any, prefix: str) -> None:
    """Read ``v``, then set ``v + 1`` only if it is still ``v``; the bug checks in Python
    between a get and a put."""
    table = f"{prefix}registers"
    seen = store.get(table, "v")["v"]
    guard = [{"field": "v", "operator": "equals", "value": seen}]
    bump = [{"field": "v", "operation": "set", "value": seen + 1}]
    if prefix != BUG:
        store.atomic_update(table, "v", where=guard, mutations=bump)
        return
    with recorder.call("atomic_update", table=table, key="v", where=guard, mutations=bump) as call:
        current = raw.get(table, "v")
        time.sleep(RACE_WINDOW)
        if current is not None and current["v"] == seen:
            raw.put(table, "v", {"v": seen + 1})
            call.returned({"updated": True, "value": {"v": seen + 1}, "key": "v"})
        else:
            call.returned({"updated": False, "value": None, "key": "v"})
