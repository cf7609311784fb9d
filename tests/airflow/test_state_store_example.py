"""The docs' DAG that uses Airflow's Task State Store next to a claim (docs/concepts.md).

Run for real with ``dag.test()``: the block is taken from the page as it is published,
so the page shows code that runs. The Task State Store exists from Airflow 3.3.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_atomic_store import AtomicStore
from devkit.dagrun import DagRunResult

PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"
SECTION = "## Airflow's own state stores, and what this store adds"


def airflow_line() -> tuple[int, int]:
    import airflow

    major, minor = airflow.__version__.split(".")[:2]
    return int(major), int(minor)


def example_source() -> str:
    section = PAGE.read_text().split(SECTION, 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "the section has no Python block"
    return found.group(1)


@pytest.mark.skipif(airflow_line() < (3, 3), reason="the Task State Store is Airflow 3.3's")
def test_the_docs_dag_claims_once_and_keeps_its_claim_in_the_task_state_store(
    store: AtomicStore,
    store_url: str,
    monkeypatch: pytest.MonkeyPatch,
    run_dag: Callable[..., DagRunResult],
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ATOMIC_STORE_DEFAULT", store_url)
    for n in range(3):
        store.put("orders_to_export", f"order-{n}", {"status": "pending"})
    namespace: dict[str, object] = {"__name__": "docs_concepts_example"}
    exec(compile(example_source(), str(PAGE), "exec"), namespace)
    submitted: list[list[str]] = []

    def submit_export(keys: list[str]) -> str:  # the external system: down on the first try
        submitted.append(keys)
        if len(submitted) == 1:
            raise ConnectionError("the export service is unavailable")
        return "job-1"

    namespace["submit_export"] = submit_export
    dag = namespace["export_orders"]()  # type: ignore[operator]
    dag.get_task("export_a_batch").retry_delay = timedelta(0)  # not the default five minutes
    result = run_dag(dag)
    assert result.state_of("export_a_batch") == "success"
    assert result.try_number_of("export_a_batch") == 2
    # The retry found its claim in the Task State Store: it did not claim again (a second
    # claim would have found nothing pending) and submitted the same keys.
    assert sorted(result.xcom("export_a_batch")) == ["order-0", "order-1", "order-2"]
    assert submitted[0] == submitted[1]
    rows = store.query("orders_to_export")
    assert {row["value"]["status"] for row in rows} == {"in_flight"}
