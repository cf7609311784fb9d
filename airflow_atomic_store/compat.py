"""What ``apache-airflow-providers-common-compat`` does not cover, for the Airflow 3.x lines.

Airflow's own providers span the lines through common-compat: the package imports
``BaseHook``, ``BaseOperator``, ``SkipMixin``, ``Stats`` and the exceptions from
``airflow.providers.common.compat.sdk``, and the triggers look their connection up with
``airflow.providers.common.compat.connection.get_async_connection`` (which avoids
``BaseHook.aget_connection`` before Airflow 3.3.2, where it masks secrets with a
synchronous call). This module keeps only the rest (checked against the 3.0.6, 3.1.8,
3.2.2 and 3.3.2 wheels):

* ``PostgresHook``: the PostgreSQL provider's, connecting with psycopg 3 also on 3.0
  (where SQLAlchemy 1.4 would make it pick psycopg2); loaded on first use, refusing a
  provider older than :data:`MIN_POSTGRES_PROVIDER_VERSION`.
* ``api_user``: the API server's dependency that resolves the signed-in user. From 3.1
  ``airflow.api_fastapi.core_api.security.get_user`` reads a Bearer header or the UI's
  ``_token`` cookie; 3.0's reads only the header, so there the cookie is read here.
  Loaded on first use (the API server only).
* ``EXTERNAL_VIEWS``, ``REACT_APPS``: whether the UI shows plugins' ``external_views``
  and ``react_apps`` (3.1+). The
  line is read with :func:`~airflow_atomic_store.versions.release`: common-compat's
  ``version_compat`` asks providers to copy it rather than import it.

Importing this module refuses an Airflow older than :data:`MIN_AIRFLOW_VERSION`
with a ``RuntimeError``, as Airflow's own providers do; loading ``PostgresHook``
refuses a PostgreSQL provider older than :data:`MIN_POSTGRES_PROVIDER_VERSION` the
same way (pip enforces both floors; these catch an install that bypassed pip). The
store layer (``airflow_atomic_store.store``, ``airflow_atomic_store.spec``) never
imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import airflow

from airflow_atomic_store.versions import (
    MIN_AIRFLOW_VERSION,
    MIN_POSTGRES_PROVIDER_VERSION,
    check_airflow_version,
    check_postgres_provider_version,
    release,
)

check_airflow_version(airflow.__version__)

#: The UI lists plugins' ``external_views`` as navigation entries from 3.1 on.
EXTERNAL_VIEWS = release(airflow.__version__) >= (3, 1)
#: ... and renders plugins' ``react_apps`` in its own shell from 3.1 on (its host hands
#: them React on ``globalThis``; Chakra UI too from 3.2: ``ui/www/src/kit.tsx``).
REACT_APPS = release(airflow.__version__) >= (3, 1)

# Airflow's own way across the lines (apache-airflow-providers-common-compat, installed
# with every Airflow 3): the package's modules import these from there; they stay
# importable here for code that took them from this module.
from airflow.providers.common.compat.sdk import (  # noqa: E402
    AirflowFailException,
    AirflowNotFoundException,
    BaseHook,
    SkipMixin,
    Stats,
)

if TYPE_CHECKING:
    from airflow.api_fastapi.core_api.security import get_user as api_user
    from airflow.providers.postgres.hooks.postgres import PostgresHook


def __getattr__(name: str) -> Any:
    # ``PostgresHook`` is built on first use: the PostgreSQL provider loads only when a
    # postgres connection is opened.
    if name in _LAZY:
        globals()[name] = value = _LAZY[name]()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _postgres_hook() -> type[Any]:
    """The PostgreSQL provider's hook, made to connect with psycopg 3 on every line.

    The provider picks psycopg 3 only under SQLAlchemy 2; Airflow 3.0 requires
    SQLAlchemy 1.4, so there it would pick psycopg2. The store needs psycopg 3, and
    the connection arguments (host, IAM token, extras...) are the same for both
    drivers, so on 3.0 only the final connect is swapped.
    """
    from airflow.providers import postgres as provider
    from airflow.providers.postgres.hooks import postgres

    check_postgres_provider_version(provider.__version__)
    if postgres.USE_PSYCOPG3:
        return postgres.PostgresHook

    class PostgresHook(postgres.PostgresHook):
        def _create_connection(self, conn_args: dict[str, Any]) -> Any:
            import psycopg

            # A "cursor" extra becomes a psycopg2 cursor class; the store sets its own rows.
            conn_args = {k: v for k, v in conn_args.items() if k != "cursor_factory"}
            return psycopg.connect(**conn_args)

    return PostgresHook


def _api_user() -> Any:
    """A FastAPI dependency giving the signed-in user (401 without a credential).

    Airflow's own from 3.1 (it also honours the token-refresh middleware). 3.0's
    reads only the ``Authorization`` header, while its UI keeps the token in the
    ``_token`` cookie: a page opened in the browser must read the cookie too.
    """
    if release(airflow.__version__) >= (3, 1):
        from airflow.api_fastapi.core_api import security

        return security.get_user
    from airflow_atomic_store.ui.cookie_user import user_from_header_or_cookie

    return user_from_header_or_cookie


# Names built on first use: their imports are heavy or belong to one Airflow component.
_LAZY = {"PostgresHook": _postgres_hook, "api_user": _api_user}

__all__ = [
    "EXTERNAL_VIEWS",
    "MIN_AIRFLOW_VERSION",
    "MIN_POSTGRES_PROVIDER_VERSION",
    "REACT_APPS",
    "AirflowFailException",
    "AirflowNotFoundException",
    "BaseHook",
    "PostgresHook",
    "SkipMixin",
    "Stats",
    "api_user",
    "check_airflow_version",
    "check_postgres_provider_version",
]
