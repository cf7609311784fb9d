"""Load the DAGs of ``example_dags/`` the way Airflow loads a DAGs folder.

Airflow puts the DAGs folder on ``sys.path`` (so the DAG files can import their
shared helper, ``_queue_processing``) and imports every DAG file; this does the
same, once per process, and looks DAGs up by id, for the tests and ``make demo``.
Import it only after ``AIRFLOW_HOME`` is set: loading DAGs imports Airflow.
``stored_rows`` reads back what the DAGs wrote, for the tests' assertions;
``airflow_metadata`` what Airflow kept of a run (XComs, rendered fields).
"""

from __future__ import annotations

import importlib
import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

EXAMPLE_DAGS = Path(__file__).resolve().parents[1] / "example_dags"


@cache
def example_dags() -> dict[str, Any]:
    """Every DAG defined in ``example_dags/``, by DAG id."""
    from airflow.sdk import DAG

    if str(EXAMPLE_DAGS) not in sys.path:
        sys.path.insert(0, str(EXAMPLE_DAGS))
    dags: dict[str, Any] = {}
    for path in sorted(EXAMPLE_DAGS.glob("[!_]*.py")):
        module = importlib.import_module(path.stem)
        for value in vars(module).values():
            if isinstance(value, DAG):
                dags[value.dag_id] = value
    return dags


def example_dag(dag_id: str) -> Any:
    """The example DAG ``dag_id``."""
    dags = example_dags()
    if dag_id not in dags:
        raise KeyError(f"no example DAG {dag_id!r}; there are {sorted(dags)}")
    return dags[dag_id]


def stored_rows(store_url: str, table: str) -> dict[str, dict[str, Any]]:
    """Every row of the logical ``table`` in the store at ``store_url``, by key."""
    from airflow_atomic_store import AtomicStore

    with AtomicStore(store_url) as store:
        return {row["key"]: row["value"] for row in store.query(table, limit=1000)}


def airflow_metadata(dag_id: str, run_id: str) -> dict[tuple[str, str, int, str], str]:
    """What Airflow's metadata DB keeps of one DAG run's data, each entry as JSON text.

    Keys are ``("xcom", task_id, map_index, xcom_key)`` for the run's XComs and
    ``("rendered_fields", task_id, map_index, "")`` for each task instance's rendered
    template fields (a mapped task's expanded arguments among them).
    """
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    kept: dict[tuple[str, str, int, str], str] = {}
    with create_session() as session:
        xcoms = session.execute(
            select(XComModel.task_id, XComModel.map_index, XComModel.key, XComModel.value).where(
                XComModel.dag_id == dag_id, XComModel.run_id == run_id
            )
        )
        for task_id, map_index, key, value in xcoms:
            kept["xcom", task_id, map_index, key] = _as_text(value)
        rendered = session.execute(
            select(Rendered.task_id, Rendered.map_index, Rendered.rendered_fields).where(
                Rendered.dag_id == dag_id, Rendered.run_id == run_id
            )
        )
        for task_id, map_index, fields in rendered:
            kept["rendered_fields", task_id, map_index, ""] = _as_text(fields)
    return kept


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
