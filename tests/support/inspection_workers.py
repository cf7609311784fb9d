"""Workers for the inspection-under-load test (importable by ``spawn`` children).

One process works a queue (claims a batch, finishes its rows one by one);
another inspects it over and over. Each ``stats`` call must describe one
moment: its per-status counts, its in-flight count and its in-flight list
come from different statements, and only the snapshot keeps them in step.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.inspection import StoreInspector
from tests.support.specs import PENDING
from tests.support.specs import SET_DONE as DONE

#: The inspector says here that it saw rows in flight. The worker holds its first batch
#: until then: a worker that drains the whole queue within one time slice of a busy
#: machine left the inspector seeing only "all pending" and "all done".
SIGNALS, SEEN_IN_FLIGHT = "inspection_signals", "in-flight seen"
SIGNAL_WAIT_SECONDS = 60.0


def _wait_for_the_inspector(store: AtomicStore) -> None:
    deadline = time.monotonic() + SIGNAL_WAIT_SECONDS
    while store.get(SIGNALS, SEEN_IN_FLIGHT) is None and time.monotonic() < deadline:
        time.sleep(0.01)


def work_the_queue(barrier: Any, url: str, table: str, batch: int) -> int:
    """Claim ``batch`` rows at a time and mark each done; return how many were finished."""
    with AtomicStore(url) as store:
        store.get(table, "__warm-up__")
        barrier.wait(timeout=60)
        finished = 0
        while True:
            claimed = store.atomic_claim(table, where=PENDING, limit=batch)["claimed"]
            if not claimed:
                return finished
            if finished == 0:
                _wait_for_the_inspector(store)
            for row in claimed:
                store.atomic_update(table, row["key"], mutations=DONE)
                finished += 1


def inspect_until_done(barrier: Any, url: str, table: str, total: int) -> dict[str, Any]:
    """Call ``stats`` until every row is done; return how many calls and the inconsistent ones."""
    with AtomicStore(url) as store:
        inspector = StoreInspector(store)
        inspector.tables()
        barrier.wait(timeout=60)
        calls, inconsistent, in_flight_seen = 0, [], 0
        while True:
            stats = inspector.stats(table, in_flight_limit=total)
            calls += 1
            counts = stats.status_counts
            if stats.in_flight_count and not in_flight_seen:
                store.put(SIGNALS, SEEN_IN_FLIGHT, {"calls": calls})
            in_flight_seen = max(in_flight_seen, stats.in_flight_count)
            if (
                sum(counts.values()) != total
                or stats.rows != total
                or len(stats.in_flight) != stats.in_flight_count
                or counts.get("in_flight", 0) != stats.in_flight_count
                or (counts.get("pending", 0) > 0) != (stats.oldest_pending_age is not None)
            ):
                inconsistent.append(stats.to_dict())
            if counts.get("done") == total:
                return {"calls": calls, "inconsistent": inconsistent, "in_flight": in_flight_seen}


ROLES = {"work": work_the_queue, "inspect": inspect_until_done}


def play(barrier: Any, role: str, *args: Any) -> Any:
    """One target for ``run_in_processes``: each process plays the named role."""
    return ROLES[role](barrier, *args)
