"""Find the OS process running a task instance, to kill it like a crashed worker.

The LocalExecutor runs each task instance in two processes: a supervisor (a
LocalExecutor worker, titled ``airflow worker -- LocalExecutor: <ti id>``) and
the task process it forks, which runs the operator and retitles itself
``airflow worker -- <ti id>``. The task instance id comes from the REST API.
Killing the task process with SIGKILL is what an out-of-memory kill or a
crashed node does to the work itself: the supervisor survives and reports the
task instance failed, as a real deployment would.
"""

from __future__ import annotations

import psutil

__all__ = ["task_process", "title_of"]


def title_of(process: psutil.Process) -> str:
    """The process title (what ``ps`` shows), or '' if it is gone."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def task_process(ti_id: str, candidates: list[psutil.Process]) -> psutil.Process | None:
    """The task process (not its supervisor) of task instance ``ti_id`` among ``candidates``."""
    wanted = f"airflow worker -- {ti_id}"
    for process in candidates:
        if title_of(process).strip() == wanted:
            return process
    return None
