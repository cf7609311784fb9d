"""A tour of the three atomic primitives on the embedded SQLite store.

Run with ``make demo``. The store lives in ``.demo/store.db`` under the
project directory and is recreated on every run.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from airflow_atomic_store import AtomicStore

PROJECT = Path(__file__).resolve().parent.parent
DEMO_DIR = PROJECT / ".demo"


def show(label: str, result: Any) -> None:
    print(f"  {label:<44} -> {result}")


def token_bucket(store: AtomicStore) -> None:
    print("\n1. Token bucket (atomic_upsert to seed, guarded atomic_update to take)")
    seed = {"insert_value": {"tokens": 3}, "mutations": []}
    first = store.atomic_upsert("rate_limits", "external-api", **seed)
    show("seed bucket with 3 tokens", f"inserted={first['inserted']} value={first['value']}")
    again = store.atomic_upsert("rate_limits", "external-api", **seed)
    show("seed again (left alone)", f"inserted={again['inserted']} value={again['value']}")
    for caller in range(1, 6):
        result = store.atomic_update(
            "rate_limits",
            "external-api",
            where=[{"field": "tokens", "operator": "gt", "value": 0}],
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
        )
        outcome = (
            f"got a token, {result['value']['tokens']} left"
            if result["updated"]
            else "updated=False: bucket empty, back off"
        )
        show(f"caller {caller}: take a token", outcome)


def queue_drain(store: AtomicStore) -> None:
    print("\n2. Queue drain (atomic_claim, then a per-row atomic_update guarded on claimedBy)")
    for number in range(1, 6):
        store.put("pending_ops", f"op-{number}", {"status": "pending", "payload": number})
    show("producer enqueued", "op-1 .. op-5 (status=pending)")
    pending = [{"field": "status", "operator": "equals", "value": "pending"}]
    for run in ("dispatcher/run-1", "dispatcher/run-2", "dispatcher/run-3"):
        batch = store.atomic_claim("pending_ops", where=pending, limit=3, execution_id=run)
        keys = [row["key"] for row in batch["claimed"]]
        show(f"{run} claims up to 3", f"count={batch['count']} keys={keys}")
        for row in batch["claimed"]:
            store.atomic_update(
                "pending_ops",
                row["key"],
                where=[{"field": "claimedBy", "operator": "equals", "value": run}],
                mutations=[{"field": "status", "operation": "set", "value": "done"}],
            )
    sample = store.get("pending_ops", "op-1")
    show("op-1 afterwards", sample)


def process_once(store: AtomicStore) -> None:
    print("\n3. Process an event once (seed-if-missing atomic_upsert as a dedupe key)")
    for delivery in ("first delivery", "duplicate delivery"):
        result = store.atomic_upsert(
            "processed_events",
            "evt-42",
            insert_value={"payload": "charge card", "delivery": delivery},
        )
        verdict = "do the work" if result["inserted"] else "skip: already processed"
        show(f"{delivery} of evt-42", f"inserted={result['inserted']}: {verdict}")


def main() -> int:
    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    DEMO_DIR.mkdir()
    path = DEMO_DIR / "store.db"
    print(f"airflow-atomic-store demo on sqlite:///{path}")
    with AtomicStore(f"sqlite:///{path}") as store:
        token_bucket(store)
        queue_drain(store)
        process_once(store)
    print("\nEvery step above was one atomic operation; empty results are values, not errors.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
