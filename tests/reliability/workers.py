"""Worker functions for the reliability tests' OS processes (importable by ``spawn`` children).

Claim workers follow the dispatcher pattern: claim a batch with an execution id,
then complete each row with an update guarded on ``claimedBy`` (and
``status: in_flight``), so a row whose claim was taken over can no longer be
completed by the worker that lost it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow_atomic_store import AtomicStore, StoreUnavailableError
from tests.support.specs import PENDING


@contextmanager
def opened(url: str, table: str, history: str | None = None, process: str = "") -> Iterator[Any]:
    """A store whose first call (on ``table``) is done; with ``history``, its calls recorded.

    The warm-up call is not recorded: it reads a row no model knows.
    """
    with AtomicStore(url) as store:
        store.get(table, "__warm-up__")
        if history is None:
            yield store
            return
        from tests.support.linearizability import Recorder, RecordingStore

        with Recorder(history, process) as recorder:
            yield RecordingStore(store, recorder)


def owned_by(execution_id: str) -> list[dict[str, Any]]:
    return [
        {"field": "status", "operator": "equals", "value": "in_flight"},
        {"field": "claimedBy", "operator": "equals", "value": execution_id},
    ]


def done_by(execution_id: str) -> dict[str, Any]:
    return {"field": "completedBy", "operator": "equals", "value": execution_id}


def stale_before(threshold: str) -> list[dict[str, Any]]:
    """The stale-claim pass: rows still in flight whose claim is older than ``threshold``."""
    return [
        {"field": "status", "operator": "equals", "value": "in_flight"},
        {"field": "claimedAt", "operator": "lt", "value": threshold},
    ]


def complete(store: Any, table: str, key: str, execution_id: str) -> bool:
    """Mark ``key`` done if (and only if) ``execution_id`` still owns its claim."""
    result = store.atomic_update(
        table,
        key,
        where=owned_by(execution_id),
        mutations=[
            {"field": "status", "operation": "set", "value": "done"},
            {"field": "completedBy", "operation": "set", "value": execution_id},
            {"field": "completions", "operation": "increment", "value": 1},
        ],
    )
    return bool(result["updated"])


def claim_complete_some_then_hang(
    url: str,
    table: str,
    execution_id: str,
    limit: int,
    complete_first: int,
    report: Any,
    history: str | None = None,
) -> None:
    """Claim a batch, complete ``complete_first`` rows, report, then wait to be killed."""
    with opened(url, table, history, execution_id) as store:
        claimed = store.atomic_claim(table, where=PENDING, limit=limit, execution_id=execution_id)
        keys = [row["key"] for row in claimed["claimed"]]
        done = [key for key in keys[:complete_first] if complete(store, table, key, execution_id)]
        report.put({"claimed": keys, "completed": done, "pid": os.getpid()})
        time.sleep(600)  # "crashed": holds nothing, completes nothing more


def claim_and_complete_until_killed(
    url: str, table: str, execution_id: str, batch: int, started: Any, history: str | None = None
) -> None:
    """Claim and complete rows as fast as possible, forever: killed at a random moment."""
    with opened(url, table, history, execution_id) as store:
        started.set()
        while True:
            claimed = store.atomic_claim(
                table, where=PENDING, limit=batch, execution_id=execution_id
            )
            for row in claimed["claimed"]:
                complete(store, table, row["key"], execution_id)
            if not claimed["count"]:
                time.sleep(0.01)


def rescue_stale_claims(
    barrier: Any,
    url: str,
    table: str,
    threshold: str,
    execution_id: str,
    batch: int,
    history: str | None = None,
) -> dict[str, list[str]]:
    """Re-claim stale rows in small batches until none is left; complete each one."""
    with opened(url, table, history, execution_id) as store:
        barrier.wait(timeout=60)
        reclaimed: list[str] = []
        completed: list[str] = []
        while True:
            result = store.atomic_claim(
                table, where=stale_before(threshold), limit=batch, execution_id=execution_id
            )
            for row in result["claimed"]:
                reclaimed.append(row["key"])
                if complete(store, table, row["key"], execution_id):
                    completed.append(row["key"])
            if result["count"] == 0:
                if not store.query(table, where=stale_before(threshold), limit=1):
                    return {"reclaimed": reclaimed, "completed": completed}
                time.sleep(0.005)


# -- a stream of operations through a database restart ---------------------------------------


def stream_through_restarts(
    barrier: Any, url: str, worker: int, stop_file: str, deadline: float, history: str | None = None
) -> list[dict[str, Any]]:
    """Run update / claim / upsert operations until ``stop_file`` exists; log every outcome.

    Each operation carries a marker unique to it (``w<worker>-<n>``) that it
    writes in the same statement as its effect, so afterwards the parent can
    tell exactly which operations committed, including the ones that raised.
    """
    outcomes: list[dict[str, Any]] = []
    with opened(url, "counters", history, f"worker-{worker}") as store:
        barrier.wait(timeout=60)
        n = 0
        while not os.path.exists(stop_file) and time.time() < deadline:
            marker = f"w{worker}-{n}"
            kind = ("update", "claim", "upsert")[n % 3]
            started = time.time()
            try:
                result: Any = _operation(store, kind, marker)
                outcome = {"status": "ok", "result": result}
            except StoreUnavailableError as exc:
                outcome = {"status": "unavailable", "error": str(exc)}
            except Exception as exc:  # anything else is a failure the parent reports
                outcome = {"status": "other", "error": f"{type(exc).__name__}: {exc}"}
            outcome.update(kind=kind, marker=marker, started=started, ended=time.time())
            outcomes.append(outcome)
            n += 1
            # A steady stream rather than a flood; a caller that saw an error backs off.
            time.sleep(0.003 if outcome["status"] == "ok" else 0.02)
    return outcomes


def _operation(store: Any, kind: str, marker: str) -> Any:
    if kind == "update":
        # One statement: the count and the marker commit together or not at all.
        return store.atomic_update(
            "counters",
            "total",
            mutations=[
                {"field": "n", "operation": "increment", "value": 1},
                {"field": f"seen.{marker}", "operation": "set", "value": True},
            ],
        )["updated"]
    if kind == "claim":
        result = store.atomic_claim(
            "queue",
            where=PENDING,
            limit=2,
            mutations=[
                {"field": "status", "operation": "set", "value": "claimed"},
                {"field": "claimedBy", "operation": "set", "value": marker},
            ],
        )
        return [row["key"] for row in result["claimed"]]
    result = store.atomic_upsert(
        "events",
        marker,
        insert_value={"marker": marker, "n": 0},
        mutations=[{"field": "n", "operation": "increment", "value": 1}],
    )
    return result["inserted"]


# -- contention and first use ---------------------------------------------------------------


def hammer(
    barrier: Any, url: str, worker: int, iterations: int, reopen_every: int
) -> dict[str, list[str]]:
    """A mixed stream of every primitive on shared rows; any error fails the test.

    The store is closed and reopened every ``reopen_every`` iterations, so
    opening (schema check, WAL mode) also happens under contention.
    """
    me = f"worker-{worker}"
    store = AtomicStore(url)
    store.get("queue", "__warm-up__")
    barrier.wait(timeout=60)
    claimed: list[str] = []
    try:
        for i in range(iterations):
            if i and i % reopen_every == 0:
                store.close()
                store = AtomicStore(url)
            store.atomic_upsert(
                "counters",
                "hits",
                insert_value={"n": 1},
                mutations=[{"field": "n", "operation": "increment", "value": 1}],
            )
            result = store.atomic_claim("queue", where=PENDING, limit=1, execution_id=me)
            for row in result["claimed"]:
                claimed.append(row["key"])
                if not complete(store, "queue", row["key"], me):
                    raise AssertionError(f"{me} could not complete its own claim {row['key']}")
            store.put("own", f"{me}-{i:05d}", {"worker": worker, "i": i})
            if (
                len(store.query("own", where=[{"field": "worker", "op": "eq", "value": worker}]))
                < 1
            ):
                raise AssertionError(f"{me} cannot see its own rows")
    finally:
        store.close()
    return {"claimed": claimed}


FIRST_CALLS = (
    "put",
    "get",
    "query",
    "update",
    "claim",
    "seed",
    "delete",
    "ensure_claim_index",
)


def first_call(barrier: Any, url: str, which: str) -> Any:
    """Open a store on a database nobody has used yet and make ``which`` its first call."""
    barrier.wait(timeout=60)
    with AtomicStore(url) as store:
        if which == "put":
            store.put("first", "put", {"by": which})
        elif which == "get":
            store.get("first", "anything")
        elif which == "query":
            store.query("first", where=PENDING)
        elif which == "update":
            store.atomic_update(
                "first", "missing", mutations=[{"field": "n", "op": "set", "value": 1}]
            )
        elif which == "claim":
            store.atomic_claim("first", where=PENDING)
        elif which == "seed":
            store.atomic_upsert("first", "seed", insert_value={"by": which})
        elif which == "delete":
            store.delete("first", "missing")
        else:
            store.ensure_claim_index(table="first", where=PENDING)
        # The store works for a second call too, on a row every process shares.
        return store.atomic_upsert(
            "first",
            "count",
            insert_value={"n": 1},
            mutations=[{"field": "n", "operation": "increment", "value": 1}],
        )["value"]["n"]


# -- memory -----------------------------------------------------------------------------------


def _memory_status(field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak resident) of this process, in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"{field} not in /proc/self/status")


def _reset_peak() -> None:
    """Reset ``VmHWM`` to the current RSS (Linux >= 4.0), so the next peak is this step's."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def _return_free_memory() -> None:
    """Give the allocator's free pages back (glibc), so the resident set counts live memory.

    Without it, memory freed by the caller's dropped result stays resident in
    the heap and reads as if something still held the batch.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name is not None else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def claim_big_batches(barrier: Any, url: str, table: str, rounds: int) -> dict[str, Any]:
    """Claim the same 1000 large rows ``rounds`` times; measure each claim's peak memory.

    Returns, per round, how far the claim raised the resident set above what it
    was just before (``growth``), and the resident set after the result was
    dropped (``retained``), to show memory does not accumulate across rounds;
    and the resident set before the first claim (``baseline``).
    """
    import gc

    with AtomicStore(url) as store:
        store.get(table, "__warm-up__")
        barrier.wait(timeout=60)
        growth, retained, counts, payload = [], [], [], 0
        where = PENDING
        for round_ in range(rounds):
            me = f"big-{round_}"
            gc.collect()
            _return_free_memory()
            _reset_peak()
            before = _memory_status("VmRSS")
            if round_ == 0:
                baseline = before
            result = store.atomic_claim(table, where=where, limit=1000, execution_id=me)
            growth.append(_memory_status("VmHWM") - before)
            counts.append(result["count"])
            if round_ == 0:
                payload = sum(len(row["value"]["blob"]) for row in result["claimed"])
            where = owned_by(me)  # the next round re-claims the same rows
            del result
            gc.collect()
            _return_free_memory()
            retained.append(_memory_status("VmRSS"))
        return {
            "baseline": baseline,
            "growth": growth,
            "retained": retained,
            "counts": counts,
            "payload": payload,
        }


# -- schema set-up beside a concurrent index build ---------------------------------------------


def build_claim_index_when_told(url: str, opened: Any, go: Any, results: Any) -> None:
    """Open a store (schema checked), then, on ``go``, build a claim index concurrently."""
    try:
        with AtomicStore(url) as store:
            store.get("jobs", "warm-up")
            opened.set()
            if not go.wait(timeout=60):
                raise TimeoutError("never told to build the index")
            queued = [{"field": "status", "operator": "equals", "value": "queued"}]  # not built yet
            results.put(("index", "ok", store.ensure_claim_index(table="jobs", where=queued)))
    except BaseException as exc:
        results.put(("index", "error", repr(exc)))


def first_get(url: str, results: Any) -> None:
    """A process's first call on a store whose schema is incomplete."""
    try:
        with AtomicStore(url) as store:
            results.put(("first", "ok", store.get("jobs", "missing")))
    except BaseException as exc:
        results.put(("first", "error", repr(exc)))


