"""PostgreSQL errors as the store's: retryable, refused for good, or a mutation's."""

from __future__ import annotations

import re

import psycopg

from airflow_atomic_store.exceptions import (
    AccessDeniedError,
    AtomicStoreError,
    MutationError,
    ResultTooLargeError,
    StoreUnavailableError,
)
from airflow_atomic_store.store.postgres import schema
from airflow_atomic_store.store.urls import scrub

#: SQLSTATE classes that mean "try again later": connection trouble,
#: lock/statement timeouts, serialisation failures, server shutdown.
_TRANSIENT_PREFIXES = ("08", "40", "53", "55P03", "57")
#: SQLSTATEs of a refusal for good: invalid authorization (28000, 28P01), a missing
#: privilege (42501), an unknown database (3D000).
_ACCESS_DENIED_PREFIXES = ("28", "42501", "3D000")
#: The same refusals when connecting, where libpq gives the server's text but no SQLSTATE.
#: PostgreSQL's own limit on one jsonb value, met before ``atomic_store_receipt_v1``
#: can measure a result built larger (SQLSTATE 54000, program_limit_exceeded).
_JSONB_TOO_LARGE = re.compile(r"total size of jsonb (?:array|object) elements exceeds the maximum")
JSONB_MAX_BYTES = 268_435_455
_ACCESS_DENIED_TEXT = re.compile(
    r"authentication failed"  # password (28P01), ident, peer, GSSAPI, LDAP, cert…
    r"|no password supplied"
    r"|pg_hba\.conf rejects connection|no pg_hba\.conf entry"  # 28000
    r"|is not permitted to log in"  # 28000
    r"|permission denied for database"  # 42501: no CONNECT privilege
    r'|(?:role|database) ".*" does not exist'  # 28000, 3D000
)


def schema_gone(exc: psycopg.Error) -> bool:
    """Whether a statement met the store's own schema missing: its tables or functions were
    dropped under an open store (42P01 undefined_table; 42883 for one of its functions).

    The schema is ensured when a connection opens, so the cure is a new connection,
    which creates it again: retryable, not the final error it used to be.
    """
    state = getattr(exc, "sqlstate", None)
    if state == "42P01":  # every relation a statement names is the store's
        return True
    message = exc.diag.message_primary or ""
    # 42883 is also "operator does not exist": only the store's functions count
    return state == "42883" and any(name in message for name in schema.FUNCTION_NAMES)


def translate(exc: psycopg.Error, secrets: tuple[str, ...]) -> AtomicStoreError:
    """The store's error for a driver error; ``secrets`` never appear in its text."""
    state = getattr(exc, "sqlstate", None) or ""
    text = scrub(str(exc), secrets)
    if schema_gone(exc):
        return StoreUnavailableError(
            f"PostgreSQL store unavailable: its schema is gone ({text}); "
            "the next call creates it again"
        )
    if state == schema.MUTATION_ERROR_SQLSTATE:
        diag = exc.diag
        return MutationError(diag.message_detail or "mutations", diag.message_primary or "")
    if state == schema.RESULT_TOO_LARGE_SQLSTATE:
        diag = exc.diag
        return ResultTooLargeError(int(diag.message_hint or 0), int(diag.message_detail or 0))
    if state == "54000" and _JSONB_TOO_LARGE.search(text):
        return ResultTooLargeError(JSONB_MAX_BYTES)
    if state.startswith(_ACCESS_DENIED_PREFIXES) or (
        not state and _ACCESS_DENIED_TEXT.search(text)
    ):
        return AccessDeniedError(
            f"PostgreSQL store access denied: {text}".strip()
            + " (check the connection's user, password and database, the server's "
            "pg_hba.conf and the role's grants; retrying cannot fix it)"
        )
    if state:  # the server said why: only some classes are worth a retry
        transient = state.startswith(_TRANSIENT_PREFIXES)
    else:  # no SQLSTATE: connecting failed, or the connection broke
        transient = isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))
    if transient:
        return StoreUnavailableError(f"PostgreSQL store unavailable: {text}".strip())
    return AtomicStoreError(f"PostgreSQL store error: {text}".strip())
