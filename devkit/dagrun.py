"""Run a DAG with ``dag.test()`` and read back what happened (tests, benchmarks, the demo).

``dag.test()`` only runs DAGs that are serialised in the metadata DB, and it does
not raise when a task fails, so this module does both halves: serialise first,
then collect the run's state, every task instance's state and try number, and
the XComs, into a plain :class:`DagRunResult` for assertions.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

_BUNDLE = "dags-folder"


@dataclass(frozen=True)
class TaskResult:
    state: str | None
    try_number: int


@dataclass
class DagRunResult:
    dag_id: str
    run_id: str
    state: str
    tasks: dict[tuple[str, int], TaskResult]
    xcoms: dict[tuple[str, int, str], Any] = field(repr=False)

    def state_of(self, task_id: str, map_index: int = -1) -> str | None:
        return self.tasks[(task_id, map_index)].state

    def try_number_of(self, task_id: str, map_index: int = -1) -> int:
        return self.tasks[(task_id, map_index)].try_number

    def states(self) -> dict[str, str | None]:
        """``{task_id: state}`` for unmapped tasks, ``{"task_id[i]": state}`` for mapped ones."""
        return {
            (task_id if index < 0 else f"{task_id}[{index}]"): result.state
            for (task_id, index), result in sorted(self.tasks.items())
        }

    def mapped_indexes(self, task_id: str) -> list[int]:
        return sorted(index for (tid, index) in self.tasks if tid == task_id and index >= 0)

    def xcom(self, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        return self.xcoms[(task_id, map_index, key)]

    @property
    def execution_id(self) -> str:
        return f"{self.dag_id}/{self.run_id}"


def serialise(dag: Any) -> None:
    """Write ``dag`` to the metadata DB as if the DAG processor had parsed it."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.utils.session import create_session

    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    with create_session() as session:
        update_dag_parsing_results_in_db(
            bundle_name=_BUNDLE,
            bundle_version=None,
            dags=[_parsed(dag)],
            import_errors={},
            warnings=set(),
            session=session,
            **_parse_duration(update_dag_parsing_results_in_db),
        )


# Airflow 3.0 differs in three small ways from 3.1+ here; each helper below takes
# whichever form the installed line has (the compat matrix runs this on every line).


def _parsed(dag: Any) -> Any:
    """``dag`` as the DAG processor hands it over, a ``LazyDeserializedDAG``.

    3.0 has no ``from_dag``: its processor serialises the DAG to a dict after the
    DagBag has set ``relative_fileloc`` (to ``fileloc`` outside a bundle), as here.
    """
    from airflow.serialization.serialized_objects import LazyDeserializedDAG, SerializedDAG

    from_dag = getattr(LazyDeserializedDAG, "from_dag", None)
    if from_dag is not None:
        return from_dag(dag)
    if dag.relative_fileloc is None:
        dag.relative_fileloc = dag.fileloc
    to_dict = cast(Any, SerializedDAG).to_dict  # 3.0 has it; later lines have from_dag
    return LazyDeserializedDAG(data=to_dict(dag))


def _parse_duration(update: Any) -> dict[str, Any]:
    """``parse_duration=None`` where ``update_dag_parsing_results_in_db`` takes it (3.1+)."""
    import inspect

    return (
        {"parse_duration": None} if "parse_duration" in inspect.signature(update).parameters else {}
    )


def _xcom_rows(session: Any, run_id: str, dag_id: str) -> list[Any]:
    """A run's XCom rows: ``get_many`` is a select from 3.1, a session query in 3.0."""
    import inspect

    from airflow.models.xcom import XComModel

    get_many: Any = XComModel.get_many  # its signature differs between lines
    if "session" in inspect.signature(get_many).parameters:  # 3.0: a session query
        return list(get_many(run_id=run_id, dag_ids=dag_id, session=session).all())
    return list(session.scalars(get_many(run_id=run_id, dag_ids=dag_id)).all())


def _build_the_execution_api_once() -> None:
    """Give every line 3.2's single in-process execution API.

    ``dag.test()`` talks to an in-process execution API, a Cadwyn app whose first
    request costs seconds of CPU. From 3.2 ``supervisor.in_process_api_server`` is
    cached; 3.0 and 3.1 build a new one for every task instance, which made their DAG
    runs ten to twenty times slower here. Wrapping it the way 3.2 does changes nothing
    else: the app is stateless across runs (each run sets its own DAG bag override).
    """
    from airflow.sdk.execution_time import supervisor

    if not hasattr(supervisor.in_process_api_server, "cache_info"):
        supervisor.in_process_api_server = functools.lru_cache(maxsize=1)(
            supervisor.in_process_api_server
        )


def run_dag_test(
    dag: Any, *, conf: dict[str, Any] | None = None, run_after: datetime | None = None
) -> DagRunResult:
    """Serialise ``dag``, run it once with ``dag.test()`` and collect what happened.

    The run id is ``manual__<run_after>`` (now, unless given): processes that run the
    same DAG at the same moment, each with its own metadata DB, pass distinct
    ``run_after`` times so that their run ids (and execution ids) differ.
    """
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    _build_the_execution_api_once()
    serialise(dag)
    defaults = _param_defaults(dag)
    try:
        dag_run = dag.test(run_conf=conf, run_after=run_after)
    finally:
        for param, value in defaults:
            param.value = value
    dag_id, run_id = dag_run.dag_id, dag_run.run_id
    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        ).all()
        tasks = {
            (ti.task_id, ti.map_index): TaskResult(
                state=_text(ti.state),
                try_number=ti.try_number,
            )
            for ti in tis
        }
        rows = _xcom_rows(session, run_id, dag_id)
        xcoms = {
            (row.task_id, row.map_index, row.key): XComModel.deserialize_value(row) for row in rows
        }
    state = _text(dag_run.state) or "none"
    return DagRunResult(dag_id=dag_id, run_id=run_id, state=state, tasks=tasks, xcoms=xcoms)


def _param_defaults(dag: Any) -> list[tuple[Any, Any]]:
    """Every ``Param`` of the DAG and its tasks, with its current value.

    Airflow resolves a run's params by storing the run conf's values in the DAG's own
    ``Param`` objects. A worker process parses the DAG afresh for each task, but
    ``dag.test()`` runs every task in this process on the same DAG object, so without
    a restore one run's conf would become the next run's defaults.
    """
    from airflow.sdk.definitions.param import ParamsDict

    holders = [dag.params, *(getattr(task, "params", None) for task in dag.tasks)]
    return [
        (holder.get_param(name), copy.deepcopy(holder.get_param(name).value))
        for holder in holders
        if isinstance(holder, ParamsDict)
        for name in holder
    ]


def _text(state: Any) -> str | None:
    """A state enum (or plain string) as its plain string value."""
    return None if state is None else str(getattr(state, "value", state))


def new_dag(dag_id: str, **kwargs: Any) -> Any:
    """A manually triggered DAG with no retries unless the test asks for them."""
    import datetime

    from airflow.sdk import DAG

    kwargs.setdefault("default_args", {"retries": 0})
    return DAG(
        dag_id,
        schedule=None,
        start_date=datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc),
        catchup=False,
        **kwargs,
    )
