"""The signed-in user from a Bearer header or the UI's ``_token`` cookie (Airflow 3.0's gap).

Airflow 3.1+ resolves the user this way itself (``core_api.security.get_user``);
3.0's reads only the ``Authorization`` header while its UI keeps the token in the
cookie, so a page opened in the browser would never be signed in.
:mod:`airflow_atomic_store.compat` picks this one on 3.0 only. It lives in a module
of its own because FastAPI resolves a dependency's annotations from its module's
globals.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
from fastapi import HTTPException, Request, status
from jwt import ExpiredSignatureError, InvalidTokenError


async def user_from_header_or_cookie(request: Request) -> Any:
    """401 without a credential or with an expired one, 403 with an invalid one (as Airflow)."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    token = credentials if scheme.lower() == "bearer" else None
    token = token or request.cookies.get(COOKIE_NAME_JWT_TOKEN)
    if not token:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Not authenticated")
    try:
        return await get_auth_manager().get_user_from_token(token)
    except ExpiredSignatureError:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Token Expired") from None
    except InvalidTokenError:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Invalid JWT token") from None
