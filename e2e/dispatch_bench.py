"""Dispatcher throughput in a real deployment (issue 33): mapped recipe, batch recipe, floor.

``python -m e2e.dispatch_bench --out result.json`` starts the deployment ``make
e2e`` runs (:class:`e2e.deployment.Deployment`, LocalExecutor, the example DAGs,
and ``e2e/bench_dags`` as a bundle of its own) under ``.e2e/dispatch-bench/``, then times,
one after the other, a run of each:

- ``queue_dispatcher`` (the mapped recipe: one mapped task per claimed row) over
  ``--mapped`` items;
- ``batch_dispatcher`` (the batch recipe: ``@task.atomic_batch``) over ``--batch``
  items, in one run (``batch_size`` = the items);
- ``bench_floor_mapped`` and ``bench_floor_batch``: the same DAG shapes with no
  store call, Airflow's own floor for each.

The harness enqueues the items straight into the store before each run (not
timed). A run's time is Airflow's: from its ``start_date`` to its ``end_date``.
After each recipe run it checks, reading the rows, that every item is ``done``
and has exactly one side-effect record, whose outcome is ``done``. The store's
share of a run is the time PostgreSQL spent executing statements in the store's
database (``pg_stat_database.active_time``, which the task processes' backends
report when they end) over the run's time: the server side of every store call,
not the client's Python around it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from airflow_atomic_store import AtomicStore
from e2e.__main__ import wait_for_dags, wait_until_healthy
from e2e.api import TERMINAL_RUN_STATES, AirflowApi, wait_for
from e2e.deployment import PROJECT, STORE_DATABASE, USERNAME, Deployment

MAPPED, BATCH = "queue_dispatcher", "batch_dispatcher"
FLOOR_MAPPED, FLOOR_BATCH = "bench_floor_mapped", "bench_floor_batch"
DAG_IDS = (MAPPED, BATCH, FLOOR_MAPPED, FLOOR_BATCH)
RUN_TIMEOUT = 1800.0

_STATUSES = """
SELECT r.value ->> %s, count(*) FROM atomic_store_rows AS r
JOIN atomic_store_rows_tables AS t ON t.id = r.table_id
WHERE t.name = %s GROUP BY 1
"""
_KEYS = """
SELECT count(*) FROM atomic_store_rows AS r JOIN atomic_store_rows_tables AS t ON t.id = r.table_id
WHERE t.name = %s AND r.key NOT IN (
    SELECT r2.key FROM atomic_store_rows AS r2
    JOIN atomic_store_rows_tables AS t2 ON t2.id = r2.table_id WHERE t2.name = %s)
"""
_ACTIVE_MS = "SELECT active_time FROM pg_stat_database WHERE datname = %s"


def say(message: str) -> None:
    print(f"[dispatch-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _seconds(run: dict[str, Any]) -> float:
    started = datetime.fromisoformat(run["start_date"].replace("Z", "+00:00"))
    ended = datetime.fromisoformat(run["end_date"].replace("Z", "+00:00"))
    return (ended - started).total_seconds()


def _active_ms(url: str) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(_ACTIVE_MS, (STORE_DATABASE,)).fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0


def _counts(url: str, field: str, table: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {str(k): int(n) for k, n in conn.execute(_STATUSES, (field, table)).fetchall()}


def exactly_once(url: str, table: str, effects: str, items: int) -> dict[str, Any]:
    """Every item ``done``, one effect per item, each effect's outcome ``done``."""
    statuses = _counts(url, "status", table)
    outcomes = _counts(url, "outcome", effects)
    with psycopg.connect(url, autocommit=True) as conn:
        unmatched = conn.execute(_KEYS, (table, effects)).fetchone()[0]  # type: ignore[index]
    ok = statuses == {"done": items} and outcomes == {"done": items} and unmatched == 0
    return {"ok": ok, "statuses": statuses, "outcomes": outcomes, "without_effect": unmatched}


