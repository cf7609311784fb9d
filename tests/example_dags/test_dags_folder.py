"""example_dags/ is a DAGs folder Airflow can load as it is (as the end-to-end deployment does)."""

from __future__ import annotations

import pytest

from devkit.examples import EXAMPLE_DAGS, example_dags

DAG_IDS = [
    "cross_run_counter",
    "event_driven_dispatcher",
    "event_ops_stale_claim_recovery",
    "event_producer",
    "leader_lease",
    "process_event_once",
    "queue_dispatcher",
    "queue_producer",
    "rate_limit_per_key",
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
    # The shared helper module is imported by the DAG files, never parsed as one.
    assert all(not path.endswith("_queue_processing.py") for path in bag.file_last_changed)
    assert sorted(example_dags()) == DAG_IDS


def test_every_example_dag_runs_manually_takes_its_store_from_params_and_never_catches_up() -> None:
    for dag in example_dags().values():
        assert dag.catchup is False, dag.dag_id
        assert dag.params["conn_id"] == "atomic_store_default", dag.dag_id
        assert "table" in dag.params, dag.dag_id
        assert "recipe" in dag.tags, dag.dag_id
