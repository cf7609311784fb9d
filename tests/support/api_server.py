"""Airflow's API server app in process, and clients signed in as the simple auth manager's users.

Shared by the UI page's and the task-instance tab's tests (tests/airflow/test_ui_*.py),
whose ``api_app`` fixture (tests/airflow/conftest.py) is the API server's own app
(``airflow.api_fastapi.app.create_app``) with the plugin mounted as Airflow mounts it,
in the environment :func:`api_server_environment` sets; ``client(app, role)`` requests it as an
anonymous user (no role), a ``viewer`` or an ``op``, with a real JWT from the auth
manager, as a Bearer header or the UI's ``_token`` cookie.
"""

from __future__ import annotations

from typing import Any

import pytest

#: The simple auth manager's users of these tests (user name = role).
USERS = "op:op,viewer:viewer"


def api_server_environment(patch: pytest.MonkeyPatch) -> None:
    patch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "test-secret-" + "x" * 64)
    patch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", USERS)
    # 3.0 signs tokens with issuer None unless one is set; today's PyJWT refuses that.
    patch.setenv("AIRFLOW__API_AUTH__JWT_ISSUER", "airflow-atomic-store-tests")


def token(role: str) -> str:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return get_auth_manager().generate_jwt(SimpleAuthManagerUser(username=role, role=role))


def client(app: Any, role: str | None = None, *, cookie: bool = False) -> Any:
    from fastapi.testclient import TestClient

    signed_in = TestClient(app, base_url="http://testserver")
    if role is not None and cookie:
        signed_in.cookies.set("_token", token(role))
    elif role is not None:
        signed_in.headers["Authorization"] = f"Bearer {token(role)}"
    return signed_in
