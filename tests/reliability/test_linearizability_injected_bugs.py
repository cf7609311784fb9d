"""The checker catches real races: injected bugs on a real database, beside the real store.

Four OS processes run each step twice, side by side and recorded: through the
store's primitives, and with a bug injected in the test's own code
(tests/support/workers.py) on tables of their own: a claim that reads the
pending rows and then writes them in separate statements (what ``FOR UPDATE SKIP
LOCKED``, or SQLite's single writer, prevents), an increment and a
compare-and-set that get, decide in Python and put. The checker must refute
each buggy history and accept the store's (guarded decrements of a token bucket
and seed-if-missing upserts included); the package has no buggy mode.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from airflow_atomic_store import AtomicStore
from devkit.processes import run_in_processes
from tests.support import workers
from tests.support.linearizability import (
    CAS_REGISTER,
    COUNTER,
    QUEUE_ROW,
    UPSERT_ONCE,
    Model,
    Recorder,
    RecordingStore,
    check_recorded,
    translate,
)
from tests.support.linearizability.translate import Translated

PROCESSES = 4
TIMES = 20
JOBS = 40
TOKENS = 50  # fewer than the 80 takes: some takes find the bucket empty

CHECKS: dict[str, tuple[Model, Callable[..., Translated], str]] = {
    "claim": (QUEUE_ROW, translate.queue, "jobs"),
    "increment": (COUNTER, translate.counter, "counters"),
    "compare-and-set": (CAS_REGISTER, translate.cas_register, "registers"),
}


def test_the_checker_refutes_each_injected_race_and_accepts_the_stores_history_beside_it(
    store: AtomicStore, store_url: str, tmp_path: Path
) -> None:
    with Recorder(tmp_path, "parent") as recorder:
        parent = RecordingStore(store, recorder)
        for prefix in ("", workers.BUG):
            parent.put(f"{prefix}counters", "n", {"n": 0})
            parent.put(f"{prefix}registers", "v", {"v": 0})
            for i in range(JOBS):
                parent.put(f"{prefix}jobs", f"job-{i:03d}", {"status": "pending"})
        parent.put("buckets", "tokens", {"n": TOKENS})
        run_in_processes(
            workers.recorded_mix,
            [(store_url, str(tmp_path), f"p{n}", TIMES) for n in range(PROCESSES)],
        )
        for prefix in ("", workers.BUG):
            parent.get(f"{prefix}counters", "n")
            parent.get(f"{prefix}registers", "v")
            parent.query(f"{prefix}jobs", limit=1000)  # the final state: one read per row
        parent.get("buckets", "tokens")

    verdicts = {}
    for name, (model, translation, table) in CHECKS.items():
        for prefix, kind in (("", "store"), (workers.BUG, "injected bug")):
            checked = check_recorded(tmp_path, model, partial(translation, table=prefix + table))
            print(f"{name}, {kind}: {checked.describe()}")
            verdicts[name, kind] = checked.ok
            assert checked.result.unknown == 0
    assert verdicts == {
        **{(name, "store"): True for name in CHECKS},
        **{(name, "injected bug"): False for name in CHECKS},
    }
    # The store's guarded decrements and seeds of the same run, checked too.
    for model, translate_table, table in (
        (COUNTER, translate.counter, "buckets"),
        (UPSERT_ONCE, translate.upsert_once, "seeds"),
    ):
        checked = check_recorded(tmp_path, model, partial(translate_table, table=table))
        print(checked.describe())
        assert checked.ok, checked.describe()
