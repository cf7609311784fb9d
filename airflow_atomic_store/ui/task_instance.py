"""The task instance the "Atomic Store" tab shows: who may see it, and when its latest try began.

The tab reads a store through its connections like the page (the same per-connection
checks), and it shows what one DAG's task did, so it also asks the auth manager the
question Airflow asks before showing a task instance: may this user ``GET`` the
DAG's task instances? The latest try's start comes from Airflow's metadata database
(the API server's own session): a receipt written before it was replayed by that try.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status

from airflow_atomic_store.ui.access import page_user

#: The query parameters, named as the UI names the props it hands the tab.
FIELDS = ("dag_id", "run_id", "task_id", "map_index")


class BadTaskInstance(ValueError):
    """A query that names no task instance: the field and what is wrong with it."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


@dataclass(frozen=True)
class TaskInstanceRef:
    """One task instance, as the tab's query names it (``map_index`` -1: not mapped)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1

    @classmethod
    def from_query(cls, request: Request) -> TaskInstanceRef:
        params = request.query_params
        for field in FIELDS[:3]:
            if not params.get(field, ""):
                raise BadTaskInstance(field, "required (the task instance the tab shows)")
        index = params.get("map_index", "").strip() or "-1"
        try:
            map_index = int(index)
        except ValueError:
            raise BadTaskInstance("map_index", f"not an integer: {index!r}") from None
        if map_index < -1:
            raise BadTaskInstance("map_index", f"must be -1 (not mapped) or more, got {map_index}")
        return cls(params["dag_id"], params["run_id"], params["task_id"], map_index)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "map_index": self.map_index,
        }


def tab_user(request: Request, user: Annotated[Any, Depends(page_user)]) -> Any:
    """The page's user (:func:`~airflow_atomic_store.ui.access.page_user`), if the auth
    manager also lets them read the named DAG's task instances (403 otherwise)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )

    dag_id = request.query_params.get("dag_id", "")
    allowed = get_auth_manager().is_authorized_dag(
        method="GET",
        access_entity=DagAccessEntity.TASK_INSTANCE,
        details=DagDetails(id=dag_id or None),
        user=user,
    )
    if not allowed:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")
    return user


def latest_try_start(ref: TaskInstanceRef) -> datetime | None:
    """When the task instance's latest try started (aware UTC), None when it has not."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(TaskInstance.start_date).where(
        TaskInstance.dag_id == ref.dag_id,
        TaskInstance.run_id == ref.run_id,
        TaskInstance.task_id == ref.task_id,
        TaskInstance.map_index == ref.map_index,
    )
    with create_session() as session:
        started: datetime | None = session.scalar(query)
    return started


TabUser = Annotated[Any, Depends(tab_user)]
