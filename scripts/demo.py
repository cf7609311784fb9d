"""Run every recipe's example DAG on the embedded SQLite store and report what happened.

Run with ``make demo``. Everything lives in ``.demo/`` under the project: a
throwaway ``AIRFLOW_HOME`` (metadata DB, logs), the store (``store.db``) and
temporary files; it is recreated on every run. Each DAG runs with ``dag.test()``,
one run at a time, through the connection ``atomic_store_default``; Airflow's own
output goes to ``.demo/airflow.log`` and this script prints, per recipe, what ran
and what the store holds afterwards. The test suite runs the same DAGs on SQLite
and PostgreSQL, concurrently too.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any, TextIO

PROJECT = Path(__file__).resolve().parent.parent
DEMO = PROJECT / ".demo"
HOME = DEMO / "airflow"
STORE = DEMO / "store.db"
LOG = DEMO / "airflow.log"


def prepare() -> None:
    """A fresh ``.demo/``, and the environment Airflow reads when it is first imported."""
    shutil.rmtree(DEMO, ignore_errors=True)
    for directory in (HOME / "dags", DEMO / "tmp"):
        directory.mkdir(parents=True)
    sys.path.insert(0, str(PROJECT))  # devkit/ holds the DAG-run helpers the demo shares
    from devkit.airflow_home import dag_test_environment

    os.environ.update(
        dag_test_environment(
            HOME,
            AIRFLOW__LOGGING__BASE_LOG_FOLDER=str(HOME / "logs"),
            AIRFLOW_CONN_ATOMIC_STORE_DEFAULT=f"sqlite:///{STORE}",
            TMPDIR=str(DEMO / "tmp"),
        )
    )


@contextmanager
def airflow_output_to_log() -> Iterator[TextIO]:
    """Send everything written to fd 1 and 2 to the log; yield the real stdout."""
    sys.stdout.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    report = os.fdopen(os.dup(saved_out), "w", buffering=1)
    log = os.open(LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    try:
        yield report
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        os.close(saved_out)
        os.close(saved_err)
        report.close()


class Demo:
    """Runs the example DAGs and writes the report."""

    def __init__(self, out: TextIO) -> None:
        from airflow_atomic_store import AtomicStore
        from devkit.dagrun import run_dag_test
        from devkit.examples import example_dag

        self.out = out
        self.store = AtomicStore(f"sqlite:///{STORE}")
        self._run_dag_test = run_dag_test
        self._example_dag = example_dag
        self.runs = 0

    def run(self, dag_id: str, expect: str = "success", **conf: Any) -> Any:
        result = self._run_dag_test(self._example_dag(dag_id), conf=conf)
        self.runs += 1
        if result.state != expect:
            raise RuntimeError(f"{dag_id} run ended {result.state}, not {expect}; see {LOG}")
        return result

    def title(self, number: int, name: str, dag_ids: str) -> None:
        self.out.write(f"\n{number}. {name}  ({dag_ids})\n")

    def line(self, text: str) -> None:
        self.out.write(f"   {text}\n")


def short(execution_id: str) -> str:
    """``dag/manual__2025-01-31T09:30:00.123456+00:00`` → ``dag/…09:30:00.12``."""
    dag_id, _, run_id = execution_id.partition("/")
    return f"{dag_id}/…{run_id.split('T')[-1][:11]}" if "T" in run_id else execution_id


def handled(run: Any) -> bool:
    return bool(run.state_of("handle_event") == "success")


def process_event_once(demo: Demo) -> None:
    demo.title(1, "Process event once", "process_event_once")
    first = demo.run("process_event_once", event_id="evt-42", payload={"amount": 5})
    again = demo.run("process_event_once", event_id="evt-42", payload={"amount": 5})
    other = demo.run("process_event_once", event_id="evt-43")
    for event, runs in (("evt-42", [first, again]), ("evt-43", [other])):
        outcomes = [
            f"{which} delivery " + ("processed" if handled(run) else "skipped")
            for which, run in zip(("first", "duplicate"), runs, strict=False)
        ]
        demo.line(f"event {event}: {', '.join(outcomes)}")
    stored = demo.store.get("processed_events", "evt-42") or {}
    count = len(demo.store.query("processed_events"))
    demo.line(f"store: processed_events has {count} rows; evt-42 claimed by the first delivery,")
    demo.line(f"       {short(stored['claimedBy'])}, with its payload {stored['payload']}")


def token_bucket(demo: Demo) -> None:
    demo.title(2, "Token bucket", "token_bucket, token_bucket_refill")
    bucket = {"bucket": "partner-api", "capacity": 2}
    outcomes = []
    for _ in range(3):
        run = demo.run("token_bucket", **bucket)
        taken = run.xcom("take_token")
        outcomes.append(
            f"token taken, {taken['value']['tokens']} left"
            if taken["updated"]
            else "bucket empty: backed off"
        )
    demo.line("3 callers, bucket of 2: " + "; ".join(outcomes))
    demo.run("token_bucket_refill", **bucket)
    after = demo.run("token_bucket", **bucket).xcom("take_token")
    demo.line(
        f"refill: bucket full again; the next caller took a token, {after['value']['tokens']} left"
    )
    demo.line(f"store: rate_limits/partner-api = {demo.store.get('rate_limits', 'partner-api')}")


def rate_limit_per_key(demo: Demo) -> None:
    demo.title(3, "Rate limit per key", "rate_limit_per_key")
    interval = 1.0
    calls = []
    for _ in range(3):
        run = demo.run("rate_limit_per_key", key="partner-api", interval_seconds=interval)
        calls.append(run.xcom("call_at_slot"))
    first = calls[0]["calledAt"]
    demo.line(f"3 callers, one after another, interval {interval} s:")
    for n, call in enumerate(calls, start=1):
        demo.line(
            f"  caller {n}: slot at +{call['slot'] - first:.2f} s, "
            f"called at +{call['calledAt'] - first:.2f} s"
        )
    demo.line("a caller whose slot was ahead waited deferred (DateTimeTrigger), not in a worker")
    gaps = [later["calledAt"] - earlier["calledAt"] for earlier, later in pairwise(calls)]
    demo.line(
        f"calls spaced {', '.join(f'{gap:.3f}' for gap in gaps)} s apart (interval {interval} s)"
    )
    next_slot = demo.store.get("call_slots", "partner-api")["nextSlotAt"] - time.time()
    demo.line(f"store: call_slots/partner-api: next free slot in {max(next_slot, 0):.2f} s")


def leader_lease(demo: Demo) -> None:
    from airflow_atomic_store.timestamps import shifted

    demo.title(4, "Lease (leader election)", "leader_lease")
    quick = {"steps": 2, "step_seconds": 0.2, "ttl_seconds": 60}
    free = demo.run("leader_lease", **quick)
    demo.line(f"run A: lease free: acquired, worked {free.xcom('work')} steps, released")
    holder = {"holder": "other_dag/live-run", "acquiredAt": shifted(timedelta(0))}
    live = {**holder, "expiresAt": shifted(timedelta(minutes=5)), "releasedAt": None, "fence": 2}
    demo.store.put("leases", "dispatcher", live)
    blocked = demo.run("leader_lease", **quick)
    demo.line(f"run B: {blocked.xcom('back_off')}")
    demo.store.put("leases", "dispatcher", {**live, "expiresAt": shifted(timedelta(seconds=-1))})
    took = demo.run("leader_lease", **quick)
    assert took.xcom("take_over")["updated"]
    demo.line("run C: the other holder's lease had expired: took it over, worked, released")
    fences = [free.xcom("acquire")["value"]["fence"], took.xcom("take_over")["value"]["fence"]]
    demo.line(f"fencing tokens: run A got {fences[0]}, the other holder 2, run C {fences[1]}")
    lease = demo.store.get("leases", "dispatcher") or {}
    released = "released" if lease.get("releasedAt") else "NOT released"
    demo.line(f"store: leases/dispatcher held last by {short(lease['holder'])}, {released}")
    log = sorted(
        (row["value"]["start"], row["value"]["end"]) for row in demo.store.query("lease_log")
    )
    disjoint = all(end <= start for (_, end), (start, _) in pairwise(log))
    demo.line(
        f"       lease_log: {len(log)} holding intervals, "
        + ("none overlapping" if disjoint else "OVERLAPPING")
    )


def queue(demo: Demo) -> None:
    demo.title(5, "Queue producer and dispatcher", "queue_producer, queue_dispatcher")
    produced = demo.run("queue_producer", count=12).xcom("enqueue")
    demo.store.put("pending_ops", "op-poison", {"status": "pending", "payload": {"fail": "bad"}})
    demo.line(f"producer enqueued {len(produced)} items; a script added 1 that will fail")
    for n in range(1, 4):
        run = demo.run("queue_dispatcher")
        outcomes = [run.xcom("process", map_index=i) for i in run.mapped_indexes("process")]
        done = sum(outcome["status"] == "done" for outcome in outcomes)
        failed = [outcome["key"] for outcome in outcomes if outcome["status"] == "failed"]
        claimed = run.xcom("drain")["count"]
        text = f"dispatcher run {n}: claimed {claimed}, {done} done"
        if failed:
            text += f", failed: {', '.join(failed)}"
        demo.line(text if claimed else f"dispatcher run {n}: queue empty, nothing to do")
    rows = [row["value"] for row in demo.store.query("pending_ops")]
    statuses = sorted({value["status"] for value in rows})
    counts = ", ".join(f"{sum(v['status'] == s for v in rows)} {s}" for s in statuses)
    error = (demo.store.get("pending_ops", "op-poison") or {}).get("error")
    demo.line(f"store: pending_ops: {counts}; op-poison error: {error!r}")
    effects = len(demo.store.query("pending_ops_effects", limit=1000))
    demo.line(f"       pending_ops_effects: {effects} side effects, one per item")
    demo.store.put("pending_ops", "op-crash", {"status": "pending", "payload": {"crash": True}})
    crashed = demo.run("queue_dispatcher", expect="failed", max_attempts=2)
    back = crashed.xcom("drain_hand_back")
    row = demo.store.get("pending_ops", "op-crash") or {}
    demo.line(
        f"a processing task crashed on op-crash: handed back {back['pending']} at once, "
        f"{row['status']} (attempt {row['attempts']} of 2)"
    )
    demo.run("queue_dispatcher", expect="failed", max_attempts=2)
    row = demo.store.get("pending_ops", "op-crash") or {}
    demo.line(f"it crashed again: op-crash is {row['status']} (the dead-letter list)")


def stale_claim_recovery(demo: Demo) -> None:
    demo.title(6, "Stale-claim recovery", "stale_claim_recovery")
    demo.run("queue_producer", count=3, key_prefix="late")
    crashed = demo.store.atomic_claim(
        "pending_ops",
        where=[{"field": "status", "operator": "equals", "value": "pending"}],
        execution_id="queue_dispatcher/crashed-run",
    )
    demo.line(f"a dispatcher run claimed {crashed['count']} items and died (simulated)")
    fresh = demo.run("stale_claim_recovery", reclaim_dead_runs=False)
    demo.line(f"recovery by age (threshold 600 s): reclaimed {fresh.xcom('reclaim')['count']}")
    stale = demo.run("stale_claim_recovery")
    keys = ", ".join(row["key"] for row in stale.xcom("reclaim")["claimed"])
    demo.line(
        f"recovery asking Airflow (that run is not running): reclaimed {keys}; "
        "each processed once, done"
    )
    late = [demo.store.get("pending_ops", f"late-000{n}") or {} for n in range(3)]
    statuses = ", ".join(f"{row['status']} (recovered {row['recoveries']}x)" for row in late)
    demo.line(f"store: late-0000..0002: {statuses}")


def semaphore(demo: Demo) -> None:
    demo.title(8, "Semaphore", "semaphore_load, semaphore_report")
    quick = {"work_seconds": 0.1}
    load = demo.run("semaphore_load", **quick)
    report = demo.run("semaphore_report", **quick)
    failed = demo.run("semaphore_load", expect="failed", simulate_failure=True, **quick)
    for name, run in (("load", load), ("report", report), ("failing load", failed)):
        [slot] = run.xcom("acquire")["claimed"]
        demo.line(
            f"{name}: took {slot['key']} (fence {slot['value']['fence']}), work "
            f"{run.state_of('work')}, released: {run.xcom('release')}"
        )
    slots = {row["key"]: row["value"]["status"] for row in demo.store.query("warehouse_slots")}
    demo.line(f"store: warehouse_slots {slots}")
    demo.line("(runs at once wait deferred for a slot: tests/example_dags/test_semaphore.py)")


def cross_run_counter(demo: Demo) -> None:
    demo.title(7, "Cross-run counter", "cross_run_counter")
    counts = [demo.run("cross_run_counter").xcom("report") for _ in range(3)]
    demo.line(f"3 runs saw the count become {counts}")
    demo.line(f"store: counters/runs = {demo.store.get('counters', 'runs')['count']}")


def batch_dispatcher(demo: Demo) -> None:
    demo.title(9, "Batch dispatcher", "queue_producer, batch_dispatcher")
    demo.run("queue_producer", count=40, key_prefix="batch")
    run = demo.run("batch_dispatcher", batch_size=100)
    result = run.xcom("send_each")
    demo.line(
        f"one task claimed {result['claimed']} items and sent each: {result['done']} done, "
        f"{result['failed']} failed (one task instance, not {2 * result['claimed']})"
    )


def queue_housekeeping(demo: Demo) -> None:
    demo.title(10, "Queue housekeeping", "queue_housekeeping")
    before = len(demo.store.query("pending_ops", limit=10_000))
    run = demo.run("queue_housekeeping", retention_days=0, archive_table="pending_ops_archive")
    retired = run.xcom("retire_history")["done"]
    rows = [row["value"] for row in demo.store.query("pending_ops", limit=10_000)]
    left = ", ".join(
        f"{sum(v['status'] == s for v in rows)} {s}" for s in sorted({v["status"] for v in rows})
    )
    archived = len(demo.store.query("pending_ops_archive", limit=10_000))
    demo.line(
        f"retired {retired['retired']} done rows of {before} (retention 0 days here, 7 by "
        f"default), {archived} copied to pending_ops_archive; kept: {left}"
    )


RECIPES: list[Callable[[Demo], None]] = [
    process_event_once,
    token_bucket,
    rate_limit_per_key,
    leader_lease,
    queue,
    stale_claim_recovery,
    cross_run_counter,
    semaphore,
    batch_dispatcher,
    queue_housekeeping,
]


def main() -> int:
    started = time.monotonic()
    prepare()
    print(f"airflow-atomic-store demo: the ten recipes on sqlite:///{STORE.relative_to(PROJECT)}")
    print("(setting up a throwaway Airflow home in .demo/airflow …)", flush=True)
    with airflow_output_to_log() as out:
        from airflow.utils import db

        db.resetdb()
        demo = Demo(out)
        try:
            for recipe in RECIPES:
                recipe(demo)
        except Exception as exc:
            out.write(f"\ndemo failed: {exc}\n")
            return 1
        finally:
            demo.store.close()
        seconds = time.monotonic() - started
        out.write(f"\n{demo.runs} DAG runs in {seconds:.0f} s; Airflow's output is in {LOG}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
