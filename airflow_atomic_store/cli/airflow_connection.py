"""``--conn-id``: the connection found where Airflow's own CLI finds it.

A command line runs outside any task, where the task SDK's ``BaseHook.get_connection``
reads only ``AIRFLOW_CONN_*`` variables and secrets backends: a connection added with
``airflow connections add`` (the metadata database) was not found, and the error
sent the user back to that very command. ``airflow connections get`` looks through
the core ``Connection`` model's secrets backends (environment variables, configured
backends, the metadata database) as a server-side process; so does this.
"""

from __future__ import annotations

import os

from airflow.configuration import conf
from airflow.exceptions import AirflowNotFoundException
from airflow.models.connection import Connection

from airflow_atomic_store.exceptions import ConnectionConfigError
from airflow_atomic_store.hooks.atomic_store import store_from_connection
from airflow_atomic_store.store import AtomicStore


def open_store(conn_id: str, *, read_only: bool = True) -> AtomicStore:
    """The store behind ``conn_id``; read-only unless asked (a typo creates no store)."""
    # As ``airflow connections get`` sets it: a server-side process reads the metadata
    # database itself (a task's process asks the API server instead).
    os.environ["_AIRFLOW_PROCESS_CONTEXT"] = "server"
    try:
        conn = Connection.get_connection_from_secrets(conn_id)
    except AirflowNotFoundException:
        raise ConnectionConfigError(_missing(conn_id)) from None
    return store_from_connection(conn_id, conn, read_only=read_only)


def _missing(conn_id: str) -> str:
    return (
        f"the atomic store connection {conn_id!r} is not defined where Airflow looks: "
        f"the variable AIRFLOW_CONN_{conn_id.upper()}, the secrets backend "
        f"({conf.get('secrets', 'backend', fallback='') or 'none configured'}) and the "
        f"metadata database ({os.environ.get('AIRFLOW_HOME') or '~/airflow'}). "
        f"Check the id (`airflow connections list`) and that this command runs with the "
        f"same AIRFLOW_HOME and configuration as the Airflow that has the connection"
    )
