"""Scenario 6's child process: run the dispatcher DAG with ``dag.test()`` and time the store.

Airflow reads ``AIRFLOW_HOME`` when first imported, so this runs as its own
process (``python -m bench.airflow_dispatch``) with a throwaway home set
before any Airflow import, exactly as ``tests/support/airflow_plugin.py`` does. The
store's primitives are wrapped with timers; ``dag.test()`` runs task
instances in this process, so the wrappers see every call the operators make.
Writes one JSON object to the path given as ``--out``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devkit.airflow_home import dag_test_environment

CONN_ID = "atomic_bench"
TABLE = "pending_ops"
PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]
MINE = [{"field": "claimedBy", "operator": "equals", "value": "{{ atomic.execution_id }}"}]


def _isolated_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="atomic-bench-airflow-"))
    (home / "dags").mkdir()
    os.environ.update(dag_test_environment(home, AIRFLOW__LOGGING__LOGGING_LEVEL="WARNING"))
    return home


class StoreTimer:
    """Wraps ``AtomicStore`` methods to sum the seconds spent inside them."""

    def __init__(self, names: tuple[str, ...]) -> None:
        from airflow_atomic_store.store.atomic_store import AtomicStore

        self.seconds = 0.0
        self.calls = 0
        for name in names:
            setattr(AtomicStore, name, self._wrap(getattr(AtomicStore, name)))

    def _wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        # wraps: the operators take their defaults from these methods' signatures.
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        return timed


def _dispatcher(dag_id: str, rows: int) -> Any:
    from airflow.sdk import task

    from airflow_atomic_store import AtomicClaimOperator, AtomicUpdateOperator
    from devkit.dagrun import new_dag

    with new_dag(dag_id) as dag:
        drain = AtomicClaimOperator(
            task_id="drain", conn_id=CONN_ID, table=TABLE, where=PENDING, limit=rows
        )

        @task
        def process(row: dict[str, Any]) -> str:
            return f"sent {row['value']['payload']}"

        sent = process.expand(row=drain.claimed)
        done = AtomicUpdateOperator.partial(
            task_id="mark_done",
            conn_id=CONN_ID,
            table=TABLE,
            where=MINE,
            mutations=[{"field": "status", "operation": "set", "value": "done"}],
        ).expand(key=drain.claimed_keys)
        sent >> done
    return dag


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store-url", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    home = _isolated_home()
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = args.store_url
    try:
        started = time.perf_counter()
        from airflow.utils import db

        from airflow_atomic_store import AtomicStore
        from devkit.dagrun import serialise

        db.resetdb()
        setup_seconds = time.perf_counter() - started
        timer = StoreTimer(("atomic_claim", "atomic_update"))
        dag = _dispatcher("bench_dispatcher", args.rows)
        serialise(dag)
        runs = []
        for number in range(args.runs + 1):  # the first run warms Airflow up (about 4 s)
            with AtomicStore(args.store_url) as store:
                for n in range(args.rows):
                    store.put(TABLE, f"op-{number}-{n}", {"status": "pending", "payload": n})
            timer.seconds, timer.calls = 0.0, 0
            start = time.perf_counter()
            dag_run = dag.test()
            wall = time.perf_counter() - start
            state = str(getattr(dag_run.state, "value", dag_run.state))
            runs.append(
                {"wall": wall, "store": timer.seconds, "calls": timer.calls, "state": state}
            )
        with AtomicStore(args.store_url) as store:
            left = store.query(TABLE, where=PENDING, limit=1)
        result = {"setup_seconds": setup_seconds, "runs": runs, "pending_left": len(left)}
        Path(args.out).write_text(json.dumps(result))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
