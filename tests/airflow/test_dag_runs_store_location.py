"""A task whose SQLite store can never open fails at once: retries cannot fix the location."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from airflow_atomic_store import AtomicUpsertOperator
from devkit.dagrun import new_dag


def test_a_directory_at_the_store_url_fails_the_task_without_retries(
    run_dag, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dag_id: str, capsys
) -> None:
    directory = tmp_path / "store.db"
    directory.mkdir()
    monkeypatch.setenv("AIRFLOW_CONN_DIRECTORY_STORE", f"sqlite:///{directory}")
    with new_dag(dag_id, default_args={"retries": 3, "retry_delay": timedelta(0)}) as dag:
        AtomicUpsertOperator(
            task_id="seed", conn_id="directory_store", table="t", key="k", insert_value={}
        )

    run = run_dag(dag)

    assert (run.state_of("seed"), run.try_number_of("seed")) == ("failed", 1)
    assert "seed: no store can open there: SQLite store cannot open" in capsys.readouterr().out
