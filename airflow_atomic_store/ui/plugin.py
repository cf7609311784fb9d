"""The Airflow plugin (entry point ``airflow.plugins``) that mounts the page on the API server.

Airflow imports every plugin in every component, task processes included (they
integrate plugins' macros), so this module stays light: the FastAPI app, its
templates and Airflow's security code load only when the API server reads
``fastapi_apps``.
"""

from __future__ import annotations

import base64
from functools import cache
from importlib.resources import files
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_atomic_store.compat import EXTERNAL_VIEWS

#: Where the API server mounts the page.
URL_PREFIX = "/atomic-store"
NAME = "Atomic Store"


@cache
def _fastapi_apps() -> list[dict[str, Any]]:
    from airflow_atomic_store.ui.app import create_app

    return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": NAME}]


class _BuiltOnFirstRead:
    """A class attribute whose value is built when it is first read, then kept."""

    def __get__(self, instance: object, owner: type | None = None) -> list[dict[str, Any]]:
        return _fastapi_apps()


def icon() -> str:
    """The menu icon as a ``data:`` URL: no route to serve, and no route without sign-in."""
    svg = files("airflow_atomic_store.ui").joinpath("icon.svg").read_bytes()
    return "data:image/svg+xml;base64," + base64.b64encode(svg).decode("ascii")


def _external_views() -> list[dict[str, Any]]:
    """The navigation entry (Airflow 3.1+); on 3.0 the page is reached by its URL."""
    if not EXTERNAL_VIEWS:
        return []
    return [
        {
            "name": NAME,
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "atomic-store",
            "icon": icon(),
        }
    ]


class AtomicStorePlugin(AirflowPlugin):
    """The "Atomic Store" page: queues, claims, leases and buckets of a store connection."""

    name = "atomic_store"
    fastapi_apps = _BuiltOnFirstRead()
    external_views = _external_views()
