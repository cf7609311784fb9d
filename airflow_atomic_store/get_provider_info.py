"""Provider metadata for Airflow's providers manager (entry point ``apache_airflow_provider``).

Kept import-light: the providers manager calls this while Airflow starts, so it
must not import Airflow, the hook or the store.
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import PackageNotFoundError, version
from typing import Any

PACKAGE_NAME = "airflow-atomic-store"  # must equal the distribution name exactly
INTEGRATION = "Atomic Store"
HOOK_CLASS = "airflow_atomic_store.hooks.atomic_store.AtomicStoreHook"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": PACKAGE_NAME,
        "name": INTEGRATION,
        "description": (
            "Atomic update, claim and upsert primitives over SQLite and PostgreSQL, so that "
            "concurrent DAG runs, mapped tasks and workers coordinate through shared rows "
            "without races."
        ),
        "versions": [_installed_version()],
        "integrations": [{"integration-name": INTEGRATION, "tags": ["software"]}],
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
                ],
            }
        ],
        "connection-types": _connection_types(),
    }


def _installed_version() -> str:
    try:
        return version(PACKAGE_NAME)
    except PackageNotFoundError:  # imported from a source tree that is not installed
        return "0+unknown"


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
            "ui-field-behaviour": {
                "hidden-fields": ["login", "password", "port", "schema", "extra"],
                "relabeling": {"host": "Absolute path of the store file"},
                "placeholders": {"host": "/abs/path/store.db"},
            },
        }
    ]
