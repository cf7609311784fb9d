"""Who may see the page: a signed-in Airflow user whom the auth manager lets read connections.

A plugin's FastAPI app gets no authentication from the API server, so every route
depends on :func:`page_user`. The page reads a store through an Airflow
connection, with that connection's credentials, so it asks the auth manager the
question Airflow itself asks before showing a connection: may this user ``GET``
it (for one connection when the request names one, else connections in
general)? It also asks for the page's own custom view, ``Atomic Store``, so an
auth manager with per-view permissions (FAB, Keycloak) can grant or withhold
the page apart from the connections. With the simple auth manager that means
the ``op`` and ``admin`` roles; a ``viewer`` or ``user`` gets 403.
"""

from __future__ import annotations

from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails
from fastapi import Depends, HTTPException, Request, status

from airflow_atomic_store.compat import api_user

#: The custom view the auth manager is asked about (FAB lists it as a resource).
RESOURCE_NAME = "Atomic Store"
#: The query parameter that names the store connection.
CONN_PARAM = "conn"


def requested_conn_id(request: Request) -> str | None:
    """The connection a request names, as the page opens it (surrounding blanks dropped).

    The one reading of the parameter, for the access check and the store alike:
    checked as ``" secret "`` and opened as ``"secret"``, a refused connection was read.
    """
    return request.query_params.get(CONN_PARAM, "").strip() or None


def page_user(request: Request, user: Annotated[Any, Depends(api_user)]) -> Any:
    """The signed-in user, if the auth manager lets them read the page and the connection."""
    auth_manager = get_auth_manager()
    conn_id = requested_conn_id(request)
    allowed = auth_manager.is_authorized_custom_view(
        method="GET", resource_name=RESOURCE_NAME, user=user
    ) and (
        auth_manager.is_authorized_connection(method="GET", details=None, user=user)
        if conn_id is None
        else may_read_connection(user, conn_id)
    )
    if not allowed:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")
    return user


def may_read_connection(user: Any, conn_id: str) -> bool:
    """Whether ``user`` may read the connection ``conn_id`` under every name it resolves by.

    Airflow finds an ``AIRFLOW_CONN_*`` variable by ``conn_id.upper()``, and Unicode
    upper-casing is not ASCII's: ``"\u017fecret".upper()`` is ``"SECRET"``. So a
    request is checked under every id the lookup can land on (:func:`resolved_ids`),
    or a policy on ``secret_store`` is passed with ``\u017fecret_\u017ftore``.
    """
    auth_manager = get_auth_manager()
    return all(
        auth_manager.is_authorized_connection(
            method="GET", details=ConnectionDetails(conn_id=name), user=user
        )
        for name in resolved_ids(conn_id)
    )


def resolved_ids(conn_id: str) -> tuple[str, ...]:
    """``conn_id`` and each id a case-folding lookup may resolve it to, as policies name them.

    The environment lookup's own key (``upper()``) and that key in the lower case
    policies and the page list use; ``lower()`` and ``casefold()`` for secrets
    backends that fold the other way.
    """
    upper = conn_id.upper()
    spellings = (conn_id, upper, upper.lower(), conn_id.lower(), conn_id.casefold())
    return tuple(dict.fromkeys(spellings))


def login_url(back_to: str) -> str:
    """The auth manager's sign-in page, returning to ``back_to`` (this page) afterwards."""
    try:
        return get_auth_manager().get_url_login(next_url=back_to)
    except Exception:  # an auth manager without a sign-in page of its own: Airflow's home
        return "/"


PageUser = Annotated[Any, Depends(page_user)]
