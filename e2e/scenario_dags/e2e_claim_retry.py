"""The e2e's claim-retry DAG: a claim whose first try dies right after its claim commits.

``make e2e`` enqueues rows in ``e2e_retry_ops`` and triggers one run. The claim's
first try commits its batch and then stalls in ``post_execute``, so that the
harness can SIGKILL its task process while the rows are ``in_flight`` under this
run, as an out-of-memory kill would. Airflow retries it (``retries=1``, one
second apart); the retry calls the claim with the same idempotency key
(``{dag_id}/{run_id}/{task_id}/{map_index}``) and gets the first try's batch back
(``replayed: true``), which ``finish`` then marks ``done``. No stale-claim pass
is involved: nothing in this DAG or the harness recovers these rows.

Not an example DAG: it exists only to be killed (``e2e/scenario_claim_retry.py``).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import DAG, Context, task

from airflow_atomic_store import AtomicClaimOperator, AtomicStoreHook
from airflow_atomic_store.templating import execution_id

DAG_ID = "e2e_claim_retry"
TABLE = "e2e_retry_ops"
BATCH = 4
STALL_SECONDS = 600  # far longer than the harness needs to find and kill the process


class ClaimThenStall(AtomicClaimOperator):
    """An ``AtomicClaimOperator`` whose first try stalls after the claim has committed."""

    def post_execute(self, context: Context, result: Any = None) -> None:
        if context["ti"].try_number == 1:
            self.log.info("try 1: the claim committed; stalling to be killed")
            time.sleep(STALL_SECONDS)


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["e2e"],
) as dag:
    claim = ClaimThenStall(
        task_id="claim",
        table=TABLE,
        where=[{"field": "status", "operator": "equals", "value": "pending"}],
        limit=BATCH,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )

    @task
    def finish(batch: dict[str, Any], **context: Any) -> list[str]:
        """Mark each claimed row ``done``, guarded on this run still holding it."""
        run, done = execution_id(context), []
        with AtomicStoreHook() as hook:
            for row in batch["claimed"]:
                result = hook.atomic_update(
                    TABLE,
                    row["key"],
                    where=[
                        {"field": "claimedBy", "operator": "equals", "value": run},
                        {"field": "status", "operator": "equals", "value": "in_flight"},
                    ],
                    mutations=[
                        {"field": "status", "operation": "set", "value": "done"},
                        {"field": "doneBy", "operation": "set", "value": run},
                    ],
                )
                if result["updated"]:
                    done.append(row["key"])
        return done

    finish(claim.output)
