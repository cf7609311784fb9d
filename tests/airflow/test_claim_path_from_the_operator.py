"""One keyed claim, from ``AtomicClaimOperator.execute`` to the driver's statement (issue 41).

Counted in a real DAG run on both backends, with the task's store already open
(the connection, the schema check and the listing of claimable sets happen once
per store, not per claim): the package modules whose functions run from
``execute`` until the claim's statement is sent. CONTRIBUTING.md lists them.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from airflow_atomic_store import AtomicClaimOperator, AtomicStore
from devkit.dagrun import DagRunResult, new_dag
from tests.integration.test_claim_path import module_of
from tests.support.specs import PENDING

RunDag = Callable[..., DagRunResult]
#: Issue 41's bound from the operator (``spec/`` counts as one).
MAX_OPERATOR_MODULES = 12
SEEN: dict[str, list[str]] = {}


def _is_statement(frame: FrameType, event: str, arg: Any) -> bool:
    """psycopg's ``Cursor.execute``, or sqlite3's ``Connection.execute`` (a C function)."""
    if event == "call":
        code = frame.f_code
        return code.co_name == "execute" and code.co_filename.endswith("psycopg/cursor.py")
    return (
        event == "c_call"
        and getattr(arg, "__name__", "") == "execute"
        and isinstance(getattr(arg, "__self__", None), sqlite3.Connection)
    )


class TracedClaimOperator(AtomicClaimOperator):
    """The claim operator, its ``execute`` traced once its store is open and warm."""

    def execute(self, context: Any) -> dict[str, Any]:
        store = self.hook.store
        for key in ("warm-up-1", "warm-up-2"):  # same shape: statement and sets cached
            store.atomic_claim(
                self.table, where=self.where, limit=1, execution_id="warm", idempotency_key=key
            )
        seen: list[str] = []
        done = False

        def profile(frame: FrameType, event: str, arg: Any) -> None:
            nonlocal done
            if done:
                return
            if _is_statement(frame, event, arg):
                done = True
            elif event == "call":
                module = module_of(frame.f_code.co_filename)
                if module is not None and module not in seen:
                    seen.append(module)

        sys.setprofile(profile)
        try:
            return super().execute(context)
        finally:
            sys.setprofile(None)
            SEEN[self.task_id] = seen


def test_a_keyed_claim_from_the_operator_passes_through_at_most_twelve_package_modules(
    run_dag: RunDag, store_conn: str, store_url: str, dag_id: str
) -> None:
    with AtomicStore(store_url) as store:
        for number in range(4):
            store.put("jobs", f"job-{number}", {"status": "pending"})
    with new_dag(dag_id) as dag:
        TracedClaimOperator(task_id="take", conn_id=store_conn, table="jobs", where=PENDING)
    run = run_dag(dag)
    assert run.state_of("take") == "success"
    assert [row["key"] for row in run.xcom("take")["claimed"]] == ["job-2", "job-3"]
    modules = SEEN["take"]
    print(" > ".join(modules))
    assert modules[0] == "operators.base"
    assert len(modules) <= MAX_OPERATOR_MODULES, modules
