"""The Airflow plugin (entry point ``airflow.plugins``) that mounts the page on the API server.

Airflow imports every plugin in every component, task processes included (they
integrate plugins' macros), so this module stays light: the FastAPI app, its
templates and Airflow's security code load only when the API server reads
``fastapi_apps``.

What the UI shows (3.1+): the native page in the navigation and the "Atomic Store"
tab of every task instance, both ``react_apps`` the UI renders in its own shell from
the bundle the app serves (``ui/www/``); the server-rendered page as an external
view beside them (an iframe). Airflow drops a react app or external view whose
``url_route`` another one took, so each has its own. On 3.0 only the server-rendered
page exists, reached by its URL. Every URL handed to the UI carries the path of
``[api] base_url`` (Airflow mounts the app under it): 3.1 imports a bundle by the
URL as given, relative to its own script, and an iframe's ``src`` is used as given.
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from importlib.resources import files
from typing import Any
from urllib.parse import urlsplit

from airflow.plugins_manager import AirflowPlugin

from airflow_atomic_store.compat import EXTERNAL_VIEWS, REACT_APPS

#: Where the API server mounts the page (under ``[api] base_url``'s path).
URL_PREFIX = "/atomic-store"
NAME = "Atomic Store"
#: The built bundle (``make ui``), served by the app at ``static/<BUNDLE>``.
BUNDLE = "atomic-store.js"


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


def root_path() -> str:
    """The path of ``[api] base_url`` without its last slash (``""`` at the root), as
    Airflow's API server derives the path it mounts everything under."""
    from airflow.configuration import conf

    base_url = conf.get("api", "base_url", fallback="") or ""
    return urlsplit(base_url).path.rstrip("/")


def bundle_url() -> str:
    """The bundle's URL path, with its content hash so a browser never runs a stale one."""
    version = hashlib.sha256(static_file(BUNDLE)).hexdigest()[:16]
    return f"{root_path()}{URL_PREFIX}/static/{BUNDLE}?v={version}"


def static_file(name: str) -> bytes:
    return (files("airflow_atomic_store.ui") / "static" / name).read_bytes()


def _external_views() -> list[dict[str, Any]]:
    """The server-rendered page in the navigation (3.1+); on 3.0 it is reached by its URL."""
    if not EXTERNAL_VIEWS:
        return []
    return [
        {
            "name": f"{NAME} (HTML)",
            "href": f"{root_path()}{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "atomic-store-html",
            "icon": icon(),
        }
    ]


def _react_apps() -> list[dict[str, Any]]:
    """The native page in the navigation, and the tab of every task instance (3.1+).

    One bundle and one name: the UI keeps a loaded app under its name on ``globalThis``,
    and the component shows the tab when the UI hands it a task instance.
    """
    if not REACT_APPS:
        return []
    common = {"name": NAME, "bundle_url": bundle_url()}
    return [
        {
            **common,
            "destination": "nav",
            "category": "browse",
            "url_route": "atomic-store",
            "icon": icon(),
        },
        {**common, "destination": "task_instance", "url_route": "atomic-store-task"},
    ]


class AtomicStorePlugin(AirflowPlugin):
    """The "Atomic Store" page and task-instance tab: queues, claims, leases, receipts."""

    name = "atomic_store"
    fastapi_apps = _BuiltOnFirstRead()
    external_views = _external_views()
    react_apps = _react_apps()
