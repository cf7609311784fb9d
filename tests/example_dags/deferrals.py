"""Record what ``dag.test()`` runs deferred to, and what ran while they waited.

``dag.test()`` runs a deferred task's trigger inline, in its own process, and resumes
the task with the first event, as the triggerer would. It marks the task instance
``deferred`` when the task raised ``TaskDeferred``, then ``queued`` again for the
resume, before the trigger runs: so its metadata DB never shows ``deferred`` while
the trigger waits (a real deployment does: ``make e2e``). What a test can check is
that the task deferred (the trigger ran, with its class and how long) and that no
task instance of the run was ``running`` while it waited: nothing held a worker
slot. :func:`recorded_deferrals` wraps ``dag.test()``'s inline trigger run
(``_run_inline_trigger``, private to Airflow: 3.0 to 3.3 have it, 3.0 without the
task instance) to note both; use it in the process that calls ``dag.test()`` (a
worker job, or a test).
No pytest import: the warm workers (devkit/airflow_workers.py) run it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Deferral:
    dag_id: str
    run_id: str
    task_id: str
    trigger: str  # the trigger's class name
    started: float  # epoch seconds: the inline trigger started (the wait began)
    ended: float
    states: dict[str, str | None]  # the run's task instances when the wait began

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    @property
    def running(self) -> list[str]:
        return sorted(task for task, state in self.states.items() if state == "running")


@contextmanager
def recorded_deferrals() -> Iterator[list[Deferral]]:
    """Every wait of the ``dag.test()`` runs in this block, in the order they ended."""
    from airflow.sdk.definitions import dag as dag_module

    inline = dag_module._run_inline_trigger
    seen: list[Deferral] = []

    def recording(trigger: Any, *ti: Any) -> Any:
        dag_id, run_id, task_id = _waiting(ti)
        states, started = _states(dag_id, run_id), time.time()
        try:
            return inline(trigger, *ti)
        finally:
            seen.append(
                Deferral(
                    dag_id=dag_id,
                    run_id=run_id,
                    task_id=task_id,
                    trigger=type(trigger).__name__,
                    started=started,
                    ended=time.time(),
                    states=states,
                )
            )

    dag_module._run_inline_trigger = recording
    try:
        yield seen
    finally:
        dag_module._run_inline_trigger = inline


def _waiting(ti: tuple[Any, ...]) -> tuple[str, str, str]:
    """``(dag_id, run_id, task_id)`` of the task whose trigger is about to run inline.

    From 3.1 ``dag.test()`` passes the task instance; 3.0 passes the trigger alone,
    after setting the deferred task instance ``queued`` again: in a process that runs
    one ``dag.test()`` at a time, it is the one queued task instance.
    """
    if ti:
        return ti[0].dag_id, ti[0].run_id, ti[0].task_id
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        [row] = session.execute(
            select(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.task_id).where(
                TaskInstance.state == "queued"
            )
        ).all()
        return row[0], row[1], row[2]


def _states(dag_id: str, run_id: str) -> dict[str, str | None]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state).where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id
            )
        )
        return {
            task_id if index < 0 else f"{task_id}[{index}]": (
                None if state is None else str(getattr(state, "value", state))
            )
            for task_id, index, state in rows
        }