class Bench:
    """Triggers one run at a time and reads its time and the store's share of it."""

    def __init__(self, api: AirflowApi, deployment: Deployment) -> None:
        self.api, self.deployment = api, deployment
        self.store_url = deployment.store_url
        self.count = 0

    def timed_run(self, dag_id: str, conf: dict[str, Any]) -> dict[str, Any]:
        self.count += 1
        run_id = f"bench-{dag_id}-{self.count:02d}"
        before = _active_ms(self.store_url)
        requested = time.monotonic()
        self.api.trigger(dag_id, run_id, conf)

        def finished() -> dict[str, Any] | None:
            run = self.api.run(dag_id, run_id)
            return run if run["state"] in TERMINAL_RUN_STATES else None

        run = wait_for(
            finished,
            timeout=RUN_TIMEOUT,
            what=f"run {run_id} to finish",
            interval=1.0,
            check=self.deployment.check_alive,
        )
        observed = time.monotonic() - requested
        time.sleep(1.5)  # backends report their statistics when they end, at most 1 s late
        store_ms = _active_ms(self.store_url) - before
        seconds = _seconds(run)
        return {
            "dag_id": dag_id,
            "run_id": run_id,
            "state": run["state"],
            "seconds": seconds,
            "requested_to_seen": observed,
            "store_seconds": store_ms / 1000,
            "store_share": store_ms / 1000 / seconds if seconds else 0.0,
        }

    def recipe(self, dag_id: str, items: int) -> dict[str, Any]:
        table, effects = f"bench_{dag_id}_ops", f"bench_{dag_id}_effects"
        with AtomicStore(self.store_url) as store:
            for n in range(items):
                store.put(table, f"op-{n:05d}", {"status": "pending", "payload": {"item": n}})
        conf = {"table": table, "effects_table": effects, "batch_size": items}
        result = self.timed_run(dag_id, conf)
        result["items"] = items
        result["items_per_s"] = items / result["seconds"]
        result["exactly_once"] = exactly_once(self.store_url, table, effects, items)
        tasks = self.api.task_instances(dag_id, result["run_id"])
        result["task_instances"] = len(tasks)
        say(
            f"{dag_id}: {items} items in {result['seconds']:.1f} s "
            f"({result['items_per_s']:.1f} items/s, {len(tasks)} task instances), store "
            f"{100 * result['store_share']:.1f} %, exactly once: {result['exactly_once']['ok']}"
        )
        return result

    def floor(self, dag_id: str, items: int) -> dict[str, Any]:
        result = self.timed_run(dag_id, {"count": items})
        result["items"] = items
        result["items_per_s"] = items / result["seconds"]
        say(f"{dag_id}: {items} items in {result['seconds']:.1f} s (no store calls)")
        return result


def measure(api: AirflowApi, deployment: Deployment, mapped: int, batch: int) -> dict[str, Any]:
    for dag_id in DAG_IDS:
        api.unpause(dag_id)
    # Unpausing a scheduled recipe starts its due run (on the default, empty queue): let it end.
    wait_for(lambda: not api.open_runs(), timeout=600, what="the first scheduled runs", interval=2)
    bench = Bench(api, deployment)
    bench.floor(FLOOR_BATCH, 10)  # warm-up: the first task process of a deployment is slow
    plan: list[tuple[str, Callable[[str, int], dict[str, Any]], str, int]] = [
        ("floor_batch", bench.floor, FLOOR_BATCH, batch),
        ("batch", bench.recipe, BATCH, batch),
        ("floor_mapped", bench.floor, FLOOR_MAPPED, mapped),
        ("mapped", bench.recipe, MAPPED, mapped),
    ]
    return {name: step(dag_id, items) for name, step, dag_id, items in plan}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.dispatch_bench", description=__doc__)
    parser.add_argument("--mapped", type=int, default=200, help="items for the mapped recipe")
    parser.add_argument("--batch", type=int, default=1000, help="items for the batch recipe")
    parser.add_argument("--parallelism", type=int, default=8)
    parser.add_argument("--root", type=Path, default=PROJECT / ".e2e" / "dispatch-bench")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    deployment = Deployment(
        args.root.resolve(),
        (PROJECT / "example_dags").resolve(),
        parallelism=args.parallelism,
        extra_bundles={"bench-floor": PROJECT / "e2e" / "bench_dags"},
        say=say,
    )
    started = time.monotonic()
    api: AirflowApi | None = None
    try:
        deployment.start()
        api = AirflowApi(deployment.api_url, USERNAME, deployment.password)
        wait_until_healthy(api, deployment, timeout=300)
        wait_for_dags(api, deployment, list(DAG_IDS), timeout=300)
        say(f"deployment ready after {time.monotonic() - started:.0f} s")
        result = measure(api, deployment, args.mapped, args.batch)
        result["parallelism"] = args.parallelism
        args.out.write_text(json.dumps(result, indent=1))
    finally:
        if api is not None:
            api.close()
        deployment.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
