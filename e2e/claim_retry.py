"""A claim SIGKILLed right after it committed, and its retry replaying the batch.

The DAG ``e2e_claim_retry`` (``e2e/scenario_dags``, a second DAG bundle of the
deployment) claims ``BATCH`` rows of ``TABLE`` with ``retries=1``; its first try
stalls after the claim has committed. The harness waits until the store shows
rows ``in_flight`` under the run, SIGKILLs the claim's task process (found by its
title, like the dispatcher's), and later checks that Airflow's retry got the
same batch back (``replayed: true``) and processed it, with no stale-claim pass
involved. It runs alongside the drain: :meth:`ClaimRetry.kill_after_commit` is
called on each of the drain's polls until it has killed.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import psutil

from airflow_atomic_store import AtomicStore
from e2e import checks
from e2e.tasks import task_process

if TYPE_CHECKING:
    from e2e.driver import Driver

__all__ = ["DAG_ID", "ClaimRetry"]

# As in e2e/scenario_dags/e2e_claim_retry.py (the harness does not import DAG files).
DAG_ID = "e2e_claim_retry"
CLAIM_TASK, FINISH_TASK = "claim", "finish"
TABLE = "e2e_retry_ops"
BATCH = 4  # the claim's limit
ROWS = 10  # rows enqueued: more than a batch, so a second claim would show


@dataclass
class ClaimKill:
    """The claim task process that was SIGKILLed, and the batch it had committed."""

    run_id: str
    claimed_by: str
    keys: list[str]  # in claim order, read from the store before the kill
    pid: int
    killed_at: datetime  # UTC, the harness's clock (the same machine as Airflow's)


class ClaimRetry:
    """Enqueue, trigger, kill after the commit, verify: one run of ``DAG_ID``."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.kill: ClaimKill | None = None
        self.harness_seconds = 0.0  # what these steps added to the harness's own loop

    def start(self, driver: Driver, store: AtomicStore) -> None:
        """Enqueue ``ROWS`` pending rows (FIFO by key) and trigger the run."""
        started = time.monotonic()
        for n in range(ROWS):
            store.put(TABLE, f"retry-{n:02d}", {"status": "pending", "n": n})
        self.run_id = driver.trigger(DAG_ID, "retry")
        driver.say(f"triggered {DAG_ID} {self.run_id}: its claim is to be killed after it commits")
        self.harness_seconds += time.monotonic() - started

    def kill_after_commit(self, driver: Driver, store: AtomicStore) -> bool:
        """SIGKILL the claim's first try once its batch is ``in_flight``; True once done."""
        if self.kill is not None:
            return True
        assert self.run_id is not None, "start() first"
        started = time.monotonic()
        try:
            self.kill = self._try_kill(driver, store, self.run_id)
        finally:
            self.harness_seconds += time.monotonic() - started
        return self.kill is not None

    def _try_kill(self, driver: Driver, store: AtomicStore, run_id: str) -> ClaimKill | None:
        claimed_by = f"{DAG_ID}/{run_id}"
        rows = checks.read_table(store, TABLE)  # createdAt order: the claim's order
        keys = [
            key
            for key, value in rows.items()
            if value.get("status") == "in_flight" and value.get("claimedBy") == claimed_by
        ]
        if not keys:
            return None  # not claimed yet
        running = driver.api.task_instances(DAG_ID, run_id, task_id=CLAIM_TASK, state="running")
        if not running:
            return None
        ti = running[0]
        if ti["try_number"] != 1:
            raise checks.CheckFailed(f"the claim of {run_id} is on try {ti['try_number']} unkilled")
        process = task_process(ti["id"], driver.deployment.task_candidates())
        if process is None:
            return None
        process.send_signal(signal.SIGKILL)
        psutil.wait_procs([process], timeout=10)
        kill = ClaimKill(run_id, claimed_by, keys, process.pid, datetime.now(timezone.utc))
        driver.say(
            f"SIGKILLed task process {kill.pid} ({CLAIM_TASK} of {run_id}, try 1) after its "
            f"claim committed: {', '.join(keys)} in flight under {claimed_by}"
        )
        return kill

    def verify(self, driver: Driver, store: AtomicStore) -> dict[str, str]:
        """The retry replayed the batch: the summary line, or ``CheckFailed``."""
        started = time.monotonic()
        kill, api = self.kill, driver.api
        assert kill is not None  # the drain returns only after the kill
        ti = api.task_instances(DAG_ID, kill.run_id, task_id=CLAIM_TASK)[0]
        if ti["state"] != "success" or ti["try_number"] != 2:
            raise checks.CheckFailed(
                f"the killed claim ended {ti['state']} on try {ti['try_number']}, "
                "not success on try 2"
            )
        first_try = api.tries(DAG_ID, kill.run_id, CLAIM_TASK)[0]
        result: Any = api.xcom(DAG_ID, kill.run_id, CLAIM_TASK)
        rows = checks.read_table(store, TABLE)
        checks.claim_retry_replayed_its_batch(kill.keys, result, rows, kill.claimed_by)
        finish = api.task_instances(DAG_ID, kill.run_id, task_id=FINISH_TASK)[0]
        if finish["state"] != "success":
            raise checks.CheckFailed(f"{FINISH_TASK} of {kill.run_id} ended {finish['state']}")
        retry_started = (checks.parse_time(ti["start_date"]) - kill.killed_at).total_seconds()
        replayed = (checks.parse_time(ti["end_date"]) - kill.killed_at).total_seconds()
        driver.say(
            f"{CLAIM_TASK} of {kill.run_id}: try 1 {first_try['state']} (killed), try 2 "
            f"replayed {result['count']} row(s) {', '.join(kill.keys)} (replayed: true) "
            f"{replayed:.0f}s after the kill (it started after {retry_started:.0f}s); "
            f"{FINISH_TASK} marked them done; no stale-claim pass"
        )
        self.harness_seconds += time.monotonic() - started
        return {
            "claim retry": (
                f"{CLAIM_TASK} of {kill.run_id} killed after committing {len(kill.keys)} rows; "
                f"try 2 replayed the same keys in order {replayed:.0f}s after the kill, "
                f"nothing else claimed, none recovered ({self.harness_seconds:.1f}s of "
                "harness time)"
            ),
        }
