"""The checker catches real races: injected bugs on a real database, beside the real store.

Four OS processes run the same scenario twice, recorded: once through the store's
primitives, once with bugs injected in the test's own code
(tests/support/workers.py): a claim that reads the pending rows and then
writes them in separate statements (what ``FOR UPDATE SKIP LOCKED``, or SQLite's
single writer, prevents), an increment and a compare-and-set that get, decide in
Python and put. The checker must refute each buggy history and accept every
real one; the package has no buggy mode.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from airflow_atomic_store import AtomicStore
from devkit.processes import run_in_processes
from tests.support import workers
from tests.support.linearizability import (
    CAS_REGISTER,
    COUNTER,
    QUEUE_ROW,
    Recorder,
    RecordingStore,
    check_recorded,
    translate,
)

PROCESSES = 4
TIMES = 20
JOBS = 40

CHECKS = {
    "claim": (QUEUE_ROW, partial(translate.queue, table="jobs")),
    "increment": (COUNTER, partial(translate.counter, table="counters")),
    "compare-and-set": (CAS_REGISTER, partial(translate.cas_register, table="registers")),
}


@pytest.mark.parametrize("injected_bug", [False, True], ids=["store", "read-then-write"])
def test_the_checker_refutes_each_injected_race_and_accepts_the_stores_history(
    store: AtomicStore, store_url: str, tmp_path: Path, injected_bug: bool
) -> None:
    with Recorder(tmp_path, "parent") as recorder:
        parent = RecordingStore(store, recorder)
        parent.put("counters", "n", {"n": 0})
        parent.put("registers", "v", {"v": 0})
        for i in range(JOBS):
            parent.put("jobs", f"job-{i:03d}", {"status": "pending"})
        run_in_processes(
            workers.recorded_mix,
            [(store_url, str(tmp_path), f"p{n}", injected_bug, TIMES) for n in range(PROCESSES)],
        )
        parent.get("counters", "n")
        parent.get("registers", "v")
        parent.query("jobs", limit=1000)  # the final state: one read per row

    verdicts = {}
    for name, (model, translation) in CHECKS.items():
        checked = check_recorded(tmp_path, model, translation)
        print(f"{name}: {checked.describe()}")
        verdicts[name] = checked.ok
        assert checked.result.unknown == 0
    assert verdicts == dict.fromkeys(CHECKS, not injected_bug)
