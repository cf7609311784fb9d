"""The environment of a throwaway Airflow home that runs DAGs with ``dag.test()``.

Airflow reads it when it is first imported, so callers apply it before that. The
test session, the demo and the Airflow benchmark each use one home of their own.
"""

from __future__ import annotations

import secrets
from pathlib import Path


def dag_test_environment(home: Path, **settings: str) -> dict[str, str]:
    """``AIRFLOW_*`` variables for a home at ``home`` (its ``dags/`` and SQLite metadata DB).

    ``settings`` adds or overrides variables, e.g. ``AIRFLOW__LOGGING__LOGGING_LEVEL``.
    """
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        # dag.test()'s in-process execution API signs its task tokens with this. Airflow
        # 3.2.2 starts that API's lifespan without waiting for it, so without a secret the
        # start fails unseen and every task's first request fails ('svcs_registry').
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        **settings,
    }
