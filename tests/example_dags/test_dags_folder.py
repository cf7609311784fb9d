"""example_dags/ is a DAGs folder Airflow can load as it is (as the end-to-end deployment does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_atomic_store.get_provider_info import EXAMPLE_DAGS as EXAMPLE_PACKAGE
from devkit.examples import EXAMPLE_DAGS, example_dags

ROOT = Path(__file__).resolve().parents[2]

DAG_IDS = [
    "batch_dispatcher",
    "cross_run_counter",
    "event_driven_dispatcher",
    "event_ops_stale_claim_recovery",
    "event_producer",
    "leader_lease",
    "process_event_once",
    "queue_dispatcher",
    "queue_housekeeping",
    "queue_producer",
    "rate_limit_per_key",
    "semaphore_load",
    "semaphore_report",
    "stale_claim_recovery",
    "token_bucket",
    "token_bucket_refill",
]


# Airflow reads .airflowignore with pathspec's "gitwildmatch" patterns, which pathspec
# now deprecates; not ours to fix.
@pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")
def test_the_dag_processor_loads_every_example_dag_without_errors() -> None:
    from airflow.dag_processing.dagbag import BundleDagBag

    bag = BundleDagBag(
        dag_folder=str(EXAMPLE_DAGS), bundle_path=str(EXAMPLE_DAGS), bundle_name="examples"
    )

    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == DAG_IDS
    # The shared helper modules are imported by the DAG files, never parsed as ones.
    assert all(not Path(path).name.startswith("_") for path in bag.file_last_changed)
    assert any(path.endswith("queue_dispatcher.py") for path in bag.file_last_changed)
    assert sorted(example_dags()) == DAG_IDS


def test_every_example_dag_runs_manually_takes_its_store_from_params_and_never_catches_up() -> None:
    for dag in example_dags().values():
        assert dag.catchup is False, dag.dag_id
        assert dag.params["conn_id"] == "atomic_store_default", dag.dag_id
        assert "table" in dag.params, dag.dag_id
        assert "recipe" in dag.tags, dag.dag_id


def test_every_listed_example_module_imports_by_its_listed_path_outside_a_dags_folder(
    tmp_path: Path,
) -> None:
    """``get_provider_info()["example-dags"]`` lists ``airflow_atomic_store.example_dags.X``.

    The wheel ships ``example_dags/`` as that subpackage; an editable install has no
    such folder, so a fresh interpreter gets the same layout by adding a folder whose
    ``example_dags`` is this repository's to the package's path. The DAGs folder is not
    on ``sys.path`` there: a DAG file that imports its helper by bare name fails.
    """
    (tmp_path / "example_dags").symlink_to(EXAMPLE_DAGS, target_is_directory=True)
    probe = (
        "import importlib, json, sys\n"
        "import airflow_atomic_store\n"
        f"airflow_atomic_store.__path__.append({str(tmp_path)!r})\n"
        f"assert not any(p.endswith('example_dags') for p in sys.path), sys.path\n"
        "from airflow.sdk import DAG\n"
        "found = {}\n"
        f"for name in {listed_modules()!r}:\n"
        "    module = importlib.import_module(name)\n"
        "    found[name] = sorted(v.dag_id for v in vars(module).values() if isinstance(v, DAG))\n"
        "print(json.dumps(found))\n"
    )
    home = tmp_path / "airflow-home"
    env = {**os.environ, "AIRFLOW_HOME": str(home), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(found) == listed_modules()
    assert sorted(dag_id for dag_ids in found.values() for dag_id in dag_ids) == DAG_IDS


def listed_modules() -> list[str]:
    """What ``get_provider_info`` lists from an installed wheel (``_example_dags``)."""
    return sorted(f"{EXAMPLE_PACKAGE}.{path.stem}" for path in EXAMPLE_DAGS.glob("[!_]*.py"))
