"""Provider metadata for Airflow's providers manager (entry point ``apache_airflow_provider``).

Kept import-light: the providers manager calls this while Airflow starts, so it
must not import Airflow or the hook (the package itself imports only the store,
which imports no Airflow).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from airflow_atomic_store import __version__, connection_form

PACKAGE_NAME = "airflow-atomic-store"  # must equal the distribution name exactly
INTEGRATION = "Atomic Store"
HOOK_CLASS = "airflow_atomic_store.hooks.atomic_store.AtomicStoreHook"
EXAMPLE_DAGS = "airflow_atomic_store.example_dags"
#: The released docs (the tag of this version, as pyproject's Documentation URL).
DOCS = f"https://github.com/airflow-atomic-store/airflow-atomic-store/blob/v{__version__}/docs"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": PACKAGE_NAME,
        "name": INTEGRATION,
        "description": (
            "Atomic update, claim and upsert primitives over SQLite and PostgreSQL, so that "
            "concurrent DAG runs, mapped tasks and workers coordinate through shared rows "
            "without races. In Airflow's UI (3.1+), Browse > Atomic Store shows each store "
            "connection's tables, queue counts and charts, claims, leases and rows, and a "
            "task instance's Atomic Store tab what it claimed, holds and recorded there."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": f"{DOCS}/index.md",
                "how-to-guide": [
                    f"{DOCS}/getting-started.md",
                    f"{DOCS}/reference/operators.md",
                    f"{DOCS}/observing.md",
                ],
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_atomic_store.hooks.atomic_store"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_atomic_store.operators.update",
                    "airflow_atomic_store.operators.claim",
                    "airflow_atomic_store.operators.upsert",
                    "airflow_atomic_store.operators.bulk",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_atomic_store.triggers.claimable_rows",
                    "airflow_atomic_store.triggers.claim_wait",
                    "airflow_atomic_store.triggers.row_wait",
                ],
            }
        ],
        "task-decorators": [
            {
                "class-name": "airflow_atomic_store.decorators.atomic_batch.atomic_batch_task",
                "name": "atomic_batch",
            }
        ],
        "connection-types": _connection_types(),
        # ``airflow atomic-store …``: read by Airflow 3.2+, ignored before (airflow_atomic_store/cli).
        "cli": ["airflow_atomic_store.cli.airflow_commands.get_cli_commands"],
        "example-dags": _example_dags(),
    }


def _example_dags() -> list[str]:
    """The example DAG modules shipped in the package, as ``airflow_atomic_store.example_dags``.

    Airflow's provider-info schema has no key for example DAGs and accepts keys it does
    not define (it ignores this one; ``airflow providers get --full`` shows it). With
    ``[core] load_examples`` Airflow parses the package's ``example_dags`` folder itself.
    An editable install has no such folder (the files stay in the repository's
    ``example_dags/``): the list is empty there. ``_``-prefixed files are helpers.
    """
    folder = Path(__file__).with_name("example_dags")
    return sorted(f"{EXAMPLE_DAGS}.{path.stem}" for path in folder.glob("[!_]*.py"))


def _connection_types() -> list[dict[str, Any]]:
    """The ``sqlite`` connection type, unless the SQLite provider already defines it.

    The hook reads ``postgres`` and ``sqlite`` connections. ``postgres`` belongs to
    the PostgreSQL provider and stays there. ``sqlite`` is registered here only when
    ``apache-airflow-providers-sqlite`` is absent, so that the UI can still create
    SQLite store connections, without ever taking the type over from that provider.
    """
    if importlib.util.find_spec("airflow.providers.sqlite") is not None:
        return []
    return [
        {
            "connection-type": "sqlite",
            "hook-class-name": HOOK_CLASS,
            "hook-name": "Atomic Store (SQLite file)",
            # Read by Airflow 3.2+; 3.0 and 3.1 ask the hook (connection_form.py).
            "conn-fields": connection_form.conn_fields(),
            "ui-field-behaviour": connection_form.provider_field_behaviour(),
        }
    ]