def claim_all_after_barrier(barrier: Any, url: str, table: str, batch: int) -> list[str]:
    """Open a store only after the barrier (its first call is contended) and claim until empty."""
    barrier.wait(timeout=60)
    keys: list[str] = []
    with AtomicStore(url) as store:
        while True:
            claimed = store.atomic_claim(table, where=PENDING, limit=batch)["claimed"]
            if not claimed:
                return keys
            keys.extend(row["key"] for row in claimed)


def hold_a_write_open(barrier: Any, url: str, key: str, seconds: float) -> str:
    """Write ``key`` in a transaction kept open ``seconds``: ``CREATE INDEX CONCURRENTLY``
    waits for it to end."""
    import psycopg

    from tests.support.physical import PHYSICAL_TABLE

    with psycopg.connect(url) as conn:
        conn.execute(  # the transaction now holds the table
            f"UPDATE {PHYSICAL_TABLE} SET value = value WHERE key = %s".encode(), (key,)
        )
        barrier.wait(timeout=60)
        time.sleep(seconds)
        conn.commit()
    return "committed"


def build_set_by(barrier: Any, url: str, how: str, options: dict[str, Any]) -> dict[str, Any]:
    """Declare the pending set (``how="declare"``) or let a claim declare it (``"claim"``)."""
    with AtomicStore(url, **options) as store:
        store.get("jobs", "warm-up")
        barrier.wait(timeout=60)
        started = time.monotonic()
        try:
            if how == "declare":
                outcome: Any = store.ensure_claim_index(table="jobs", where=PENDING)
            else:
                outcome = [
                    row["key"] for row in store.atomic_claim("jobs", where=PENDING)["claimed"]
                ]
        except Exception as exc:
            return {"error": repr(exc), "sets": store.claim_sets("jobs")}
        seconds = time.monotonic() - started
        with store._backend._cursor() as cursor:  # type: ignore[attr-defined]
            settings = cursor.execute(
                "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
            ).fetchone()
        return {"outcome": outcome, "seconds": seconds, "settings": list(settings)}


def drop_set_while_building(barrier: Any, url: str) -> dict[str, Any]:
    """Drop the first set listed on ``jobs`` as soon as it is listed (it is still building)."""
    with AtomicStore(url) as store:
        store.get("jobs", "warm-up")
        barrier.wait(timeout=60)
        deadline = time.monotonic() + 20
        while not (listed := store.claim_sets("jobs")):
            if time.monotonic() > deadline:
                return {"error": "the set was never listed"}
            time.sleep(0.01)
        state = listed[0]["state"]
        return {"state": state, "dropped": store.drop_claim_set(listed[0]["name"])}
